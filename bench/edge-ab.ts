// A/B of the edge's create path: `node bench/edge-ab.ts [--base <git rev>] [--rounds n] [--creates n]
// [--replicas n]` builds the edge bundle of <git rev> (default HEAD, from `git archive`, the
// checkout untouched) and of the working tree, serves both on workerd at once against one sqld,
// and runs the 50-client create load on each in alternating rounds. On this shared 2-core machine
// one `npm run bench -- edge` moves by ±15 % from run to run with the load of other processes;
// interleaved rounds see the same load, so a change of a few percent in workerd CPU per create
// shows. Prints workerd CPU per create, creates/s and p50 per round, and the medians.
// Not part of `npm run bench` (it writes no figures): a tool for deciding whether a cut pays.
// `--calls`: both sides count every invocation of the edge with a tail Worker (scripts/lib/edge.ts,
// `invocationCounterPort`), and it prints the Durable Object calls per create by class and
// method, the refill of the claimed members included (it lands within the settle after each window).
// The tail Worker adds CPU on both sides, so take the CPU figures of such a run only as a ratio.
// Fairness (notes s13-obs): the order of the sides rotates every round (A B C, B C A, C A B, …: each
// side runs in each position equally often), and before every window all pools are full again and
// the system's processes (every workerd, sqld, the collector) have been idle for a while, so no
// window carries the previous side's background work (its claimed members' refill, its last
// export). Each window is timed in its steady state only: from LEAD_MS after its first create
// (past the first export, which exports the spans of that first second as later exports do) for
// a whole number of export periods (`--period`, default the edge's FLUSH_MS, 1 s; a multiple of
// every side's interval when the sides' differ; the settle's idle spell is 1.5 periods), ending
// at the last period's end before the completion of its last create but CLIENTS (from then fewer
// than CLIENTS are in flight). A traced isolate exports once per period, each export carrying the last
// period's spans, so a window of k periods carries k exports for k periods of creates, whatever
// the exports' phase; a window of any other length carries one export too many or too few (a
// window from 1 s to 3.2 s carries the exports at about 1.1, 2.1 and 3.1 s: 3 s of spans' export
// for 2.2 s of creates). The window to the drain, unaligned, is printed beside it as a check.
// What a side costs after its window (the refill of what it claimed, its last export) is printed
// as its tail.
// `--control`: one more side, A′, a second copy of A (its bundle and setting): A′/A is the null
// ratio, what position and chance alone give (1.00 within its spread for a fair tool).
// The estimator: each window's figure (creates/s, workerd CPU per create) over its reference,
// the geometric mean of the reference side's windows just before and just after it in time (the
// nearest one at the run's ends), so a drift in the other engineers' load cancels as far as it is
// linear over those few windows. The reference of every side but A′ is both untraced copies: A's
// and A′'s windows either side of it (up to four; with `--control`), so one copy running slow in
// a run (s13's fourth quiet run: A′/A 0.94) no longer drags every figure with it, and the
// reference has twice the windows. A′'s own reference stays A alone: the null ratio A′/A is the
// check of the pair the others are measured against, printed beside the figure; a figure is worth
// what the null ratio's distance from 1.00 and its spread allow.
// `--tracing`: both sides serve the working tree, B with OTEL_EXPORTER_OTLP_ENDPOINT to a real
// collector (tools/otelcol), and it prints `obs.tracing_overhead_ratio`: the median over rounds of
// B's creates/s over A's, with the spread (with `--control`, `obs.tracing_null_ratio` beside it);
// and each process's CPU per create (workerd, sqld, the collector, this process's clients and
// scripted agent, the whole machine), and the ratio the system's own CPU per create gives.
// `--tracing --base <rev>`: both sides trace to the collector, A the bundle of <rev>, B the working
// tree's: what a change to the tracing path saves, the rest of the figures as with `--tracing`.
// `--tracing --also <rev> [--also <rev2>…]`: more sides C, D…, each the bundle of a revision
// traced to the collector, in the same rotation (A, B, C, …), their figures against A's as B's
// are: e.g. the tracing path before a change, and a floor (a build that records spans and never
// exports: what the export costs, and the least tracing can cost), all in the same run.
// `--profile <prefix>`: a V8 CPU profile of each side's isolate over each of its rounds, to
// <prefix>.<A|B>.<round>.cpuprofile (both sides carry the inspector's cost, so a function's samples
// per create, B's against A's, show what B adds; take that run's other figures as a profile only).
// `--scrapes n`: after the rounds, each side's workerd CPU per `/admin/metrics` scrape (n each, in
// alternating batches of 20).
// `--disk`: both sides serve the working tree, A with its Durable Object storage on tmpfs (as the
// edge bench), B on the disk (as `npm start` and the e2e bench): what the disk's commits cost.
import { spawnSync } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { startEdge, type Edge } from "../scripts/lib/edge.ts";
import { freePort, startSqld } from "../scripts/lib/sqld.ts";
import { migrate } from "../scripts/migrate.ts";
import { seed } from "../scripts/seed.ts";
import { ScriptedAgent, tcpTransport } from "../test/support/scripted-agent.ts";
import { startCollector, type Collector } from "../test/support/otel-collector.ts";
import { cpuMs, median, timedConcurrently } from "./stats.ts";
import { startProfiler } from "./v8-profile.ts";

