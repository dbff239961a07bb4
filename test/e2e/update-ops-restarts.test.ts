// An update ops run across restarts (the whole system, local driver, real SDK): the edge (workerd)
// restarted mid-run, the agent killed (SIGKILL) with an upgrade in flight and started again; the
// run still completes, every selected sandbox is upgraded exactly once (one start, one
// success, attempt 1) and none is skipped: each keeps its files and has a new runtime.
import { Sandbox } from "e2b";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startSystem, type System } from "../../scripts/lib/system.ts";
import { waitFor } from "../support/wait-for.ts";

let sys: System;
let dataDir: string;

beforeAll(async () => {
  dataDir = mkdtempSync(join(tmpdir(), "sbx-ops-restarts-"));
  sys = await startSystem({ dataDir, baseReplicas: 0, onExit: "destroy", log: () => {} });
});
afterAll(async () => {
  await sys?.stop();
  rmSync(dataDir, { recursive: true, force: true });
});

async function admin(path: string, method = "GET", body?: unknown): Promise<any> {
  const res = await fetch(`${sys.apiUrl}${path}`, { method, headers: { "content-type": "application/json", "x-api-key": sys.apiKey }, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${text}`);
  return text ? JSON.parse(text) : null;
}

describe("update ops across restarts", () => {
  it("an edge restart and an agent kill mid-run: nothing upgraded twice, nothing skipped", async () => {
    const opts = { apiKey: sys.apiKey, apiUrl: sys.apiUrl, sandboxUrl: sys.apiUrl, requestTimeoutMs: 30_000, timeoutMs: 600_000, metadata: { "label:ops": "restarts" } };
    const tpl = "/admin/teams/admin/templates/opsr";
    await admin(tpl, "PUT", { spec: { replicas: 0, memoryMB: 256, diskSizeMB: 64 } });
    const boxes: Sandbox[] = [];
    for (let i = 0; i < 4; i++) boxes.push(await Sandbox.create("opsr", opts));
    for (const s of boxes) {
      await s.files.write("/home/user/keep.txt", s.sandboxId);
      await s.commands.run("sleep 100002", { background: true });
    }
    await admin(tpl, "PUT", { spec: { replicas: 0, memoryMB: 288, diskSizeMB: 64 } });
    await admin("/admin/teams/admin/updateops", "POST", { name: "restarts", selector: { matchLabels: { ops: "restarts" } }, updateStrategy: { maxUnavailable: 1 } });
    const status = () => admin("/admin/teams/admin/updateops/restarts");
    const reached = (n: number) => waitFor(async () => (await status()).updatedReplicas >= n, { what: `${n} upgraded`, timeoutMs: 60_000, intervalMs: 100 });

    // Paused after the first upgrade, so the restarts land with sandboxes still to do.
    await reached(1);
    await admin("/admin/teams/admin/updateops/restarts", "PATCH", { paused: true });
    await sys.restartEdge();
    const mid = await status();
    expect(mid).toMatchObject({ phase: "Updating", conditions: [{ reason: "Paused" }] });
    expect(mid.updatedReplicas).toBeLessThan(4);
    await sys.stopAgent("SIGKILL");
    // Unpaused while the agent is down: the next upgrade is sent and waits for it.
    await admin("/admin/teams/admin/updateops/restarts", "PATCH", { paused: false });
    await waitFor(async () => (await status()).updatingReplicas === 1, { what: "an upgrade in flight", timeoutMs: 30_000 });
    await sys.startAgent();
    const done = await waitFor(
      async () => {
        const s = await status();
        return s.phase === "Completed" || s.phase === "Failed" ? s : undefined;
      },
      { what: "the run to finish", timeoutMs: 120_000, intervalMs: 200 },
    );
    expect(done, JSON.stringify(done)).toMatchObject({ phase: "Completed", replicas: 4, updatedReplicas: 4, failedReplicas: 0 });
    for (const line of done.sandboxes) expect(line).toMatchObject({ status: "Succeeded", attempt: 1 });
    for (const s of boxes) {
      const of = (reason: string) => done.events.filter((e: { reason: string; sandboxId?: string }) => e.reason === reason && e.sandboxId === s.sandboxId);
      expect(of("UpgradeStarted")).toHaveLength(1);
      expect(of("UpgradeSucceeded")).toHaveLength(1);
      const back = await Sandbox.connect(s.sandboxId, opts);
      expect(await back.files.read("/home/user/keep.txt")).toBe(s.sandboxId);
      expect((await back.commands.run("pgrep -cf '^sleep 10000[2]' || true")).stdout.trim()).toBe("0");
    }
  });
});
