// Waking a paused auto-resume sandbox from the data plane (review24 edge F4): only a request that
// carried the sandbox's token wakes it. envd's /health and a signed /files URL pass the gateway
// without one (envd judges them), so anyone can send them: they get what a sandbox without
// auto-resume answers, E2B's 502, and the sandbox stays paused (no quota taken, no postResume hook).
// The scripted agent has no ingress: a request let through to the forward ends in the gateway's 503.
import { exports } from "cloudflare:workers";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ScriptedAgent } from "../support/scripted-agent.ts";
import { call, createTeam, expectStatus, startAgent, unique, type TestTeam } from "./helpers.ts";

let team: TestTeam;
let agent: ScriptedAgent;

beforeAll(async () => {
  team = await createTeam(unique("wake"), { replicas: 1 });
  agent = await startAgent(team.cluster);
  await agent.waitUntil(() => agent.running().length >= 1);
});
afterAll(() => agent.disconnect());

const state = async (id: string) => (await expectStatus(call(`/sandboxes/${id}`, { key: team.key }), 200)).state;
const gw = (id: string, path: string, headers: Record<string, string> = {}) => exports.default.fetch(`http://edge.test${path}`, { headers: { "e2b-sandbox-id": id, ...headers } });

describe("a paused auto-resume sandbox", () => {
  it("stays paused for /health and signed /files without its token (502, as without auto-resume), and wakes for a request with it", async () => {
    const sbx = await expectStatus(call("/v2/sandboxes", { key: team.key, body: { templateID: team.template, autoPause: true, autoResume: { enabled: true }, timeout: 300 } }), 201);
    await expectStatus(call(`/sandboxes/${sbx.sandboxID}/pause`, { key: team.key, body: {} }), 204);
    for (const [path, headers] of [
      ["/health", {}],
      ["/health", { "x-access-token": "wrong" }],
      ["/files?path=/x&signature=junk", {}],
      [`/files?path=/x&signature=v1_${"A".repeat(43)}&signature_expiration=${Math.floor(Date.now() / 1000) + 60}`, {}],
    ] as [string, Record<string, string>][]) {
      const res = await gw(sbx.sandboxID, path, headers);
      expect({ path, status: res.status, body: await res.json() }).toEqual({ path, status: 502, body: { sandboxId: sbx.sandboxID, message: "The sandbox was not found", code: 502 } });
      expect(await state(sbx.sandboxID)).toBe("paused");
    }
    const refused = await gw(sbx.sandboxID, "/files?path=/x", { "x-access-token": "wrong" });
    expect(refused.status).toBe(401);
    expect(await state(sbx.sandboxID)).toBe("paused");

    // The token wakes it (the request then reaches the forward: 503, the agent has no ingress).
    const woke = await gw(sbx.sandboxID, "/health", { "x-access-token": sbx.envdAccessToken });
    await woke.body?.cancel();
    expect(await state(sbx.sandboxID)).toBe("running");
  });
});

// An unnamed signed /files URL (review24 edge F11): no key, no token, no sandbox id, and the runtime
// would match it against every sandbox's token. What cannot be any sandbox's signature is envd's
// 401 at the edge; a well-formed one goes on (here to the 503 of a cluster with no ingress).
describe("an unnamed signed /files request", () => {
  const unnamed = (query: string, method = "GET") => exports.default.fetch(`http://edge.test/files?path=/x&${query}`, { method });
  const wellFormed = `signature=${encodeURIComponent(`v1_${"Ab+/".repeat(10)}xyz`)}`;
  const now = () => Math.floor(Date.now() / 1000);

  it("is refused at the edge with envd's 401 when its signature is not envd's syntax or its expiration is past or not a number", async () => {
    for (const [query, message] of [
      ["signature=junk", "invalid signature"],
      ["signature=v1_x", "invalid signature"],
      [`signature=v1_${"A".repeat(44)}`, "invalid signature"],
      [`signature=v2_${"A".repeat(43)}`, "invalid signature"],
      [`${wellFormed}&signature_expiration=${now() - 10}`, "signature is already expired"],
      [`${wellFormed}&signature_expiration=1e12`, "invalid signature expiration"],
      [`${wellFormed}&signature_expiration=-1`, "invalid signature expiration"],
      [`${wellFormed}&signature_expiration=${"9".repeat(40)}`, "invalid signature expiration"],
      [`${wellFormed}&signature_expiration=`, "invalid signature expiration"],
    ]) {
      for (const method of ["GET", "POST"]) {
        const res = await unnamed(query!, method);
        expect({ query, method, status: res.status, body: await res.json() }).toEqual({ query, method, status: 401, body: { code: 401, message } });
      }
    }
  });

  it("goes on to the cluster when well-formed, with a future expiration or none (the SDK's default)", async () => {
    for (const query of [wellFormed, `${wellFormed}&signature_expiration=${now() + 60}`]) {
      const res = await unnamed(query);
      await res.body?.cancel();
      expect({ query, status: res.status }).toEqual({ query, status: 503 });
    }
  });
});