const ROOT = resolve(import.meta.dirname, "..");
const ADMIN_KEY = `e2b_${"0".repeat(38)}ab`;
const CLUSTER_TOKEN = "ab-cluster-token";
const CLIENTS = 50;

const { values: opt } = parseArgs({
  options: {
    base: { type: "string", default: "HEAD" },
    also: { type: "string", multiple: true, default: [] },
    rounds: { type: "string", default: "6" },
    creates: { type: "string", default: "1500" },
    replicas: { type: "string", default: "600" },
    tracing: { type: "boolean", default: false },
    calls: { type: "boolean", default: false },
    disk: { type: "boolean", default: false },
    profile: { type: "string" },
    control: { type: "boolean", default: false },
    scrapes: { type: "string", default: "0" },
    period: { type: "string", default: "1000" },
  },
});
const rounds = Number(opt.rounds);
const creates = Number(opt.creates);
const replicas = Number(opt.replicas);
/** The steady state's unit (ms): the edge's export interval, FLUSH_MS in edge-tracing.ts. */
const period = Number(opt.period);

const tmp = mkdtempSync("/dev/shm/sbx-edge-ab-");
const sqld = await startSqld({ dir: join(tmp, "sqld") });
const onDisk = mkdtempSync(join(tmpdir(), "sbx-edge-ab-disk-"));
type Side = {
  key: string; // A, B, C…, A2 (the control): names its profiles
  name: string;
  edge: Edge;
  agent: ScriptedAgent;
  cpu: number[];
  rate: number[];
  drainCpu: number[]; // the same over the unaligned window, from LEAD_MS to the drain (s13's)
  drainRate: number[];
  p50: number[];
  tail: number[]; // workerd CPU after the window until the system was idle, ms per create
  seq: number[]; // each window's place in the run (0, 1, 2… over every side's windows)
  others: Record<string, number[]>;
  threads: Record<string, number[]>; // workerd's CPU per create by thread (see `threadsCpu`)
  counter?: number;
  calls: Record<string, number>;
  inspectorPort?: number;
};
/** A window's steady state starts this long after its first create (past the first export). */
const LEAD_MS = 1_000;
/** Idle, for `settle`: under QUIET_MS of CPU in QUIET_WINDOW_MS (half as long again as the export period, so a pending last export shows). */
const QUIET_WINDOW_MS = Math.max(1_500, 1.5 * period);
const QUIET_MS = 30;
const sides: Side[] = [];
let collector: Collector | undefined;
try {
  await migrate(sqld.url);
  await seed({ libsqlUrl: sqld.url, adminApiKey: ADMIN_KEY, pepper: "ab-pepper", baseReplicas: 0 });
  const tree = checkout(opt.base, join(tmp, "base-tree"));
  const bothTraced = opt.tracing && opt.base !== "HEAD";
  const bundles: Record<string, string> = bothTraced
    ? { [`A (${opt.base}, traced)`]: join(tmp, "bundle-a"), "B (working tree, traced)": join(tmp, "bundle-b") }
    : opt.tracing
    ? { "A (tracing off)": join(tmp, "bundle-b"), "B (tracing to a collector)": join(tmp, "bundle-b") }
    : opt.disk
      ? { "A (storage on tmpfs)": join(tmp, "bundle-b"), "B (storage on disk)": join(tmp, "bundle-b") }
      : { [`A (${opt.base})`]: join(tmp, "bundle-a"), "B (working tree)": join(tmp, "bundle-b") };
  if ((!opt.tracing && !opt.disk) || bothTraced) build(tree, join(tmp, "bundle-a"));
  build(ROOT, join(tmp, "bundle-b"));
  for (const [i, rev] of (opt.tracing ? opt.also : []).entries()) {
    const side = String.fromCharCode(67 + i); // C, D, …
    build(checkout(rev, join(tmp, `tree-${side}`)), join(tmp, `bundle-${side}`));
    bundles[`${side} (${rev}, traced)`] = join(tmp, `bundle-${side}`);
  }
  if (opt.tracing) collector = await startCollector(tmp);
  const vars = { LIBSQL_URL: sqld.url, KEY_PEPPER: "ab-pepper", ADMIN_API_KEY: ADMIN_KEY, CLUSTER_TOKEN };
  const entries = Object.entries(bundles).map(([name, bundle], i) => ({ key: name[0]!, name, bundle, traced: i >= 1 || bothTraced }));
  // The control: A again, its own workerd serving A's bundle with A's settings (its storage beside
  // the others', on tmpfs).
  if (opt.control) entries.push({ ...entries[0]!, key: "A2", name: `A′ (control: ${entries[0]!.name.slice(3, -1)})` });
  for (const { key, name, bundle, traced: isTraced } of entries) {
    const dir = opt.disk && sides.length === 1 ? onDisk : join(tmp, `edge-${sides.length}`);
    cpSync(bundle, join(dir, "bundle"), { recursive: true });
    const traced: Record<string, string> = collector && isTraced ? { OTEL_EXPORTER_OTLP_ENDPOINT: collector.endpoint } : {};
    const counter = opt.calls ? await freePort() : undefined;
    const inspectorPort = opt.profile ? await freePort() : undefined;
    const edge = await startEdge({ dir, vars: { ...vars, ...traced }, skipBuild: true, invocationCounterPort: counter, inspectorPort });
    const agent = new ScriptedAgent({ agentId: `ab-${sides.length}` });
    await agent.connect(tcpTransport(edge.url, CLUSTER_TOKEN, "local"));
    sides.push({ key, name, edge, agent, cpu: [], rate: [], drainCpu: [], drainRate: [], p50: [], tail: [], seq: [], others: {}, threads: {}, counter, calls: {}, inspectorPort });
  }
  for (const s of sides) {
    await api(s.edge.url, "/admin/teams/admin/templates/ab", { method: "PUT", body: JSON.stringify({ spec: { replicas } }) });
    await waitAvailable(s.edge.url, replicas);
    await timedConcurrently(300, CLIENTS, () => create(s.edge.url)); // JIT, objects, caches
  }
  // The collector's CPU over every round, set against B's creates: one round's is a tick or two
  // (10 ms).
  const collectorFrom = collector ? cpuMs(collector.pid) : 0;
  const loadBefore = loadavg().map((x) => x.toFixed(1)).join(" ");
  console.log(`load average ${loadBefore} (before the rounds)`);
  const settles: number[] = [];
  const periods: number[] = [];
  let windows = 0;
  settles.push(await settle());
  for (let r = 0; r < rounds; r++) {
    // Rotated: round r starts with side r mod n, so each side runs in each position equally often.
    const order = sides.map((_, i) => sides[(i + r) % sides.length]!);
    for (const s of order) {
      const counted = s.counter ? await invocations(s.counter) : null;
      const profiler = s.inspectorPort ? await startProfiler(s.inspectorPort) : null;
      type Mark = { t: number; done: number; cpu: number; others: Record<string, number>; threads: Record<string, number> };
      const mark = (done: number): Mark => ({ t: performance.now(), done, cpu: cpuMs(s.edge.pid), others: othersCpu(), threads: threadsCpu(s.edge.pid) });
      let done = 0;
      // A mark at LEAD_MS and at every period after it until the drain: the window runs from the
      // first to the last (a whole number of periods; see the header).
      const marks: Mark[] = [];
      let drain: Mark | undefined;
      let tick: ReturnType<typeof setInterval> | undefined;
      const lead = setTimeout(() => {
        marks.push(mark(done));
        tick = setInterval(() => drain || marks.push(mark(done)), period);
      }, LEAD_MS);
      const latencies = await timedConcurrently(creates, CLIENTS, async () => {
        await create(s.edge.url);
        if (++done === creates - CLIENTS) drain = mark(done);
      });
      clearTimeout(lead);
      clearInterval(tick);
      const [from, to] = [marks[0], marks.at(-1)];
      if (!from || !to || !drain || marks.length < 2 || to.done - from.done < CLIENTS) throw new Error(`${s.name}: the window is shorter than its lead (${LEAD_MS} ms), one period (${period} ms) and drain: raise --creates`);
      if (profiler) writeFileSync(`${opt.profile}.${s.key}.${r}.cpuprofile`, JSON.stringify(await profiler.stop()));
      const n = to.done - from.done;
      s.rate.push(n / ((to.t - from.t) / 1000));
      s.cpu.push((to.cpu - from.cpu) / n);
      s.drainRate.push((drain.done - from.done) / ((drain.t - from.t) / 1000));
      s.drainCpu.push((drain.cpu - from.cpu) / (drain.done - from.done));
      periods.push(marks.length - 1);
      for (const [k, v] of Object.entries(to.others)) (s.others[k] ??= []).push((v - from.others[k]!) / n);
      for (const [k, v] of Object.entries(to.threads)) (s.threads[k] ??= []).push((v - (from.threads[k] ?? 0)) / n);
      s.p50.push(median(latencies));
      s.seq.push(windows++);
      const ended = cpuMs(s.edge.pid);
      settles.push(await settle());
      s.tail.push((cpuMs(s.edge.pid) - ended) / creates);
      if (counted && s.counter) {
        // The claimed members' refill (ack, Running observation) landed within the settle.
        for (const [k, n] of Object.entries(await invocations(s.counter))) s.calls[k] = (s.calls[k] ?? 0) + n - (counted[k] ?? 0);
      }
    }
  }
  // `--scrapes n`: workerd CPU per /admin/metrics scrape of each side (the series its rounds
  // made), in alternating batches of 20.
  const scrapeCpu: Record<string, number[]> = {};
  for (let done = 0; done < Number(opt.scrapes); done += 20) {
    for (const s of sides) {
      const before = cpuMs(s.edge.pid);
      for (let i = 0; i < 20; i++) await (await fetch(`${s.edge.url}/admin/metrics`, { headers: { "x-api-key": ADMIN_KEY } })).text();
      (scrapeCpu[s.name] ??= []).push((cpuMs(s.edge.pid) - before) / 20);
    }
  }
  for (const [name, xs] of Object.entries(scrapeCpu)) console.log(`${name} workerd ms per /admin/metrics scrape ${xs.map((x) => x.toFixed(1)).join(" ")} (median ${median(xs).toFixed(2)})`);
  const collectorMs = collector ? cpuMs(collector.pid) - collectorFrom : 0;
  const fmt = (xs: number[], d: number) => `${xs.map((x) => x.toFixed(d)).join(" ")} (median ${median(xs).toFixed(d)})`;
  for (const s of sides) {
    console.log(`${s.name}\n  workerd ms/create ${fmt(s.cpu, 2)}\n  creates/s ${fmt(s.rate, 0)}\n  p50 ms ${fmt(s.p50, 0)}\n  tail workerd ms/create ${fmt(s.tail, 2)}`);
    for (const [k, xs] of Object.entries(s.others)) console.log(`  ${k} ms/create ${fmt(xs, 2)}`);
    for (const [k, xs] of Object.entries(s.threads)) console.log(`  workerd ${k} ms/create ${fmt(xs, 3)}`);
    if (!s.counter) continue;
    const per = (n: number) => (n / (rounds * creates)).toFixed(3);
    for (const [k, n] of Object.entries(s.calls).sort()) console.log(`  per create: ${k} ${per(n)}`);
    console.log(`  edge.do_calls_per_create ${per(Object.entries(s.calls).filter(([k]) => k.includes(" rpc ")).reduce((a, [, n]) => a + n, 0))}`);
  }
  console.log(`settle s before each window ${fmt(settles.map((x) => x / 1000), 1)}`);
  console.log(`steady window: periods of ${period} ms ${fmt(periods, 0)}`);
  // A side's window against its reference's windows either side of it in time (the geometric mean
  // of the one before and the one after; the nearest one at the run's ends): both untraced copies
  // for every side but A′, A alone for A′ (the header's estimator).
  const [a, b] = [sides[0]!, sides[1]!];
  const control = sides.find((x) => x.key === "A2");
  const spread = (xs: number[]) => `${Math.min(...xs).toFixed(3)}..${Math.max(...xs).toFixed(3)}`;
  const label = (x: Side) => (x.key === "A2" ? "A′" : x.key);
  const refsOf = (x: Side) => (x === control || !control ? [a] : [a, control]);
  const refLabel = (x: Side) => (refsOf(x).length > 1 ? "ref" : "A");
  const ref = (x: Side, i: number, of: (s: Side) => number[]) => {
    const at = x.seq[i]!;
    const near = refsOf(x).flatMap((u) => [u.seq.findLastIndex((t) => t < at), u.seq.findIndex((t) => t > at)].filter((j) => j >= 0).map((j) => of(u)[j]!));
    return Math.exp(near.reduce((sum, v) => sum + Math.log(v), 0) / near.length);
  };
  if (control) console.log("ref: the geometric mean of A's and A′'s windows just before and just after the window (both untraced copies)");
  const against = (x: Side) => {
    const rate = x.rate.map((v, i) => v / ref(x, i, (s) => s.rate));
    const cpu = x.cpu.map((v, i) => v / ref(x, i, (s) => s.cpu));
    const drainRate = x.drainRate.map((v, i) => v / ref(x, i, (s) => s.drainRate));
    const drainCpu = x.drainCpu.map((v, i) => v / ref(x, i, (s) => s.drainCpu));
    const r = `${label(x)}/${refLabel(x)}`;
    console.log(`per round ${r} creates/s ${rate.map((v) => v.toFixed(3)).join(" ")} (median ${median(rate).toFixed(3)}, spread ${spread(rate)})`);
    console.log(`per round ${r} workerd CPU per create ${cpu.map((v) => v.toFixed(3)).join(" ")} (median ${median(cpu).toFixed(3)}, spread ${spread(cpu)})`);
    console.log(`  check, over the unaligned window (lead to drain): ${r} creates/s median ${median(drainRate).toFixed(3)} (spread ${spread(drainRate)}), workerd CPU per create median ${median(drainCpu).toFixed(3)}`);
    return rate;
  };
  const ratios = new Map(sides.slice(1).map((x) => [x, against(x)]));
  // Where a side's extra workerd CPU goes: each window's thread's CPU per create less its
  // reference's (as the ratios' reference), medians.
  for (const x of sides.slice(1)) {
    const parts = Object.keys(a.threads).map((k) => {
      const d = x.threads[k]!.map((v, i) => v - ref(x, i, (u) => u.threads[k]!.map((w) => Math.max(w, 1e-6))));
      return `${k} ${median(d).toFixed(3)} (${spread(d)})`;
    });
    console.log(`per round ${label(x)}−${refLabel(x)} workerd ms/create by thread: ${parts.join("; ")}`);
  }
  for (const x of sides.slice(1)) {
    const d = x.tail.map((t, i) => t - a.tail[i]!);
    console.log(`per round ${label(x)}−A tail workerd ms/create ${d.map((v) => v.toFixed(3)).join(" ")} (median ${median(d).toFixed(3)})`);
  }
  if (collector) {
    for (const k of Object.keys(a.others)) {
      const d = a.others[k]!.map((x, i) => b.others[k]![i]! - x);
      console.log(`per round B−A ${k} ms/create ${d.map((x) => x.toFixed(3)).join(" ")} (median ${median(d).toFixed(3)})`);
    }
    const cpuD = a.cpu.map((x, i) => b.cpu[i]! - x);
    console.log(`per round B−A workerd ms/create ${cpuD.map((x) => x.toFixed(3)).join(" ")} (median ${median(cpuD).toFixed(3)})`);
    // What creates/s would follow on a machine running only this system: its processes' CPU per
    // create (workerd, sqld, the collector, the clients and scripted agent), A's over B's per round.
    const system = (s: Side, i: number) => s.cpu[i]! + Object.entries(s.others).reduce((sum, [k, xs]) => (k === "machine" ? sum : sum + xs[i]!), 0);
    const sys = b.cpu.map((_, i) => ref(b, i, (s) => s.cpu.map((_, j) => system(s, j))) / system(b, i));
    console.log(`per round ${refLabel(b)}/B system CPU per create (creates per CPU-second, B/${refLabel(b)}) ${sys.map((x) => x.toFixed(3)).join(" ")} (median ${median(sys).toFixed(3)}, spread ${spread(sys)})`);
    // Every traced side's export reaches the one collector: set against every traced side's
    // creates (B, and C, D… with --also; A and A′ are untraced).
    const traced = rounds * creates * sides.filter((x) => x !== a && x !== control).length;
    const bSystem = median(b.cpu) + median(b.others.sqld!) + median(b.others.bench!);
    console.log(`collector ms per traced create over the run ${(collectorMs / traced).toFixed(3)} (${((100 * collectorMs) / traced / (bSystem + collectorMs / traced)).toFixed(1)} % of B's system CPU per create)`);
  }
  console.log(`load average ${loadavg().map((x) => x.toFixed(1)).join(" ")} (before the rounds: ${loadBefore})`);
  if (collector) {
    const paired = ratios.get(b)!;
    const refRate = median(refsOf(b).flatMap((u) => u.rate));
    console.log(`obs.tracing_overhead_ratio ${median(paired).toFixed(3)} (B/${refLabel(b)}: median of the rounds' ratios, spread ${spread(paired)}; ratio of the medians ${(median(b.rate) / refRate).toFixed(3)}; spans received: ${collector.spans().length})`);
    if (control) {
      const nul = ratios.get(control)!;
      // The tool's own check (notes s13-obs): a run whose two untraced copies disagree by more than
      // 2 % cannot resolve the 5 % the target allows. Passing it is necessary, not sufficient: two
      // runs that passed it at load 2-5 gave 1.09 and 0.92 (notes s14-obs).
      const verdict = Math.abs(median(nul) - 1) <= 0.02 ? "within 0.98..1.02: the copies agree; read the figure with its spread" : "outside 0.98..1.02: the figure is not readable";
      console.log(`obs.tracing_null_ratio ${median(nul).toFixed(3)} (A′/A: A's build and setting twice; median of the rounds' ratios, spread ${spread(nul)}; ${verdict})`);
    }
  }
} finally {
  for (const s of sides) {
    s.agent.disconnect();
    await s.edge.stop();
  }
  await sqld.stop();
  await collector?.stop();
  rmSync(tmp, { recursive: true, force: true });
  rmSync(onDisk, { recursive: true, force: true });
}

