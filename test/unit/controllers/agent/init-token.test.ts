// The agent's /init of a pod's runtime (review 25 H2): a pod's runtime holds a token of its own
// from its creation, so the agent presents it; a claim's /init sets the claim's token in its place
// (the pod's stops working), a warm member's keeps it, and an agent that restarted after the claim
// presents the pod's token first, is refused, and then the claim's. A real runtime on loopback.
import type { Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { initRemote } from "../../../../controllers/agent/reconciler.ts";
import { HostView } from "../../../../controllers/runtime/host-view.ts";
import { createRuntime, type Runtime } from "../../../../controllers/runtime/runtime.ts";
import type { Intent } from "../../../../schema/protocol/index.ts";

let runtime: Runtime | undefined;
let server: Server | undefined;
afterEach(async () => {
  server?.close();
  await runtime?.close();
});

async function podRuntime(token: string): Promise<string> {
  runtime = createRuntime({ single: { view: new HostView(), options: { accessToken: token } } });
  server = await runtime.listen({ port: 0, host: "127.0.0.1" });
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}
const envs = (url: string, token?: string) => fetch(`${url}/envs`, { headers: token ? { "x-access-token": token } : {} }).then((r) => r.status);
const intent = (owner: "pool" | "sandbox", token: string | null, issuedAt = Date.now()) =>
  ({ sandboxId: "s1", owner: { kind: owner, id: "x" }, envdAccessToken: token, envVars: { A: "1" }, issuedAt }) as unknown as Intent;

describe("initRemote on a runtime that holds its pod's token", () => {
  it("refuses a request without the token, and an /init without it", async () => {
    const url = await podRuntime("pod-token");
    expect(await envs(url)).toBe(401);
    await expect(initRemote(url, intent("sandbox", "attacker"))).rejects.toThrow(/HTTP 401/);
    expect(await envs(url, "pod-token")).toBe(200);
  });

  it("a claim presents the pod's token and sets its own: the pod's stops working", async () => {
    const url = await podRuntime("pod-token");
    await initRemote(url, intent("sandbox", "claim-token"), ["pod-token"]);
    expect(await envs(url, "pod-token")).toBe(401);
    expect(await envs(url, "claim-token")).toBe(200);
  });

  it("a warm member's /init keeps the pod's token", async () => {
    const url = await podRuntime("pod-token");
    await initRemote(url, intent("pool", null), ["pod-token"]);
    expect(await envs(url)).toBe(401);
    expect(await envs(url, "pod-token")).toBe(200);
  });

  it("after a restart the pod's token is refused, then the claim's goes through (a newer /init)", async () => {
    const url = await podRuntime("pod-token");
    const t0 = Date.now();
    await initRemote(url, intent("sandbox", "claim-token", t0), ["pod-token"]);
    await initRemote(url, intent("sandbox", "claim-token", t0 + 1000), ["pod-token"]);
    expect(await envs(url, "claim-token")).toBe(200);
  });

  it("a claim made without a token leaves the runtime open, as E2B's secure:false asks", async () => {
    const url = await podRuntime("pod-token");
    await initRemote(url, intent("sandbox", null), ["pod-token"]);
    expect(await envs(url)).toBe(200);
  });
});
