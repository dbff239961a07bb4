// The holder's two shapes side by side in one process, interleaved (A first in even rounds, B in
// odd): A = bwrap's own pid 1 over `sleep infinity` (`init: false`, as a holder of 2e0ce2c3),
// B = the host's init as pid 1 (sandbox-init.ts, the default). Per round and side: N `base`
// sandboxes started one at a time (each `ensure`'s latency), then, after a second, the PSS and
// private memory (smaps_rollup) of each holder's processes (outer bwrap, pid 1 and pid 1's
// children), then all destroyed. Run as root under the machine's test lock:
//   node bench/holder-shape.ts [sandboxes=10] [rounds=4]
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { LocalDriver } from "../controllers/drivers/local/local-driver.ts";
import { layoutFor } from "../controllers/drivers/local/layout.ts";
import { readRecord } from "../controllers/drivers/local/records.ts";
import { median, minMax, percentile, pssKB } from "./stats.ts";

const [n = "10", rounds = "4"] = process.argv.slice(2);

function privateKB(pid: number): number {
  try {
    const rollup = readFileSync(`/proc/${pid}/smaps_rollup`, "utf8");
    return [...rollup.matchAll(/^Private_(?:Clean|Dirty):\s+(\d+)/gm)].reduce((a, m) => a + Number(m[1]), 0);
  } catch {
    return 0;
  }
}

function childrenOf(pid: number): number[] {
  try {
    return readFileSync(`/proc/${pid}/task/${pid}/children`, "utf8").split(" ").filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

type Side = "A" | "B";
const seen: Record<Side, { startMs: number[]; pssKB: number[]; privateKB: number[]; processes: number[] }> = {
  A: { startMs: [], pssKB: [], privateKB: [], processes: [] },
  B: { startMs: [], pssKB: [], privateKB: [], processes: [] },
};
for (let r = 0; r < Number(rounds); r++) {
  for (const side of (r % 2 ? ["B", "A"] : ["A", "B"]) as Side[]) {
    const dataDir = mkdtempSync(join(tmpdir(), `holder-shape-${side}-`));
    const driver = new LocalDriver({ dataDir, cgroupName: `holder-shape-${process.pid}-${side}${r}`, init: side === "B", pid1CheckMs: 3_600_000 });
    const ids: string[] = [];
    try {
      for (let i = 0; i < Number(n); i++) {
        const id = `hs${process.pid}${side}${r}x${i}`;
        const t = performance.now();
        await driver.ensure({ id, generation: 1, template: "base", state: "Running", pauseStrategy: "Freeze", resources: { cpuCount: 1, memoryMB: 256 }, allowInternetAccess: false });
        seen[side].startMs.push(performance.now() - t);
        ids.push(id);
      }
      await sleep(1000);
      for (const id of ids) {
        const rec = readRecord(layoutFor(dataDir, id).record)!;
        const pids = [rec.holder!.pid, rec.nsInit!.pid, ...childrenOf(rec.nsInit!.pid)];
        seen[side].pssKB.push(pids.reduce((a, p) => a + pssKB(p), 0));
        seen[side].privateKB.push(pids.reduce((a, p) => a + privateKB(p), 0));
        seen[side].processes.push(pids.length);
      }
    } finally {
      for (const id of ids) await driver.destroy(id);
      await driver.dispose();
      rmSync(dataDir, { recursive: true, force: true });
    }
  }
}
const load = readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ");
for (const side of ["A", "B"] as Side[]) {
  const s = seen[side];
  console.log(JSON.stringify({
    side,
    shape: side === "A" ? "bwrap init + sleep (init: false)" : "host init (--as-pid-1)",
    start_ms: { p50: median(s.startMs), p10: percentile(s.startMs, 10), p90: percentile(s.startMs, 90), n: s.startMs.length },
    holder_pss_kb: { p50: median(s.pssKB), minMax: minMax(s.pssKB) },
    holder_private_kb: { p50: median(s.privateKB), minMax: minMax(s.privateKB) },
    processes: median(s.processes),
    load,
  }));
}