/**
 * CPU used so far by the other processes a create runs through: sqld, the collector (when
 * tracing), this process (the clients and the scripted agents), and the machine as a whole (every
 * process of every user: what the other engineers' load adds shows there too). In ms.
 */
function othersCpu(): Record<string, number> {
  const self = process.cpuUsage();
  const out: Record<string, number> = { sqld: cpuMs(sqld.pid), bench: (self.user + self.system) / 1000 };
  if (collector) out.collector = cpuMs(collector.pid);
  // /proc/stat's first line: user nice system idle iowait irq softirq steal, in 10 ms ticks.
  const t = readFileSync("/proc/stat", "utf8").split("\n")[0]!.split(/\s+/).slice(1).map(Number);
  out.machine = (t[0]! + t[1]! + t[2]! + t[5]! + t[6]! + t[7]!) * 10;
  return out;
}

/**
 * workerd's CPU so far by thread, in ms: the isolate's thread (`main`: JS, the runtime's C++, I/O,
 * and the GC work V8 does on it), user and system apart, and V8's platform threads (`v8`:
 * concurrent marking and sweeping, compilation), from /proc/<pid>/task/<tid>/stat (10 ms ticks).
 */
function threadsCpu(pid: number): Record<string, number> {
  const out: Record<string, number> = { "main user": 0, "main sys": 0, v8: 0, other: 0 };
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    let stat: string;
    try {
      stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, "utf8");
    } catch {
      continue; // a thread that ended meanwhile
    }
    const comm = stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")"));
    const f = stat.slice(stat.lastIndexOf(") ") + 2).split(" ");
    const [user, sys] = [Number(f[11]) * 10, Number(f[12]) * 10];
    if (Number(tid) === pid) {
      out["main user"]! += user;
      out["main sys"]! += sys;
    } else out[comm.startsWith("V8 ") ? "v8" : "other"]! += user + sys;
  }
  return out;
}

