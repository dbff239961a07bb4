// File metadata is kept on the file (user.e2b.* xattrs), so an agent restart, which starts a new
// runtime with empty memory, still returns it. This file runs its own system (not the shared one)
// because it restarts the agent. Real e2b JS SDK against the whole local system.
import { Sandbox } from "e2b";
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
