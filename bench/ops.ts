// Update ops on the local driver, the whole system as `npm start` runs it:
//   ops.upgrade_<N>_sandboxes_s   a SandboxUpdateOps run (Recreate, maxUnavailable 10%) over N
//                                 claimed running sandboxes, from the admin API's POST to phase
//                                 Completed (the time every sandbox had a new runtime on its files)
// N is OPS_BENCH_SANDBOXES (default 100; the issue names 1000, too many for a shared 2-core box).
//   node bench/run.ts ops
import { Sandbox } from "e2b";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startSystem } from "../scripts/lib/system.ts";
import type { Figures } from "./run.ts";
import { timedConcurrently } from "./stats.ts";

const N = Number(process.env.OPS_BENCH_SANDBOXES ?? 100);

export async function run(): Promise<Figures> {
  const dataDir = mkdtempSync(join(tmpdir(), "sbx-bench-ops-"));
  const sys = await startSystem({ dataDir, baseReplicas: 0, onExit: "destroy" });
  const admin = async (path: string, method = "GET", body?: unknown): Promise<any> => {
    const res = await fetch(`${sys.apiUrl}${path}`, { method, headers: { "content-type": "application/json", "x-api-key": sys.apiKey }, body: body === undefined ? undefined : JSON.stringify(body) });
    const text = await res.text();
    if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${text}`);
    return text ? JSON.parse(text) : null;
  };
  try {
    const tpl = "/admin/teams/admin/templates/opsbench";
    await admin(tpl, "PUT", { spec: { replicas: 0, memoryMB: 256, diskSizeMB: 64 } });
    const opts = { apiKey: sys.apiKey, apiUrl: sys.apiUrl, sandboxUrl: sys.apiUrl, timeoutMs: 3_600_000, metadata: { "label:bench": "ops" } };
    await timedConcurrently(N, 8, () => Sandbox.create("opsbench", opts));
    await admin(tpl, "PUT", { spec: { replicas: 0, memoryMB: 320, diskSizeMB: 64 } });
    const started = performance.now();
    await admin("/admin/teams/admin/updateops", "POST", { name: "bench", selector: { matchLabels: { bench: "ops" } }, updateStrategy: { maxUnavailable: "10%" } });
    let status: any;
    for (;;) {
      status = await admin("/admin/teams/admin/updateops/bench");
      if (status.phase === "Completed" || status.phase === "Failed") break;
      await new Promise((r) => setTimeout(r, 100));
    }
    const seconds = (performance.now() - started) / 1000;
    if (status.phase !== "Completed" || status.updatedReplicas !== N) throw new Error(`run ended ${status.phase}: ${JSON.stringify(status.conditions)}`);
    return { [`ops.upgrade_${N}_sandboxes_s`]: { value: seconds, unit: "s" } };
  } finally {
    await sys.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
}
