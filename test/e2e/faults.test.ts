// Faults a real deployment sees: the agent killed mid-flight and the edge restarted. This file runs
// its own system (not the shared one) because it kills parts of it.
import { Sandbox } from "e2b";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startSystem, type System } from "../../scripts/lib/system.ts";
import { sleep } from "./sdk.ts";

let sys: System;
let dataDir: string;
const opts = () => ({ apiKey: sys.apiKey, apiUrl: sys.apiUrl, sandboxUrl: sys.apiUrl, requestTimeoutMs: 30_000 });

beforeAll(async () => {
  dataDir = mkdtempSync(join(tmpdir(), "sbx-faults-"));
  sys = await startSystem({ dataDir, baseReplicas: 2 });
});
afterAll(async () => {
  await sys?.stop();
  rmSync(dataDir, { recursive: true, force: true });
});

/** What the edge believes this cluster runs (claimed sandboxes and warm members). */
async function edgeSandboxes(): Promise<number> {
  const res = await fetch(`${sys.apiUrl}/admin/clusters/local`, { headers: { "x-api-key": sys.apiKey } });
  return ((await res.json()) as { sandboxes: number }).sandboxes;
}
/** What the local driver has on disk for this system. */
function driverSandboxes(): string[] {
  return readdirSync(join(dataDir, "agent/local/sandboxes"));
}

describe("faults", () => {
  it("kill -9 of the agent during 20 concurrent creates: every sandbox a client got works, nothing is orphaned", async () => {
    let settled = 0;
    const creates = Array.from({ length: 20 }, () =>
      Sandbox.create(opts())
        .then((s) => ({ ok: true as const, s }), (e: unknown) => ({ ok: false as const, e }))
        .finally(() => settled++),
    );
    await sleep(150);
    await sys.stopAgent("SIGKILL");
    // The fault must land mid-flight for the test to mean anything.
    expect(settled).toBeLessThan(20);
    await sleep(300);
    await sys.startAgent();
    const results = await Promise.all(creates);
    const told = results.filter((r) => r.ok).map((r) => r.s);
    expect(told.length).toBeGreaterThan(0);

    for (const sbx of told) {
      const r = await sbx.commands.run("echo alive");
      expect(r.stdout).toBe("alive\n");
    }

    // Converged: the driver runs exactly what the edge knows about, no more and no less.
    const deadline = Date.now() + 20_000;
    let edge = -1;
    let driver: string[] = [];
    while (Date.now() < deadline) {
      edge = await edgeSandboxes();
      driver = driverSandboxes();
      if (driver.length === edge) break;
      await sleep(250);
    }
    expect(driver.length).toBe(edge);
    for (const sbx of told) expect(driver).toContain(sbx.sandboxId);
    await Promise.all(told.map((s) => s.kill()));
  });

  it("restarting the edge keeps sandboxes reachable", async () => {
    const sbx = await Sandbox.create(opts());
    await sbx.files.write("/home/user/before.txt", "before restart");
    await sys.restartEdge();
    await sleep(500);
    const deadline = Date.now() + 20_000;
    let out = "";
    while (Date.now() < deadline) {
      out = await sbx.files.read("/home/user/before.txt").catch(() => "");
      if (out) break;
      await sleep(250);
    }
    expect(out).toBe("before restart");
    expect((await sbx.commands.run("echo after")).stdout).toBe("after\n");
    expect((await Sandbox.getInfo(sbx.sandboxId, opts())).state).toBe("running");
    await sbx.kill();
  });
});