/** The files of git revision `rev` in `dir` (the checkout untouched), with our node_modules. */
function checkout(rev: string, dir: string): string {
  mkdirSync(dir);
  const archive = spawnSync("sh", ["-c", `git archive ${JSON.stringify(rev)} | tar -x -C ${JSON.stringify(dir)}`], { cwd: ROOT, encoding: "utf8" });
  if (archive.status !== 0) throw new Error(`git archive ${rev}: ${archive.stderr}`);
  symlinkSync(join(ROOT, "node_modules"), join(dir, "node_modules"));
  return dir;
}

/** The bundle `wrangler deploy` would upload, built from the tree at `cwd`. */
function build(cwd: string, outDir: string): void {
  const bin = join(ROOT, "node_modules/.bin");
  const res = spawnSync(join(bin, "wrangler"), ["deploy", "--dry-run", "--outdir", outDir], {
    cwd,
    env: { ...process.env, PATH: `${bin}:${process.env.PATH}`, WRANGLER_SEND_METRICS: "false", WRANGLER_LOG: "warn" },
    encoding: "utf8",
  });
  if (res.status !== 0) throw new Error(`edge build in ${cwd} failed:\n${res.stdout}\n${res.stderr}`);
}

async function api(base: string, path: string, init: RequestInit = {}): Promise<any> {
  const res = await fetch(base + path, { ...init, headers: { "x-api-key": ADMIN_KEY, "content-type": "application/json" } });
  const text = await res.text();
  if (res.status >= 300) throw new Error(`${init.method ?? "GET"} ${path}: HTTP ${res.status} ${text.slice(0, 300)}`);
  return text ? JSON.parse(text) : null;
}

