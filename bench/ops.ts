// Update ops on the local driver, the whole system as `npm start` runs it:
//   ops.upgrade_<N>_sandboxes_s   a SandboxUpdateOps run (Recreate, maxUnavailable 10%) over N
//                                 claimed running sandboxes, from the admin API's POST to phase
//                                 Completed (the time every sandbox had a new runtime on its files)
// N is OPS_BENCH_SANDBOXES (default 100; the issue names 1000). Creating stops early when the
// machine runs low on memory or creates keep failing; the figure then names the count reached.
//   node bench/run.ts ops
import { Sandbox } from "e2b";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
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
  const sandboxes: Sandbox[] = [];
  try {
    const tpl = "/admin/teams/admin/templates/opsbench";
    await admin(tpl, "PUT", { spec: { replicas: 0, memoryMB: 256, diskSizeMB: 64 } });
    const opts = { apiKey: sys.apiKey, apiUrl: sys.apiUrl, sandboxUrl: sys.apiUrl, timeoutMs: 3_600_000, metadata: { "label:bench": "ops" } };
    // Creates until N, or until the machine cannot hold more (what stops it is reported): each
    // sandbox's processes, disk and network are real, and a shared 2-core box may run out first.
    const made = await createUpTo(N, async () => sandboxes.push(await Sandbox.create("opsbench", opts)));
    const n = made.count;
    await admin(tpl, "PUT", { spec: { replicas: 0, memoryMB: 320, diskSizeMB: 64 } });
    const started = performance.now();
    await admin("/admin/teams/admin/updateops", "POST", { name: "bench", selector: { matchLabels: { bench: "ops" } }, updateStrategy: { maxUnavailable: "10%" } });
    let status: any;
    for (let logged = 0; ; ) {
      status = await admin("/admin/teams/admin/updateops/bench");
      if (status.phase === "Completed" || status.phase === "Failed") break;
      const elapsed = (performance.now() - started) / 1000;
      if (elapsed > RUN_BUDGET_S) throw new Error(`the run took over ${RUN_BUDGET_S} s: ${status.updatedReplicas} of ${n} upgraded, ${status.failedReplicas} failed`);
      if (status.updatedReplicas >= logged + 100) {
        logged = status.updatedReplicas;
        console.error(`ops bench: ${logged} of ${n} upgraded in ${elapsed.toFixed(0)} s, load ${loadavg()[0]!.toFixed(1)}`);
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    const seconds = (performance.now() - started) / 1000;
    // A run that ended with some sandboxes failed still measured the rest: both are reported.
    if (status.updatedReplicas + status.failedReplicas !== n) throw new Error(`run ended ${status.phase}: ${JSON.stringify(status.conditions)}`);
    const figures: Figures = {
      [`ops.upgrade_${n}_sandboxes_s`]: { value: seconds, unit: "s" },
      "ops.upgrade_failed_sandboxes": { value: status.failedReplicas, unit: "" },
      "ops.bench_create_s": { value: made.seconds, unit: "s" },
      "ops.bench_loadavg_1m": { value: loadavg()[0]!, unit: "" },
    };
    for (const l of status.sandboxes.filter((x: { status: string }) => x.status === "Failed")) console.error(`ops bench: ${l.id} failed: ${l.message}`);
    if (made.stopped) console.error(`ops bench: stopped creating at ${n} of ${N}: ${made.stopped}`);
    return figures;
  } finally {
    // Killed through the API first: the agent's own destroy at stop has 10 s, too few for hundreds.
    await timedConcurrently(sandboxes.length, 8, (i) => sandboxes[i]!.kill().catch(() => false));
    // The agent destroys them after the kills are answered: wait (bounded) until its sandboxes are
    // gone, or its stop's SIGKILL leaves mounts and processes behind (it did, at 884).
    const left = join(dataDir, "agent", "local", "sandboxes");
    for (const until = Date.now() + 600_000; Date.now() < until; await new Promise((r) => setTimeout(r, 1000))) {
      if (!existsSync(left) || readdirSync(left).length === 0) break;
    }
    await sys.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

/** Memory the kernel says is available (MemAvailable), in MiB. */
function availableMiB(): number {
  const m = /MemAvailable:\s+(\d+) kB/.exec(readFileSync("/proc/meminfo", "utf8"));
  return m ? Number(m[1]) / 1024 : Number.POSITIVE_INFINITY;
}

/** Stops below this much available memory (the machine is shared). */
const MIN_AVAILABLE_MIB = 3072;
/** Stops creating after this long (OPS_BENCH_CREATE_BUDGET_S; the root-test lock is shared). */
const CREATE_BUDGET_S = Number(process.env.OPS_BENCH_CREATE_BUDGET_S ?? Number.POSITIVE_INFINITY);
/** Gives up on the run after this long (OPS_BENCH_RUN_BUDGET_S), saying how far it got. */
const RUN_BUDGET_S = Number(process.env.OPS_BENCH_RUN_BUDGET_S ?? Number.POSITIVE_INFINITY);

/** `create` 8 at a time up to `n`; stops early when available memory runs low, the time budget
 * is spent or creates keep failing, and says why. Progress every 50 on stderr (count, seconds, available memory). */
async function createUpTo(n: number, create: () => Promise<unknown>): Promise<{ count: number; seconds: number; stopped?: string }> {
  const started = performance.now();
  let count = 0;
  let next = 0;
  let failures = 0;
  let stopped: string | undefined;
  await Promise.all(
    Array.from({ length: 8 }, async () => {
      while (next < n && !stopped) {
        next++;
        const elapsed = (performance.now() - started) / 1000;
        if (availableMiB() < MIN_AVAILABLE_MIB) stopped = `MemAvailable ${Math.round(availableMiB())} MiB < ${MIN_AVAILABLE_MIB} MiB`;
        else if (elapsed > CREATE_BUDGET_S) stopped = `creating took over ${CREATE_BUDGET_S} s (${(count / elapsed).toFixed(2)} sandboxes/s: ${n} would take about ${Math.round(n / (count / elapsed))} s)`;
        if (stopped) break;
        try {
          await create();
          count++;
          if (count % 50 === 0) console.error(`ops bench: ${count} sandboxes in ${((performance.now() - started) / 1000).toFixed(0)} s, MemAvailable ${Math.round(availableMiB())} MiB`);
        } catch (err) {
          if (++failures >= 5) stopped = `5 creates failed, the last: ${(err as Error).message}`;
        }
      }
    }),
  );
  return { count, seconds: (performance.now() - started) / 1000, stopped };
}
