// File metadata is kept on the file (user.e2b.* xattrs), so an agent restart, which starts a new
// runtime with empty memory, still returns it. This file runs its own system (not the shared one)
// because it restarts the agent. The sandbox's logs (E2B's logs routes) survive the restart too:
// the agent keeps them on its disk. Real e2b JS SDK against the whole local system.
import { ApiClient, ConnectionConfig, Sandbox } from "e2b";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, expect, it } from "vitest";
import { startSystem, type System } from "../../scripts/lib/system.ts";

let sys: System;
let dataDir: string;
const opts = () => ({ apiKey: sys.apiKey, apiUrl: sys.apiUrl, sandboxUrl: sys.apiUrl, requestTimeoutMs: 30_000 });

beforeAll(async () => {
  dataDir = mkdtempSync(join(tmpdir(), "sbx-meta-"));
  sys = await startSystem({ dataDir });
});
afterAll(async () => {
  await sys?.stop();
  rmSync(dataDir, { recursive: true, force: true });
});

it("metadata written through the API and set inside survive an agent restart", async () => {
  const sbx = await Sandbox.create(opts());
  try {
    await sbx.files.write("/home/user/kept.txt", "k", { metadata: { origin: "api" } });
    await sbx.commands.run(`python3 -c "import os; os.setxattr('/home/user/kept.txt', 'user.e2b.inside', b'yes')"`);
    await sys.stopAgent("SIGKILL");
    await sys.startAgent();
    const again = await Sandbox.connect(sbx.sandboxId, opts());
    // The new agent takes its running sandboxes back in the background; ask until it has.
    const info = await expect
      .poll(() => again.files.getInfo("/home/user/kept.txt").catch(() => undefined), { timeout: 30_000, interval: 250 })
      .toBeDefined()
      .then(() => again.files.getInfo("/home/user/kept.txt"));
    expect(info.metadata).toEqual({ origin: "api", inside: "yes" });
  } finally {
    await sbx.kill().catch(() => false);
  }
});

it("a sandbox's logs written before an agent restart are still served after it", async () => {
  const sbx = await Sandbox.create(opts());
  const api = new ApiClient(new ConnectionConfig(opts())).api;
  const messages = async () => {
    const res = await api.GET("/v2/sandboxes/{sandboxID}/logs", { params: { path: { sandboxID: sbx.sandboxId }, query: { limit: 1000 } } });
    return res.response.status === 200 ? res.data!.logs : undefined;
  };
  const ours = (logs: { message: string; fields: Record<string, string> }[] | undefined) =>
    logs?.find((e) => e.message === "process started" && e.fields.cmd?.includes("echo before-restart"));
  try {
    const run = await sbx.commands.run("echo before-restart", { background: true });
    await run.wait();
    await expect.poll(async () => ours(await messages()), { timeout: 30_000, interval: 250 }).toBeDefined();
    await sys.stopAgent("SIGKILL");
    await sys.startAgent();
    // The edge answers 503 until the new agent is linked; then the entry from before is there.
    const after = await expect.poll(async () => ours(await messages()), { timeout: 30_000, interval: 250 }).toBeDefined().then(messages);
    expect(ours(after)).toMatchObject({ fields: { pid: String(run.pid) } });
  } finally {
    await sbx.kill().catch(() => false);
  }
});
