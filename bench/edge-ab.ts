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
// Fairness (notes s13-obs, s18-tool): before every window all pools are full again and the
// system's processes (every workerd, sqld, the collector) have been idle for a while, so no
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
// The order is balanced by construction (session 18): the rounds come in blocks of a Williams
// design (n rounds for n sides, 2n when n is odd: for three sides all six orders), in a seeded
// random order within each block (`--seed`, printed), and `--rounds` is rounded up to whole
// blocks. Over a block every side runs in every position equally often and, within rounds, right
// after every other side equally often. Until session 17 the order rotated (A B A′, B A′ A, A′ A B):
// every position equally often, but each side followed one fixed side two times in three (A′
// followed B, the traced side; A followed A′), and each side's reference windows were different
// neighbours at different distances. With it the null A′/A read 1.04–1.09 in four tracing runs and
// a copy of A in B's place 0.976 and 0.973; with the balanced order and the pairwise estimator
// A′/A still read 1.035 and the second copy 0.938: what is left is the process (`--restart`).
// The estimator is one rule for every side: a window's figure (creates/s, workerd CPU per create)
// over each reference copy's window of the same round, itself left out, one ratio per pair; the
// figure is the median of all the pairs. The reference copies are the untraced copies of A's
// bundle and setting: A, and A′ with `--control`; with `--null` every side. So B has two pairs a
// round (B/A, B/A′) and A′ one (A′/A), each a ratio of two windows. Not a ratio to the copies'
// geometric mean (s13-s17's reference, printed as a check): when the windows' noise is skewed (a
// lull in the other engineers' load makes one window much faster), X over a mean of k windows is
// not symmetric about 1 even for identical X, its median drifts by an amount that grows with k,
// and sides with different k drift apart; X over one window of an identical copy is symmetric
// whatever the noise. Round by round, so a drift in the other engineers' load cancels as far as it
// is the same across one round's windows (about 30 s), and over a block's positions as far as it
// is linear. Each median is printed with a 95 % interval (a bootstrap over rounds): what this run
// can resolve. Beside it each side's ratios by its position in the round and by the side that ran
// just before, the check that neither carries a cost. `--json <file>` writes every window's figures.
// `--control`: one more side, A′, a second copy of A (its bundle and setting): A′/A is the null
// ratio, what position and chance alone give (1.00 within its interval for a fair tool); a
// figure is worth what the null ratio's distance from 1.00 and its interval allow.
// `--restart`: each block runs on processes of its own: before every block after the first, every
// side's workerd and scripted agent are stopped and started anew (empty storage, pool filled, 300
// creates of warm-up), in a seeded random order (the start order is printed), and the intervals
// resample whole blocks. Why: a workerd process has a speed of its own for its life, which no
// order of windows cancels. Session 18's null runs (three copies of one bundle, untraced): with
// one process per side the second-started copy read 0.938 of the others on creates/s and 1.09 on
// workerd CPU per create (12 rounds); with `--restart` (18 rounds, 3 blocks) each side's CPU per
// create over the others' agreed between the two halves of a block (A 1.161/1.159, B 0.869/0.848,
// A′ 0.919/0.909) and moved from block to block (A 1.16, 1.04, 0.95; B 0.97, 0.85, 0.95), with no
// tie to the start order. A process draws a speed of ±10 %; with one process per side that draw
// is the run's and the interval over rounds does not show it; with a process per side and block
// the interval over blocks carries it. Resolving a few percent takes many blocks.
// `--null`: the tool's own check: every side serves the working tree's bundle untraced with A's
// setting (B, and A′ with `--control`, are copies of A), and each side is read against all the
// others; a fair run reads 1.00 within the interval for every side, with no sign that repeats
// from run to run.
// `--tracing`: both sides serve the working tree, B with OTEL_EXPORTER_OTLP_ENDPOINT to a real
// collector (tools/otelcol), and it prints `obs.tracing_overhead_ratio`: the median over rounds of
// B's creates/s over the untraced copies', with the spread and interval (with `--control`,
// `obs.tracing_null_ratio` beside it);
// and each process's CPU per create (workerd, sqld, the collector, this process's clients and
// scripted agent, the whole machine), and the ratio the system's own CPU per create gives.
// `--tracing --base <rev>`: both sides trace to the collector, A the bundle of <rev>, B the working
// tree's: what a change to the tracing path saves, the rest of the figures as with `--tracing`.
// `--tracing --also <rev> [--also <rev2>…]`: more sides C, D…, each the bundle of a revision
// traced to the collector, in the same balanced order, their figures against the untraced copies
// as B's are: e.g. the tracing path before a change, and a floor (a build that records spans and never
// exports: what the export costs, and the least tracing can cost), all in the same run.
// `--profile <prefix>`: a V8 CPU profile of each side's isolate over each of its rounds, to
// <prefix>.<A|B>.<round>.cpuprofile, the bundle beside them as <prefix>.<A|B>.bundle.js (both
// sides carry the inspector's cost, so a function's samples per create, B's against A's, show what
// B adds; take that run's other figures as a profile only).
// `--scrapes n`: after the rounds, each side's workerd CPU per `/admin/metrics` scrape (n each, in
// alternating batches of 20).
// `--disk`: both sides serve the working tree, A with its Durable Object storage on tmpfs (as the
// edge bench), B on the disk (as `npm start` and the e2e bench): what the disk's commits cost.
// `--same-process`: what tracing costs a create, free of the process effect above (session 19).
// ONE workerd serves the working tree traced to the collector, and the sides are the traceparent
// the creates carry: A `00-<trace>-<span>-00` (unsampled: the edge samples parent-based, so the
// request, its Durable Object calls and its intent record and export nothing; its id is still
// echoed), B the same with `-01` (sampled: every span recorded and exported); with `--control`
// A′ is A again (the null, which reads 1.00 tight when the tool is fair). Every side's windows
// run on the same process, so its speed draw multiplies all of them and cancels in the ratios:
// it prints `obs.tracing_sampled_ratio` (B over the unsampled copies, the same estimator and
// interval) and `obs.tracing_sampled_null_ratio`. Every create carries a fresh traceparent
// (same cost on every side), and the run counts each side's spans at the collector: an
// unsampled side must show none in its requests' traces (the pool's refills are traces of their
// own, recorded whichever side claimed: PoolDO.enqueue, printed apart). What it cannot show:
// what "configured, unsampled" costs over "tracing off" (since session 19 an unsampled request
// makes no span object; since session 23 it arms no export and skips the key check's span wrapper,
// but each Durable Object call still reads its traceparent's flags, and the pool's refills are
// traced, roots of their own). `--profile` with it sums each
// window's V8 profile by bundled file and prints the tracing code's self time per create and its
// share of the isolate's sampled time, per side: A's share bounds that gap (tracing off still runs
// part of that code: the request id's context and traceparent).
// `--collector-format proto|json` (default proto, since session 22): how the collector's file
// exporter writes the spans it received. Until session 22 it wrote OTLP JSON, re-encoding every
// span as text, the collector's main cost per span (it competes with workerd for this machine's
// second core) and nothing a deployment pays: there the collector forwards OTLP protobuf to a
// backend. `json` is that old setting, for comparison (notes s22-trace).
// `--flag 00|01` (not with `--same-process`): every side's creates carry a fresh traceparent of that
// flag, as the same-process sides' do: `--null --flag 00 --profile <prefix>` profiles tracing off
// under the same requests as the unsampled side of a `--same-process --profile` run, so the
// tracing code that off runs too (the request id's context, reading the caller's traceparent) can be
// told from what configured-but-unsampled adds (session 23).
// `--same-process --interleave [--periods n]`: the same sides, switched period by period inside
// one continuous load (see `interleaved`): session 19's window runs on one process still read the
// null A′/A at 0.986 (0.929..1.105) and 1.036 (0.980..1.242) at load 1.3-2.5, the other engineers'
// bursts falling on one side's 2-s windows; periods a second apart share them. Its first run (20
// rounds of 12 periods, load 1.3-1.9) did not resolve better: B/A 0.971 (0.901..1.043), null A′/A
// 0.953 (0.835..1.057); a second's creates ranged 270-630 within a round, and one round stalled
// for 3 periods (0 creates: their CPU per create is then meaningless, so its CPU ratios are too).
import { spawnSync } from "node:child_process";
import { copyFileSync, cpSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { startEdge, type Edge } from "../scripts/lib/edge.ts";
import { freePort, startSqld } from "../scripts/lib/sqld.ts";
import { migrate } from "../scripts/migrate.ts";
import { seed } from "../scripts/seed.ts";
import { ScriptedAgent, tcpTransport } from "../test/support/scripted-agent.ts";
import { startCollector, type Collector } from "../test/support/otel-collector.ts";
import { randomHex } from "../lib/tracing/span-recorder.ts";
import { cpuMs, median, medianInterval, percentile, seededRandom, shuffle, timedConcurrently } from "./stats.ts";
import { bundleFiles, selfTimes, startProfiler, type CpuProfile } from "./v8-profile.ts";

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
    null: { type: "boolean", default: false },
    seed: { type: "string", default: "1" },
    json: { type: "string" },
    restart: { type: "boolean", default: false },
    "same-process": { type: "boolean", default: false },
    interleave: { type: "boolean", default: false },
    periods: { type: "string", default: "12" },
    "collector-format": { type: "string", default: "proto" },
    flag: { type: "string" },
  },
});
const collectorFormat = opt["collector-format"];
if (collectorFormat !== "proto" && collectorFormat !== "json") throw new Error("--collector-format is proto or json");
if (opt.null && (opt.tracing || opt.disk || opt.base !== "HEAD")) throw new Error("--null serves the working tree untraced on every side: not with --tracing, --disk or --base");
const sameProcess = opt["same-process"];
if (sameProcess && (opt.tracing || opt.null || opt.disk || opt.base !== "HEAD" || opt.also.length)) throw new Error("--same-process serves the working tree traced on one process: not with --tracing, --null, --disk, --base or --also");
if (opt.flag !== undefined && (sameProcess || !["00", "01"].includes(opt.flag))) throw new Error("--flag 00|01: every create carries a fresh traceparent of that flag (--same-process sets its sides' own)");
if (opt.interleave && !sameProcess) throw new Error("--interleave switches the traceparent's flag period by period on one process: with --same-process only");
const orderSeed = Number(opt.seed);
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
  pos: number[]; // each window's position in its round (0 first)
  after: string[]; // the label of the side whose window ran just before (- for the run's first)
  others: Record<string, number[]>;
  threads: Record<string, number[]>; // workerd's CPU per create by thread (see `threadsCpu`)
  counter?: number;
  calls: Record<string, number>;
  inspectorPort?: number;
  traced: boolean; // exports to the collector
  dir: string; // its workerd's directory (bundle, config, storage)
  block: number[]; // each window's block (with `--restart`, its process)
  flag?: "00" | "01"; // `--same-process`: the sampled flag of its creates' traceparent
  traces: Set<string>; // `--same-process`: its creates' trace ids (their spans counted at the collector)
  tracingUs: number[]; // `--profile`: each window's self time in tracing code, µs per create
  sampledUs: number[]; // `--profile`: each window's sampled isolate time (all but idle), µs per create
};
/** The bundle's tracing code, by bundled source file (`--profile`): ours and the OTLP exporter's. */
const TRACING_CODE = /(^|\/)(tracing|[\w-]+-tracing|span-recorder|otlp-json|otlp-proto)\.ts$|@opentelemetry\//;
/** A window's steady state starts this long after its first create (past the first export). */
const LEAD_MS = 1_000;
/** Idle, for `settle`: under QUIET_MS of CPU in QUIET_WINDOW_MS (half as long again as the export period, so a pending last export shows). */
const QUIET_WINDOW_MS = Math.max(1_500, 1.5 * period);
const QUIET_MS = 30;
const sides: Side[] = [];
/** Every workerd and agent this run started (stopped at the end, whatever happened). */
const started: { edge: Edge; agent: ScriptedAgent }[] = [];
let collector: Collector | undefined;
try {
  await migrate(sqld.url);
  await seed({ libsqlUrl: sqld.url, adminApiKey: ADMIN_KEY, pepper: "ab-pepper", baseReplicas: 0 });
  const tree = checkout(opt.base, join(tmp, "base-tree"));
  const bothTraced = opt.tracing && opt.base !== "HEAD";
  const bundles: Record<string, string> = sameProcess
    ? { "A (one traced process, unsampled: -00)": join(tmp, "bundle-b"), "B (the same process, sampled: -01)": join(tmp, "bundle-b") }
    : bothTraced
    ? { [`A (${opt.base}, traced)`]: join(tmp, "bundle-a"), "B (working tree, traced)": join(tmp, "bundle-b") }
    : opt.tracing
    ? { "A (tracing off)": join(tmp, "bundle-b"), "B (tracing to a collector)": join(tmp, "bundle-b") }
    : opt.disk
      ? { "A (storage on tmpfs)": join(tmp, "bundle-b"), "B (storage on disk)": join(tmp, "bundle-b") }
      : opt.null
        ? { "A (working tree)": join(tmp, "bundle-b"), "B (null: a copy of A)": join(tmp, "bundle-b") }
        : { [`A (${opt.base})`]: join(tmp, "bundle-a"), "B (working tree)": join(tmp, "bundle-b") };
  if ((!opt.tracing && !opt.disk && !opt.null) || bothTraced) build(tree, join(tmp, "bundle-a"));
  build(ROOT, join(tmp, "bundle-b"));
  for (const [i, rev] of (opt.tracing ? opt.also : []).entries()) {
    const side = String.fromCharCode(67 + i); // C, D, …
    build(checkout(rev, join(tmp, `tree-${side}`)), join(tmp, `bundle-${side}`));
    bundles[`${side} (${rev}, traced)`] = join(tmp, `bundle-${side}`);
  }
  if (opt.tracing || sameProcess) collector = await startCollector(tmp, { format: collectorFormat });
  const vars = { LIBSQL_URL: sqld.url, KEY_PEPPER: "ab-pepper", ADMIN_API_KEY: ADMIN_KEY, CLUSTER_TOKEN };
  const flags = sameProcess ? (["00", "01"] as const) : [];
  const entries = Object.entries(bundles).map(([name, bundle], i) => ({ key: name[0]!, name, bundle, traced: i >= 1 || bothTraced || sameProcess, flag: flags[i] ?? (opt.flag as "00" | "01" | undefined) }));
  // The control: A again, its own workerd serving A's bundle with A's settings (its storage beside
  // the others', on tmpfs).
  if (opt.control) entries.push({ ...entries[0]!, key: "A2", name: `A′ (control: ${entries[0]!.name.slice(3, -1)})` });
  /**
   * Starts side `i`'s workerd for block `block` (its own storage, empty), connects its scripted
   * agent, fills its pool and warms it up (JIT, objects, caches).
   */
  const launch = async (i: number, block: number) => {
    const { bundle, traced: isTraced } = entries[i]!;
    const dir = opt.disk && i === 1 ? join(onDisk, `b${block}`) : join(tmp, `edge-${i}-b${block}`);
    cpSync(bundle, join(dir, "bundle"), { recursive: true });
    const traced: Record<string, string> = collector && isTraced ? { OTEL_EXPORTER_OTLP_ENDPOINT: collector.endpoint } : {};
    const counter = sides[i]?.counter ?? (opt.calls ? await freePort() : undefined);
    const inspectorPort = sides[i]?.inspectorPort ?? (opt.profile ? await freePort() : undefined);
    const edge = await startEdge({ dir, vars: { ...vars, ...traced }, skipBuild: true, invocationCounterPort: counter, inspectorPort, wranglerToml: join(dir, "bundle", "wrangler.toml") });
    const agent = new ScriptedAgent({ agentId: `ab-${i}` });
    started.push({ edge, agent });
    await agent.connect(tcpTransport(edge.url, CLUSTER_TOKEN, "local"));
    await api(edge.url, "/admin/teams/admin/templates/ab", { method: "PUT", body: JSON.stringify({ spec: { replicas } }) });
    await waitAvailable(edge.url, replicas);
    // With --same-process both paths (sampled and not) warm up.
    let k = 0;
    await timedConcurrently(300, CLIENTS, () => create(edge.url, sameProcess ? (k++ % 2 ? "01" : "00") : undefined));
    return { edge, agent, dir, counter, inspectorPort, traced: Object.keys(traced).length > 0 };
  };
  // Each block's processes start in a seeded random order (a side's process is not always the
  // n-th started).
  const startOrder = seededRandom(orderSeed + 1);
  const shuffled = () => shuffle(entries.map((_, i) => i), startOrder);
  const starts: string[] = [];
  const launched = new Map<number, Awaited<ReturnType<typeof launch>>>();
  const first = shuffled();
  // --same-process: one process, every side's.
  const shared = sameProcess ? await launch(0, 0) : undefined;
  for (const i of first) launched.set(i, shared ?? (await launch(i, 0)));
  starts.push(first.map((i) => label(entries[i]!)).join(""));
  for (const [i, { key, name }] of entries.entries()) {
    const { edge, agent, dir, counter, inspectorPort, traced } = launched.get(i)!;
    const flag = entries[i]!.flag;
    sides.push({ key, name, edge, agent, dir, cpu: [], rate: [], drainCpu: [], drainRate: [], p50: [], tail: [], seq: [], pos: [], after: [], block: [], others: {}, threads: {}, counter, calls: {}, inspectorPort, traced, flag, traces: new Set(), tracingUs: [], sampledUs: [] });
  }
  /** `--restart`: every side's workerd (and agent) anew, in a seeded order, with empty storage. */
  const restartAll = async (block: number) => {
    for (const s of new Set(sides.map((u) => u.edge)).values()) {
      const side = sides.find((u) => u.edge === s)!;
      side.agent.disconnect();
      await s.stop();
      rmSync(side.dir, { recursive: true, force: true });
    }
    const order = shuffled();
    const shared = sameProcess ? await launch(0, block) : undefined;
    for (const i of order) Object.assign(sides[i]!, shared ?? (await launch(i, block)));
    starts.push(order.map((i) => label(sides[i]!)).join(""));
  };
  // The collector's CPU over every round, set against B's creates: one round's is a tick or two
  // (10 ms).
  const collectorFrom = collector ? cpuMs(collector.pid) : 0;
  // The rounds' orders: whole blocks of a balanced design, each block's rows in a seeded order.
  const schedule = balancedOrders(sides.length, Number(opt.rounds), orderSeed);
  const rounds = schedule.length;
  console.log(`rounds ${rounds} (--rounds ${opt.rounds} in whole blocks of ${williams(sides.length).length}), seed ${orderSeed}: ${schedule.map((o) => o.map((i) => label(sides[i]!)).join("")).join(" ")}`);
  const loadBefore = loadavg().map((x) => x.toFixed(1)).join(" ");
  console.log(`load average ${loadBefore} (before the rounds)`);
  const settles: number[] = [];
  const periods: number[] = [];
  let windows = 0;
  settles.push(await settle());
  const blockLength = williams(sides.length).length;
  /**
   * `--interleave` (with `--same-process`): in each round one continuous load of the 50 clients for
   * `--periods` export periods, the side (the traceparent's flag) switching at every period
   * boundary in a seeded random order (each side equally often), after one settle. A period's
   * figure is its creates over its length, over the round's mean (a drift across rounds cancels).
   * A period carries its own side's per-request cost and, since the isolate exports a period's
   * spans about one period later, part of the previous period's export: so a side's ratio is its
   * periods' mean over A's times the mean of the periods after it over those after A (each effect
   * against the same reference, the sides' order random so the two do not mix). A burst of the
   * other engineers' load lasts seconds and falls on neighbouring periods of every side: what a
   * window per side (seconds apart, settles between) cannot cancel. Intervals: a bootstrap over rounds.
   */
  const interleaved = async (nRounds: number) => {
    const perSide = Math.max(2, Math.round(Number(opt.periods) / sides.length));
    const rand = seededRandom(orderSeed + 2);
    const url = sides[0]!.edge.url;
    const pid = sides[0]!.edge.pid;
    // Per round: each period's side index, creates/s over the round's mean, the previous period's side.
    const rows: { side: number; prev: number; rate: number; cpu: number }[][] = [];
    for (let r = 0; r < nRounds; r++) {
      const order = shuffle(sides.flatMap((_, k) => Array.from({ length: perSide }, () => k)), rand);
      let current = -1; // the lead: A's flag, not counted
      let done = 0;
      let stop = false;
      const marks: { done: number; cpu: number; t: number }[] = [];
      const client = async () => {
        while (!stop) {
          await create(url, sides[Math.max(current, 0)]!.flag);
          done++;
        }
      };
      const clients = Array.from({ length: CLIENTS }, client);
      await new Promise((ok) => setTimeout(ok, LEAD_MS));
      for (let k = 0; k < order.length; k++) {
        marks.push({ done, cpu: cpuMs(pid), t: performance.now() });
        current = order[k]!;
        await new Promise((ok) => setTimeout(ok, period));
      }
      marks.push({ done, cpu: cpuMs(pid), t: performance.now() });
      stop = true;
      await Promise.all(clients);
      const raw = order.map((side, k) => {
        const n = marks[k + 1]!.done - marks[k]!.done;
        return { side, prev: k > 0 ? order[k - 1]! : -1, rate: n / ((marks[k + 1]!.t - marks[k]!.t) / 1000), cpu: (marks[k + 1]!.cpu - marks[k]!.cpu) / Math.max(n, 1) };
      });
      const meanRate = mean(raw.map((x) => x.rate));
      const meanCpu = mean(raw.map((x) => x.cpu));
      rows.push(raw.map((x) => ({ ...x, rate: x.rate / meanRate, cpu: x.cpu / meanCpu })));
      console.log(`round ${r + 1}: ${order.map((k) => label(sides[k]!)).join("")} creates/s ${raw.map((x) => x.rate.toFixed(0)).join(" ")}`);
      await settle();
    }
    /** Side k's effect over A's on `of`: its periods' mean over A's, times the periods after it over those after A. */
    const effect = (rs: typeof rows, k: number, what: "rate" | "cpu") => {
      const all = rs.flat();
      const m = (f: (x: (typeof all)[number]) => boolean) => mean(all.filter(f).map((x) => x[what]));
      return (m((x) => x.side === k) / m((x) => x.side === 0)) * (m((x) => x.prev === k) / m((x) => x.prev === 0));
    };
    for (const [k, x] of sides.entries()) {
      if (k === 0) continue;
      for (const what of ["rate", "cpu"] as const) {
        const boot = Array.from({ length: 2000 }, () => effect(rows.map(() => rows[Math.floor(rand() * rows.length)]!), k, what));
        const [lo, hi] = [percentile(boot, 2.5), percentile(boot, 97.5)];
        const name = x.flag === "01" ? `obs.tracing_interleaved_${what === "rate" ? "ratio" : "cpu_ratio"}` : `obs.tracing_interleaved_null_${what === "rate" ? "ratio" : "cpu_ratio"}`;
        console.log(`${name} ${effect(rows, k, what).toFixed(3)} (${label(x)}/A ${what === "rate" ? "creates/s" : "workerd CPU per create"}, ${rows.length} rounds of ${rows[0]!.length} periods; 95 % interval ${lo.toFixed(3)}..${hi.toFixed(3)})`);
      }
    }
    console.log(`load average ${loadavg().map((v) => v.toFixed(1)).join(" ")} (before the rounds: ${loadBefore})`);
  };
  if (opt.interleave) await interleaved(Number(opt.rounds));
  else {
    for (const [r, row] of schedule.entries()) {
      if (opt.restart && r > 0 && r % blockLength === 0) {
        await restartAll(r / blockLength);
        settles.push(await settle());
      }
      const order = row.map((i) => sides[i]!);
      for (const [pos, s] of order.entries()) {
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
          const traceId = await create(s.edge.url, s.flag);
          if (traceId) s.traces.add(traceId);
          if (++done === creates - CLIENTS) drain = mark(done);
        });
        clearTimeout(lead);
        clearInterval(tick);
        const [from, to] = [marks[0], marks.at(-1)];
        if (!from || !to || !drain || marks.length < 2 || to.done - from.done < CLIENTS) throw new Error(`${s.name}: the window is shorter than its lead (${LEAD_MS} ms), one period (${period} ms) and drain: raise --creates`);
        if (profiler) {
          const profile = (await profiler.stop()) as CpuProfile;
          writeFileSync(`${opt.profile}.${s.key}.${r}.cpuprofile`, JSON.stringify(profile));
          // The bundle beside its profiles: reading them by source file later needs its lines.
          copyFileSync(join(s.dir, "bundle/index.js"), `${opt.profile}.${s.key}.bundle.js`);
          const fileOf = bundleFiles(join(s.dir, "bundle/index.js"));
          const t = selfTimes(profile, (_url, line) => fileOf(line));
          s.tracingUs.push([...t.selfByFile].reduce((sum, [f, us]) => (TRACING_CODE.test(f) ? sum + us : sum), 0) / creates);
          s.sampledUs.push(t.sampled / creates);
        }
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
        s.pos.push(pos);
        s.block.push(Math.floor(r / blockLength));
        s.after.push(pos > 0 ? label(order[pos - 1]!) : r > 0 ? label(sides[schedule[r - 1]!.at(-1)!]!) : "-");
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
    console.log(`processes started in the order ${starts.join(" ")}${opt.restart ? " (one order per block)" : ""}`);
    console.log(`settle s before each window ${fmt(settles.map((x) => x / 1000), 1)}`);
    console.log(`steady window: periods of ${period} ms ${fmt(periods, 0)}`);
    // Each side's window against each reference copy's window of the same round, itself left out:
    // one ratio per pair, and the figure is the median of all of them (the header's estimator, the
    // same rule for every side).
    const [a, b] = [sides[0]!, sides[1]!];
    const control = sides.find((x) => x.key === "A2");
    const copies = opt.null ? sides : control ? [a, control] : [a];
    const refsOf = (x: Side) => copies.filter((u) => u !== x);
    const refLabel = (x: Side) => (refsOf(x).length === 1 ? label(refsOf(x)[0]!) : opt.null ? "others" : "ref");
    /** Per round, `x`'s value of `of` over (or, `diff`, less) each reference copy's. */
    const pairs = (x: Side, of: (s: Side) => number[], diff = false) => of(x).map((v, r) => refsOf(x).map((u) => (diff ? v - of(u)[r]! : v / of(u)[r]!)));
    /** The same per round against the geometric mean of the reference copies (s13-s17's reference, as a check). */
    const overGeomean = (x: Side, of: (s: Side) => number[]) => of(x).map((v, r) => v / geomean(refsOf(x).map((u) => of(u)[r]!)));
    const spread = (xs: number[]) => `${Math.min(...xs).toFixed(3)}..${Math.max(...xs).toFixed(3)}`;
    const rand = seededRandom(orderSeed);
    // With --restart a block's rounds share their processes: the bootstrap resamples whole blocks.
    // Computed once per series: a figure and its check line print the same interval.
    const intervals = new Map<number[][], [number, number]>();
    const interval = (perRound: number[][]) => {
      const units = opt.restart ? Array.from({ length: perRound.length / blockLength }, (_, k) => perRound.slice(k * blockLength, (k + 1) * blockLength).flat()) : perRound;
      if (!intervals.has(perRound)) intervals.set(perRound, medianInterval(units, rand));
      return intervals.get(perRound)!;
    };
    /** `spread a..b, 95 % interval c..d` of a run's values (one list per round). */
    const spreads = (perRound: number[][]) => `spread ${spread(perRound.flat())}, 95 % interval ${interval(perRound).map((v) => v.toFixed(3)).join("..")}`;
    const summary = (perRound: number[][]) => `median ${median(perRound.flat()).toFixed(3)}, ${spreads(perRound)}`;
    for (const x of sides.filter((u) => refsOf(u).length > 1)) console.log(`${label(x)}/${refLabel(x)}: ${label(x)}'s window over each of ${refsOf(x).map(label).join(" and ")}'s of the same round (per round ${refsOf(x).map((u) => `${label(x)}/${label(u)}`).join(", ")})`);
    const measured = opt.null ? sides : sides.slice(1);
    const against = (x: Side) => {
      const rate = pairs(x, (s) => s.rate);
      const cpu = pairs(x, (s) => s.cpu);
      const r = `${label(x)}/${refLabel(x)}`;
      const list = (xs: number[][]) => xs.flat().map((v) => v.toFixed(3)).join(" ");
      console.log(`per round ${r} creates/s ${list(rate)} (${summary(rate)})`);
      console.log(`per round ${r} workerd CPU per create ${list(cpu)} (${summary(cpu)})`);
      const drainRate = pairs(x, (s) => s.drainRate).flat();
      const drainCpu = pairs(x, (s) => s.drainCpu).flat();
      console.log(`  check, over the unaligned window (lead to drain): ${r} creates/s median ${median(drainRate).toFixed(3)} (spread ${spread(drainRate)}), workerd CPU per create median ${median(drainCpu).toFixed(3)}`);
      if (refsOf(x).length > 1) console.log(`  check, against the geometric mean of ${refsOf(x).map(label).join(" and ")} per round: creates/s median ${median(overGeomean(x, (s) => s.rate)).toFixed(3)}, workerd CPU per create median ${median(overGeomean(x, (s) => s.cpu)).toFixed(3)}`);
      // The design's check: the ratios by position in the round and by the side that ran just before
      // (equal counts by construction, but the run's first window).
      const by = (keyOf: (i: number) => string) => {
        const groups = new Map<string, number[]>();
        rate.forEach((vs, i) => groups.set(keyOf(i), [...(groups.get(keyOf(i)) ?? []), ...vs]));
        return [...groups].sort(([p], [q]) => p.localeCompare(q)).map(([k, xs]) => `${k} ${median(xs).toFixed(3)} (${xs.length})`).join(", ");
      };
      console.log(`  ${r} creates/s by position: ${by((i) => `#${x.pos[i]! + 1}`)}; by the side before: ${by((i) => `after ${x.after[i]}`)}`);
      console.log(`  ${r} creates/s by block${opt.restart ? " (its own processes)" : ""}: ${by((i) => `${x.block[i]}`)}`);
      return rate;
    };
    const ratios = new Map(measured.map((x) => [x, against(x)]));
    // Where a side's extra workerd CPU goes: each window's thread's CPU per create less each
    // reference copy's in the same round, medians.
    for (const x of measured) {
      const parts = Object.keys(a.threads).map((k) => {
        const d = pairs(x, (u) => u.threads[k]!, true).flat();
        return `${k} ${median(d).toFixed(3)} (${spread(d)})`;
      });
      console.log(`per round ${label(x)}−${refLabel(x)} workerd ms/create by thread: ${parts.join("; ")}`);
    }
    for (const x of measured) {
      const d = pairs(x, (u) => u.tail, true).flat();
      console.log(`per round ${label(x)}−${refLabel(x)} tail workerd ms/create ${d.map((v) => v.toFixed(3)).join(" ")} (median ${median(d).toFixed(3)})`);
    }
    if (collector) {
      for (const k of Object.keys(a.others)) {
        const d = pairs(b, (u) => u.others[k]!, true).flat();
        console.log(`per round B−${refLabel(b)} ${k} ms/create ${d.map((x) => x.toFixed(3)).join(" ")} (median ${median(d).toFixed(3)})`);
      }
      const cpuD = pairs(b, (u) => u.cpu, true).flat();
      console.log(`per round B−${refLabel(b)} workerd ms/create ${cpuD.map((x) => x.toFixed(3)).join(" ")} (median ${median(cpuD).toFixed(3)})`);
      // What creates/s would follow on a machine running only this system: its processes' CPU per
      // create (workerd, sqld, the collector, the clients and scripted agent), each reference copy's
      // over B's per round.
      const system = (s: Side) => s.cpu.map((c, i) => c + Object.entries(s.others).reduce((sum, [k, xs]) => (k === "machine" ? sum : sum + xs[i]!), 0));
      const sys = pairs(b, system).map((rs) => rs.map((v) => 1 / v));
      console.log(`per round ${refLabel(b)}/B system CPU per create (creates per CPU-second, B/${refLabel(b)}) ${sys.flat().map((x) => x.toFixed(3)).join(" ")} (${summary(sys)})`);
      // Every traced side's export reaches the one collector: set against every traced side's creates.
      const traced = rounds * creates * sides.filter((x) => x.traced && x.flag !== "00").length;
      const bSystem = median(b.cpu) + median(b.others.sqld!) + median(b.others.bench!);
      console.log(`collector ms per traced create over the run ${(collectorMs / traced).toFixed(3)} (${((100 * collectorMs) / traced / (bSystem + collectorMs / traced)).toFixed(1)} % of B's system CPU per create)`);
    }
    console.log(`load average ${loadavg().map((x) => x.toFixed(1)).join(" ")} (before the rounds: ${loadBefore})`);
    if (collector && sameProcess) {
      // The claim the mode rests on: an unsampled create records nothing (its request, its Durable
      // Object calls, its intent), a sampled one its whole trace. Spans in no side's trace are the
      // pool's own (refills) and the warm-up's.
      const spans = collector.spans();
      const bySide = new Map(sides.map((x) => [x, 0]));
      const own = new Map<string, number>();
      for (const sp of spans) {
        const x = sides.find((u) => u.traces.has(sp.traceId));
        if (x) bySide.set(x, bySide.get(x)! + 1);
        else own.set(sp.name, (own.get(sp.name) ?? 0) + 1);
      }
      console.log(`spans per create in its creates' traces: ${sides.map((x) => `${label(x)} ${(bySide.get(x)! / (rounds * creates)).toFixed(3)}`).join(", ")}; in traces of their own (pool refills, warm-up) over the run: ${[...own].map(([k, n]) => `${k} ${n}`).join(", ")}`);
      for (const x of sides.filter((u) => u.flag === "00" && bySide.get(u)! > 0)) console.log(`WARNING: ${label(x)} (unsampled) recorded ${bySide.get(x)} spans: the comparison is not sampled against unsampled`);
    }
    if (opt.profile) {
      // Self time in the bundle's tracing code (TRACING_CODE) per create, and its share of the
      // isolate's sampled time, per window; the shares' median per side with its interval.
      for (const x of sides) {
        const share = x.tracingUs.map((us, i) => [us / x.sampledUs[i]!]);
        console.log(`${label(x)} tracing code self µs per create ${fmt(x.tracingUs, 1)}; of the isolate's sampled µs ${fmt(x.sampledUs, 0)}; share ${summary(share)}`);
        if (sameProcess && x.flag === "00") console.log(`edge_ab.unsampled_tracing_share ${label(x)} ${median(share.flat()).toFixed(4)} (${spreads(share)}): the bound on what tracing configured but unsampled costs the isolate over tracing off`);
      }
      if (!sameProcess && opt.flag === "00" && sides.every((u) => !u.traced)) {
        // Tracing off under unsampled requests (`--null --flag 00`): the tracing code off runs too,
        // every side's windows of a round together.
        const share = Array.from({ length: rounds }, (_, r) => sides.map((u) => u.tracingUs[r]! / u.sampledUs[r]!));
        console.log(`edge_ab.off_tracing_share ${median(share.flat()).toFixed(4)} (${spreads(share)}): the tracing code's share of the isolate's sampled time with tracing off, the same requests as the unsampled side's`);
      }
    }
    if (collector) {
      const paired = ratios.get(b)!;
      const refRate = median(refsOf(b).flatMap((u) => u.rate));
      // --same-process: B is the sampled flag on the same traced process (the header's mode).
      const [figureName, nullName] = sameProcess ? ["obs.tracing_sampled_ratio", "obs.tracing_sampled_null_ratio"] : ["obs.tracing_overhead_ratio", "obs.tracing_null_ratio"];
      console.log(`${figureName} ${median(paired.flat()).toFixed(3)} (B/${refLabel(b)}: median of the rounds' pairs, ${spreads(paired)}; ratio of the medians ${(median(b.rate) / refRate).toFixed(3)}; spans received: ${collector.spans().length})`);
      if (control) {
        const nul = ratios.get(control)!;
        // The tool's own check (notes s13-obs): a run whose two untraced copies disagree by more than
        // 2 % cannot resolve the 5 % the target allows. Passing it is necessary, not sufficient: two
        // runs that passed it at load 2-5 gave 1.09 and 0.92 (notes s14-obs).
        const verdict = Math.abs(median(nul.flat()) - 1) <= 0.02 ? "within 0.98..1.02: the copies agree; read the figure with its interval" : "outside 0.98..1.02: the figure is not readable";
        console.log(`${nullName} ${median(nul.flat()).toFixed(3)} (A′/A: A's build and setting twice; median of the rounds' ratios, ${spreads(nul)}; ${verdict})`);
      }
    }
    if (opt.null) {
      // The tool's check: every side is a copy of A; each reads 1.00 within its interval in a fair run.
      for (const [x, rs] of ratios) {
        const [lo, hi] = interval(rs);
        console.log(`edge_ab.null_ratio ${label(x)}/${refLabel(x)} ${median(rs.flat()).toFixed(3)} (creates/s; spread ${spread(rs.flat())}, 95 % interval ${lo.toFixed(3)}..${hi.toFixed(3)}: ${lo <= 1 && 1 <= hi ? "holds 1.00" : "misses 1.00"})`);
      }
    }
    // `--json <file>`: every window's figures, to try another estimator on the same run.
    if (opt.json) {
      const windows = sides.map((s) => ({ side: label(s), name: s.name, seq: s.seq, pos: s.pos, after: s.after, block: s.block, rate: s.rate, cpu: s.cpu, drainRate: s.drainRate, drainCpu: s.drainCpu, p50: s.p50, tail: s.tail, others: s.others, threads: s.threads }));
      writeFileSync(opt.json, JSON.stringify({ args: process.argv.slice(2), schedule: schedule.map((o) => o.map((k) => label(sides[k]!))), starts, loadBefore, windows }));
    }
  }
} finally {
  for (const { edge, agent } of started) {
    agent.disconnect();
    await edge.stop();
  }
  await sqld.stop();
  await collector?.stop();
  rmSync(tmp, { recursive: true, force: true });
  rmSync(onDisk, { recursive: true, force: true });
}

/** A side's short name: A, B, C…, A′. */
function label(x: { key: string }): string {
  return x.key === "A2" ? "A′" : x.key;
}

function mean(xs: number[]): number {
  return xs.reduce((sum, v) => sum + v, 0) / xs.length;
}

function geomean(xs: number[]): number {
  return Math.exp(mean(xs.map(Math.log)));
}

/**
 * A Williams design for `n` sides (rows are rounds, entries side indexes): in every position each
 * side equally often and, within rows, each side right after each other side equally often; n rows
 * for even n, 2n (the rows and their mirror images) for odd n.
 */
function williams(n: number): number[][] {
  const first = [0];
  for (let k = 1, lo = 1, hi = n - 1; first.length < n; k++) first.push(k % 2 ? lo++ : hi--);
  const rows = Array.from({ length: n }, (_, i) => first.map((x) => (x + i) % n));
  return n % 2 ? [...rows, ...rows.map((r) => [...r].reverse())] : rows;
}

/** `rounds` rounded up to whole blocks of `williams(n)`, each block's rows in a seeded random order. */
function balancedOrders(n: number, rounds: number, orderSeed: number): number[][] {
  const block = williams(n);
  const rand = seededRandom(orderSeed);
  const out: number[][] = [];
  while (out.length < rounds) {
    out.push(...shuffle(block.map((r) => [...r]), rand));
  }
  return out;
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
  // The side's settings travel with its bundle: until session 19 every side's workerd took the
  // working tree's compatibility flags, so an A/B of a wrangler.toml change (s18's
  // no_nodejs_global_timers) compared two copies of the same setting.
  copyFileSync(join(cwd, "wrangler.toml"), join(outDir, "wrangler.toml"));
}

async function api(base: string, path: string, init: RequestInit = {}, headers: Record<string, string> = {}): Promise<any> {
  const res = await fetch(base + path, { ...init, headers: { "x-api-key": ADMIN_KEY, "content-type": "application/json", ...headers } });
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
  const urls = new Set(sides.map((s) => s.edge.url));
  for (const url of urls) await waitAvailable(url, Math.min(replicas, 600));
  const pids = [...new Set(sides.map((s) => s.edge.pid)), sqld.pid, ...(collector ? [collector.pid] : [])];
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

/** A create; with `flag`, under a fresh traceparent of that sampled flag (its trace id returned). */
async function create(base: string, flag?: "00" | "01"): Promise<string | undefined> {
  const traceId = flag ? randomHex(32) : undefined;
  const headers: Record<string, string> = flag ? { traceparent: `00-${traceId}-${randomHex(16)}-${flag}` } : {};
  await api(base, "/sandboxes", { method: "POST", body: JSON.stringify({ templateID: "ab", timeout: 3600 }) }, headers);
  return traceId;
}

async function waitAvailable(base: string, n: number): Promise<void> {
  const deadline = Date.now() + 300_000;
  while ((await api(base, "/admin/teams/admin/templates/ab")).pool.available < n) {
    if (Date.now() > deadline) throw new Error(`pool of ${base}: fewer than ${n} available after 300 s`);
    await new Promise((r) => setTimeout(r, 100));
  }
}