/** The invocation counts of an edge started with `invocationCounterPort` (tail events arrive just
 * after each invocation ends: read after a short pause). */
async function invocations(port: number): Promise<Record<string, number>> {
  await new Promise((r) => setTimeout(r, 300));
  return (await (await fetch(`http://127.0.0.1:${port}/`)).json()) as Record<string, number>;
}

/**
 * Waits until every side's pool is full again and then until the system's processes (each
 * workerd, sqld, the collector) are idle over QUIET_WINDOW_MS (longer than the edge's export
 * interval, so a pending last export shows): the previous window's background work (its claimed
 * members' refill, its last export) is over. Returns the ms it waited.
 */
async function settle(): Promise<number> {
  const started = performance.now();
  for (const s of sides) await waitAvailable(s.edge.url, Math.min(replicas, 600));
  const pids = [...sides.map((s) => s.edge.pid), sqld.pid, ...(collector ? [collector.pid] : [])];
  const used = () => pids.reduce((sum, pid) => sum + cpuMs(pid), 0);
  for (let tries = 0; ; tries++) {
    const before = used();
    await new Promise((r) => setTimeout(r, QUIET_WINDOW_MS));
    const busy = used() - before;
    if (busy < QUIET_MS) break;
    if (tries === 20) {
      console.error(`settle: the system still used ${busy} ms of CPU in ${QUIET_WINDOW_MS} ms after ${tries} tries; going on`);
      break;
    }
  }
  return performance.now() - started;
}

function create(base: string): Promise<unknown> {
  return api(base, "/sandboxes", { method: "POST", body: JSON.stringify({ templateID: "ab", timeout: 3600 }) });
}

async function waitAvailable(base: string, n: number): Promise<void> {
  const deadline = Date.now() + 300_000;
  while ((await api(base, "/admin/teams/admin/templates/ab")).pool.available < n) {
    if (Date.now() > deadline) throw new Error(`pool of ${base}: fewer than ${n} available after 300 s`);
    await new Promise((r) => setTimeout(r, 100));
  }
}
