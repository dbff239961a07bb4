// The shared agent-runtime serving local sandboxes through their SandboxViews, as the agent embeds
// it: one runtime, requests routed by E2b-Sandbox-Id, each process started inside its own sandbox.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LocalDriver } from "../../../../controllers/drivers/local/local-driver.ts";
import { createRuntime, type Runtime } from "../../../../controllers/runtime/runtime.ts";
import { envelope, parseEnvelopes } from "../../../runtime/support/connect-wire.ts";

const dataDir = mkdtempSync(join(tmpdir(), "local-shared-runtime-"));
const driver = new LocalDriver({ dataDir, cgroupName: `kruise-test-${process.pid}-shared` });
const ids = [`sr${process.pid}a`, `sr${process.pid}b`];
let runtime: Runtime;
let base = "";

async function run(id: string, script: string, user = "user"): Promise<string> {
  const res = await fetch(`${base}/process.Process/Start`, {
    method: "POST",
    headers: {
      "content-type": "application/connect+json",
      "connect-protocol-version": "1",
      "e2b-sandbox-id": id,
      "x-access-token": `tok-${id}`,
      authorization: `Basic ${Buffer.from(`${user}:`).toString("base64")}`,
    },
    body: new Uint8Array(envelope({ process: { cmd: "/bin/bash", args: ["-c", script] }, stdin: false })),
  });
  expect(res.status).toBe(200);
  let out = "";
  for (const e of parseEnvelopes(Buffer.from(await res.arrayBuffer()))) {
    const data = e.json?.event?.data?.stdout;
    if (data) out += Buffer.from(data, "base64").toString();
  }
  return out;
}

beforeAll(async () => {
  runtime = createRuntime();
  for (const id of ids) {
    await driver.ensure({ id, generation: 1, template: "base", state: "Running", pauseStrategy: "Freeze", resources: { cpuCount: 1, memoryMB: 256 }, allowInternetAccess: false });
    runtime.addSandbox(id, driver.view(id), { accessToken: `tok-${id}`, defaultUser: "user", defaultWorkdir: "/home/user" });
  }
  const server = await runtime.listen({ port: 0, host: "127.0.0.1" });
  base = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
});

afterAll(async () => {
  await runtime?.close();
  for (const id of ids) await driver.destroy(id);
  await driver.dispose();
  rmSync(dataDir, { recursive: true, force: true });
});

describe("one agent-runtime, many local sandboxes", () => {
  it("runs each command inside the sandbox named by E2b-Sandbox-Id, as the requested user", async () => {
    const [a, b] = ids as [string, string];
    await run(a, "echo only-in-a > mark");
    expect(await run(a, "id -un; pwd; hostname; cat mark")).toBe(`user\n/home/user\n${a}\nonly-in-a\n`);
    expect(await run(b, "id -un; hostname; cat mark 2>/dev/null || echo no-mark")).toBe(`user\n${b}\nno-mark\n`);
    expect(await run(b, "id -u; cd ~ && pwd", "root")).toBe("0\n/root\n");
  });
});
