// Whole-system figures with the real e2b SDK against the system `npm start` runs:
//   e2e.create_first_cmd_p50_ms / _p99_ms  Sandbox.create + first commands.run('echo'), warm pool,
//                                          20 concurrent clients
//   e2e.gateway_ratio                      median commands.run('true') through the edge's gateway
//                                          over the same call straight to the agent's runtime
//   e2e.server_cpu_ms_each                 CPU time (/proc/<pid>/stat) per create + first command
//                                          of edge (workerd) + agent + spawner + sqld; with the client
//                                          and the children's: e2e.create_first_cmd_cpu_ms_each; each
//                                          process's as e2e.cpu_ms_each.<part>; counted until the
//                                          kills are destroyed and the pool refilled (the work the
//                                          creates caused, whenever the agent runs it;
//                                          e2e.settle_after_window_ms: how long after the last client)
//   e2e.warm_member_server_cpu_ms_each     the same four's CPU per warm member while the pool fills
//                                          after start-up (the refill share of the figure above)
//   e2e.queueing_ratio                     p50 at 20 clients over 20 × CPU per create + first command
//                                          ÷ cores: 1 when the latency is CPU and nothing else (no
//                                          lock, timer or batching wait); _machine uses the whole
//                                          machine's busy CPU per create instead (others' load on a
//                                          shared machine is CPU we wait for too)
//   local.driver_cpu_ms_each               CPU of the local driver alone (this process and its spawner,
//                                          _children: their exited children) per create + first
//                                          command + destroy, same run: the floor of the agent's and
//                                          spawner's share (e2e.agent_cpu_vs_driver_ratio)
//   local.isolation_floor_cpu_ms_each    the same sandbox (cgroups, disk, root overlay, user namespace
//                                          as the driver has one, bwrap's namespaces, veth) made, entered
//                                          once as uid 1000 and destroyed by a plain script with the same
//                                          tools (bench/isolation-floor.sh), a round after each of the
//                                          driver's: the floor of local.driver_total_cpu_ms_each (own +
//                                          spawner + their children), as local.driver_vs_isolation_floor_ratio
//   e2e.one_client_latency_vs_cpu          1-client p50 over the CPU of all our processes per create +
//                                          first command in that loop (e2e.one_client_cpu_ms_each)
//   e2e.path_overhead_ratio                issue 16's figure as it defines it: create + first command
//                                          through SDK, edge and agent, one client, over the local
//                                          driver's own create + first command
//                                          (local.plain_create_to_first_cmd_same_run_p50_ms, as
//                                          bench/egress.ts's), interleaved in the same run. It compares
//                                          a WARM claim (the SDK side takes a pool member the agent
//                                          made ahead) with a COLD create (the driver makes a new
//                                          sandbox, its isolation built): different work, so it reads
//                                          far below 1 and says nothing of the path's overhead
//   e2e.path_overhead_vs_warm_ratio        like for like: the same SDK side over the driver's own warm
//                                          path (local.plain_warm_claim_to_first_cmd_p50_ms): a sandbox
//                                          the driver made off the clock, taken as the agent takes a
//                                          claimed member (one driver.ensure of the claim's desired
//                                          state: next generation, claimed, namespace) + the first
//                                          command (the SDK's own: `bash -l -c 'echo hi'` as `user`);
//                                          interleaved in the same loop; spread: each round's
//                                          pair. What is above 1 is SDK, edge, agent and runtime;
//                                          local.plain_warm_claim_ensure_p50_ms: the ensure's share
//   e2e.gateway_edge_cpu_ms_per_cmd        workerd CPU per commands.run('true') through the gateway
//                                          (E2E_BENCH_EDGE_PROFILE=<file> records a V8 profile of it)
//   e2e.resume_freeze_p50_ms               after a Freeze pause: connect until a command succeeds
//   e2e.idle_sandbox_overhead_mb           extra memory per idle sandbox over 50 (agent + holders)
//   e2e.server_floor_cpu_ms_each          a floor estimate for e2e.server_cpu_ms_each (bench/server-floor.ts
//                                          says what it counts and why; not a strict bound at 20
//                                          clients: its units are priced one at a time, and a unit
//                                          costs less under concurrency; the command unit is this
//                                          spawner's and launcher's path): the unit floors (a bare
//                                          request, a libSQL `SELECT 1`, an agent-link frame, the
//                                          command in a bare server through the same spawner at the
//                                          same level) measured in E2E_BENCH_FLOOR_ROUNDS rounds right
//                                          after the settle, composed per cycle with what concurrent
//                                          cycles could share counted 0 (.one_at_a_time: counted, the
//                                          floor of a design that shares nothing); the unit floors as
//                                          e2e.<unit>_floor_cpu_ms; e2e.server_vs_floor_ratio: ours
//                                          over it. The isolation tools' CPU is not in the server
//                                          figure (the spawner's children's), but is in
//                                          e2e.create_first_cmd_cpu_ms_each (≤ 18): the same
//                                          tools' cost per sandbox made, entered and destroyed is
//                                          local.isolation_floor_cpu_ms_each (the one-client loop,
//                                          so not with E2E_BENCH_SERIAL=0), by itself above 18 here
//   e2e.isolation_floor_cpu_ms_each        the isolation's share of the server figure's floor: the
//                                          kernel work of one sandbox made and destroyed that the
//                                          agent and spawner do in their OWN processes (cgroups and
//                                          limits, the holder's fork and reap, one record, its
//                                          /etc/hosts, the files' rename and rm's fork), done by a
//                                          bare Node process in the same rounds as the unit floors
//                                          (bench/isolation-unit.ts argues each operation; by step:
//                                          .files .cgroups .holder .kill .files_gone). Not local.isolation_floor_cpu_ms_each (the
//                                          tools' CPU, children's, outside the server figure).
//                                          e2e.server_floor_with_isolation_cpu_ms_each (.one_at_a_time):
//                                          the floor above with it; e2e.server_vs_floor_with_isolation_ratio;
//                                          e2e.server_minus_floor_with_isolation_cpu_ms_each.<edge|
//                                          agent_spawner|sqld>: ours minus that floor's share, per process
//   e2e.window_server_cpu_ms_each          the server's CPU until the last client's answer only (the
//                                          count issue 16 quoted at e988497): without the destroys and
//                                          refills the settle runs
//   e2e.window_cpu_ms_each.<part>          each of the four's share of e2e.window_server_cpu_ms_each
//   e2e.rest_cpu_ms_per_s.<part>           the server's CPU per second at rest, warm pool, no clients,
//                                          just before the window; e2e.rest_share_ms_each: that rate
//                                          over the window and settle, per create (the share of
//                                          e2e.server_cpu_ms_each that is time, not work)
//   e2e.settle_pool_asks                   the edge's pool status asked while settling (each ~7 ms of
//                                          server CPU; asked only once the agent's count is right)
//   E2E_BENCH_PERF=<file>                  records `perf` (every CPU, call graphs, the fsync calls) over the
//                                          window only, for bench/perf-window.ts: on-CPU time with the
//                                          kernel's share and V8's own threads, which a V8 profile cannot
//                                          show (it counts a blocked sync call as time and misses GC and
//                                          compiler threads); the agent's JS frames with
//                                          SBX_AGENT_NODE_ARGS=--perf-basic-prof-only-functions
//   node bench/e2e.ts   prints the figures as JSON (E2E_BENCH_CREATES, E2E_BENCH_CLIENTS, E2E_BENCH_CPU_ONLY=1 for profiling,
//                       E2E_BENCH_SERIAL=0 without the one-client loop, E2E_BENCH_COUNT=1 the edge's
//                       invocations by kind: e2e.edge_invocations_each.<kind>, a run of its own)
import { Sandbox } from "e2b";
import { execFileSync, spawn } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { availableParallelism, tmpdir } from "node:os";
import { join } from "node:path";
import { startSystem } from "../scripts/lib/system.ts";
import { freePort } from "../scripts/lib/sqld.ts";
import type { Figures } from "./run.ts";
import { cpuMs, median, minMax, percentile, procCpuMs, pssKB, round, schedMs, spawnerOf, threadsCpuMs, timedConcurrently } from "./stats.ts";
import { startProfiler } from "./v8-profile.ts";
import { LocalDriver } from "../controllers/drivers/local/local-driver.ts";
import { SDK_FIRST_CMD } from "./agent-cmd-floor.ts";
import { IsolationFloor } from "./isolation-floor.ts";
import type { DesiredSandbox, IsolationLevel } from "../controllers/drivers/driver.ts";
import { composedFloors, floorByProcess, gapByProcess, hasIsolation, unitFloorFigures, UnitFloorRounds, type UnitFloors } from "./server-floor.ts";

/** E2E_BENCH_CLIENTS: fewer concurrent clients (a machine too loaded for 20 within the edge's 10 s
 * create wait); the queueing ratio uses the count that ran. */
const CLIENTS = Number(process.env.E2E_BENCH_CLIENTS ?? 20);
const CREATES = Number(process.env.E2E_BENCH_CREATES ?? 100);
// More warm members than creates, so every measured create is a claim (the figure is "with a warm pool").
const WARM = CREATES + 20;
/** E2E_BENCH_CPU_ONLY=1: stop after the create + first command figures (profiling runs). */
const CPU_ONLY = Boolean(process.env.E2E_BENCH_CPU_ONLY);
const EDGE_PROFILE = process.env.E2E_BENCH_EDGE_PROFILE;
const PERF_FILE = process.env.E2E_BENCH_PERF;
const WARM_WINDOWS = Number(process.env.E2E_BENCH_WARM_WINDOWS ?? 0);
/** E2E_BENCH_SERIAL: rounds of the one-client loop (and the driver's and the isolation floor's
 * beside it); 0 leaves it and its figures out (short CPU_ONLY runs). */
const SERIAL = Number(process.env.E2E_BENCH_SERIAL ?? 20);
/** E2E_BENCH_FLOOR_ROUNDS: rounds of the unit floors after the settle (0: none, no floor figures),
 * FLOOR_STEPS units each. */
const FLOOR_ROUNDS = Number(process.env.E2E_BENCH_FLOOR_ROUNDS ?? 5);
const FLOOR_STEPS = 30;
/** E2E_BENCH_COUNT=1: also count the edge's invocations by kind (a tail Worker, whose own CPU then
 * counts: not for CPU figures) at rest, in the window and in the settle: e2e.edge_invocations_each.<kind>
 * (window + settle per create, the settle's pool asks taken off), e2e.window_edge_invocations_each.<kind>,
 * e2e.rest_edge_invocations_per_s.<kind>. */
const COUNT = Boolean(process.env.E2E_BENCH_COUNT);
/** How long the server's rest rate is measured before the window. */
const REST_MS = 5_000;
const USER = { name: "user", uid: 1000, gid: 1000, home: "/home/user", shell: "/bin/bash" };

const pssMB = (pid: number) => pssKB(pid) / 1024;

/** Every process whose command line names this system's sandboxes folder (bwrap holders and
 * what runs inside them). */
function sandboxPids(dataDir: string): number[] {
  try {
    return execFileSync("pgrep", ["-f", join(dataDir, "agent/local/sandboxes")], { encoding: "utf8" }).trim().split("\n").filter(Boolean).map(Number);
  } catch {
    return [];
  }
}
function holderChildren(pids: number[]): number[] {
  const all = new Set(pids);
  for (const pid of pids) {
    try {
      for (const c of execFileSync("pgrep", ["-P", String(pid)], { encoding: "utf8" }).trim().split("\n").filter(Boolean)) all.add(Number(c));
    } catch {
      // no children
    }
  }
  return [...all];
}

/** Busy and total jiffies of all cores from /proc/stat (minus `since`), and busy time in ms. */
function cpuTimes(since?: { busy: number; total: number }): { busy: number; total: number; busyMs: number } {
  const f = readFileSync("/proc/stat", "utf8").split("\n")[0]!.trim().split(/\s+/).slice(1).map(Number);
  const idle = f[3]! + f[4]!;
  const total = f.reduce((a, b) => a + b, 0) - (since?.total ?? 0);
  const busy = total + (since?.total ?? 0) - idle - (since?.busy ?? 0);
  // USER_HZ is 100 on Linux.
  return { busy, total, busyMs: busy * 10 };
}

/** Sandbox.create, once more when the SDK's pooled keep-alive connection was closed by the edge
 * just as it was reused (undici: "fetch failed", EPIPE/ECONNRESET; the request never arrived). */
async function createRetryingStaleConnection(opts: { apiKey: string; apiUrl: string; sandboxUrl: string }): Promise<Sandbox> {
  try {
    return await Sandbox.create(opts);
  } catch (err) {
    const code = ((err as Error).cause as NodeJS.ErrnoException | undefined)?.code;
    if (code !== "EPIPE" && code !== "ECONNRESET") throw err;
    return await Sandbox.create(opts);
  }
}

/** The pool's available members as the edge reports them (one admin request: key check, two libSQL
 * reads, a PoolDO call: ~3.5 ms of workerd and ~3 ms of sqld CPU, counted in the figures like any
 * other server work). */
async function poolAvailable(apiUrl: string, apiKey: string): Promise<number> {
  const res = await fetch(`${apiUrl}/admin/teams/admin/templates/base`, { headers: { "x-api-key": apiKey } });
  if (!res.ok) return 0;
  const body = (await res.json()) as { pool?: { available?: number } };
  return body.pool?.available ?? 0;
}

/** Until the pool has `want` available members and the agent exactly that many sandboxes (every
 * killed one destroyed; `atLeast`: no fewer, the pool's first fill). The agent's count is its
 * sandboxes' folders, read here at no cost to the server; the edge is asked only while that count
 * is right. Asking it every 250 ms whatever the count (as before) cost the server ~3 requests per
 * create over a 75 s settle, counted in e2e.server_cpu_ms_each. `asks` counts the requests made. */
async function waitSettled(apiUrl: string, apiKey: string, want: number, sandboxesDir: string, opts: { atLeast?: boolean; asks?: { n: number } } = {}): Promise<void> {
  // The two waits this replaces had 120 s each; a loaded machine's settle took up to 79 s.
  const deadline = Date.now() + 240_000;
  const count = () => (existsSync(sandboxesDir) ? readdirSync(sandboxesDir).length : 0);
  const right = () => (opts.atLeast ? count() >= want : count() === want);
  for (;;) {
    if (right()) {
      if (opts.asks) opts.asks.n++;
      if ((await poolAvailable(apiUrl, apiKey)) >= want && right()) return;
      if (Date.now() > deadline) throw new Error(`pool did not reach ${want} available members`);
      await new Promise((r) => setTimeout(r, 250));
    } else {
      if (Date.now() > deadline) throw new Error(`the agent has ${count()} sandboxes, not the pool's ${want}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

/** `perf record` of every CPU (999 Hz, call graphs, CLOCK_MONOTONIC) and of every fsync, fdatasync
 * and clone (fork) call, until stop(). */
async function startPerf(file: string): Promise<{ stop(): Promise<void> }> {
  const events = ["cpu-clock", "syscalls:sys_enter_fsync", "syscalls:sys_enter_fdatasync", "syscalls:sys_enter_clone", "syscalls:sys_enter_clone3"].flatMap((e) => ["-e", e]);
  const child = spawn("perf", ["record", "-a", "-g", "-F", "999", "-k", "CLOCK_MONOTONIC", ...events, "-o", file], { stdio: ["ignore", "ignore", "pipe"] });
  let err = "";
  child.stderr.on("data", (d: Buffer) => (err += d));
  const exited = new Promise<void>((ok) => child.once("exit", () => ok()));
  // perf writes nothing until it runs: give it a moment to attach to every CPU.
  await new Promise((r) => setTimeout(r, 500));
  if (child.exitCode !== null) throw new Error(`perf record failed: ${err}`);
  return {
    async stop() {
      child.kill("SIGINT");
      await exited;
    },
  };
}

export async function run(): Promise<Figures> {
  const dataDir = mkdtempSync(join(tmpdir(), "sbx-bench-e2e-"));
  const runtimePort = await freePort();
  const inspectorPort = EDGE_PROFILE ? await freePort() : undefined;
  const counterPort = COUNT ? await freePort() : undefined;
  const sys = await startSystem({ dataDir, baseReplicas: WARM, runtimePort, edgeInspectorPort: inspectorPort, agentStopMs: 300_000, edgeInvocationCounterPort: counterPort });
  // Tail events arrive just after each invocation ends: read after a short pause.
  const invocations = async (): Promise<Record<string, number>> => {
    if (!counterPort) return {};
    await new Promise((r) => setTimeout(r, 300));
    return (await (await fetch(`http://127.0.0.1:${counterPort}/`)).json()) as Record<string, number>;
  };
  /** Counts b - a by kind, per `n`, as figures `<name>.<kind>` and their sum as `<name>`;
   * `off`: counts of requests that are not the cycles' (the settle's pool asks). */
  const countFigures = (name: string, a: Record<string, number>, b: Record<string, number>, n: number, unit: string, off: Record<string, number> = {}) => {
    let all = 0;
    for (const [k, v] of Object.entries(b)) {
      const d = v - (a[k] ?? 0) - (off[k] ?? 0);
      if (d <= 0) continue;
      all += d;
      figures[`${name}.${k.replace(/^\? /, "Worker ").replaceAll(" ", "_")}`] = { value: round(d / n, 2), unit };
    }
    figures[name] = { value: round(all / n, 2), unit };
  };
  const opts = { apiKey: sys.apiKey, apiUrl: sys.apiUrl, sandboxUrl: sys.apiUrl };
  const sandboxesDir = join(dataDir, "agent/local/sandboxes");
  const figures: Figures = {};
  try {
    // The server's CPU per warm member made (the pool filling from empty after start-up): what each
    // claim's refill costs in the window below, which that window cannot tell apart.
    const serverParts = () => [sys.agent.pid!, spawnerOf(sys.agent.pid!), sys.edge.pid, sys.sqld.pid].reduce<number>((a, pid) => a + procCpuMs(pid).own, 0);
    const warmBefore = serverParts();
    await waitSettled(sys.apiUrl, sys.apiKey, WARM, sandboxesDir, { atLeast: true });
    figures["e2e.warm_member_server_cpu_ms_each"] = { value: round((serverParts() - warmBefore) / WARM), unit: "ms" };

    // Create + first command, one client: the latency floor without contention, interleaved with
    // the local driver's own create + first command (a new sandbox of the same template, no edge,
    // no agent, no SDK) so the machine's load hits both alike. Kills and destroys off the clock.
    const serial: number[] = [];
    const plain: number[] = [];
    // The same driver's warm path, like for like with the SDK side (which claims a warm member the
    // agent made ahead): a sandbox the driver made off the clock, as the pool makes its members,
    // then taken as the agent takes a claimed one (reconciler.ts #pass: one driver.ensure of the
    // claim's desired state, the member's next generation, claimed, its owner's namespace; env
    // vars and token go to the agent's runtime, not the driver) + the first command. The plain
    // side above makes a NEW sandbox (the isolation built, ~600 ms at bwrap+cgroup), which no
    // claim of a warm member does.
    const plainWarm: number[] = [];
    const plainWarmEnsure: number[] = [];
    // The driver alone (this process and its spawner; their exited children apart): the floor of
    // the agent's and spawner's CPU per create + first command + kill, since the window below
    // carries a refill's create and a kill's destroy per create too.
    const plainCpu: number[] = [];
    const plainChildrenCpu: number[] = [];
    let driverSpawner: number | undefined;
    const driverCpuMs = () => {
      // Looked up once: pgrep is a child of this process, its CPU would count.
      driverSpawner ??= spawnerOf(process.pid);
      const [own, sp] = [procCpuMs(process.pid), procCpuMs(driverSpawner)];
      // Own CPU at µs/ns resolution (/proc/<pid>/stat counts 10 ms ticks, as coarse as the figure);
      // reaped children's only exists in ticks.
      const u = process.cpuUsage();
      return { own: (u.user + u.system) / 1000 + schedMs(driverSpawner), children: own.children + sp.children };
    };
    // One client: all of the system's and the client's CPU per create + first command (kill off
    // the clock), beside its latency: with nothing queued behind another request, latency above
    // this CPU is a wait (a lock, a timer, I/O) or other users' CPU.
    const serialCpu: number[] = [];
    const agentSpawner = spawnerOf(sys.agent.pid!);
    const systemCpuMs = () =>
      [process.pid, sys.agent.pid!, agentSpawner, sys.edge.pid, sys.sqld.pid].reduce<number>((a, pid) => {
        const c = procCpuMs(pid);
        return a + c.own + (pid === process.pid ? 0 : c.children);
      }, 0);
    const driver = new LocalDriver({ dataDir: join(dataDir, "plain"), cgroupName: `kruise-bench-${process.pid}-plain` });
    // The isolation floor: the same sandbox made, entered once and destroyed by a plain script
    // with the same tools (isolation-floor.sh), a round after each of the driver's; with a user
    // namespace only where the driver makes one (not when its data directory is not passable).
    // Absent where it cannot be made (not root, no template built, no bridge): said, and the
    // floor's figures are left out rather than the whole suite.
    let floor: IsolationFloor | undefined;
    try {
      floor = new IsolationFloor({ parent: dataDir, userns: !driver.capabilities.notes.some((n) => n.startsWith("no user namespace")) });
    } catch (err) {
      console.error(`bench e2e: no isolation floor: ${(err as Error).message}`);
    }
    const floorCpu: number[] = [];
    const plainTotalCpu: number[] = [];
    try {
      for (let i = 0; i < SERIAL; i++) {
        const d: DesiredSandbox = {
          id: `bpl${process.pid}x${i}`, generation: 1, template: "base", state: "Running", pauseStrategy: "Freeze",
          resources: { cpuCount: 1, memoryMB: 512 }, allowInternetAccess: true,
        };
        // The round's warm member, made first and off every clock, as the pool makes one ahead: it
        // rests through the round until its claim, and the previous round's destroy (its files
        // deleted in the background) overlaps this making, not a timed step.
        const w: DesiredSandbox = {
          ...d, id: `bpw${process.pid}x${i}`, pool: "base", claimed: false,
          labels: { "agents.kruise.io/sandbox-pool": "bench/base", "agents.kruise.io/sandbox-claimed": "false" },
        };
        await driver.ensure(w);
        const sysBefore = systemCpuMs();
        let t = performance.now();
        const sbx = await Sandbox.create(opts);
        await sbx.commands.run("echo hi");
        serial.push(performance.now() - t);
        serialCpu.push(systemCpuMs() - sysBefore);
        await sbx.kill();
        const cpuBefore = driverCpuMs();
        t = performance.now();
        await driver.ensure(d);
        await driver.exec(d.id, { cmd: "/bin/true", args: [], cwd: "/", env: {}, user: USER });
        plain.push(performance.now() - t);
        await driver.destroy(d.id);
        // The first round left out: the driver's first calls (its spawner started just before, by
        // the warm member), not a sandbox's cost.
        const cpuAfter = driverCpuMs();
        if (i > 0) plainCpu.push(cpuAfter.own - cpuBefore.own);
        if (i > 0) plainChildrenCpu.push(cpuAfter.children - cpuBefore.children);
        if (i > 0) plainTotalCpu.push(plainCpu.at(-1)! + plainChildrenCpu.at(-1)!);
        if (i > 0 && floor) floorCpu.push(floor.round());
        t = performance.now();
        await driver.ensure({ ...w, generation: w.generation + 1, claimed: true, namespace: "bench", labels: {}, annotations: {} });
        plainWarmEnsure.push(performance.now() - t);
        const first = await driver.exec(w.id, SDK_FIRST_CMD);
        plainWarm.push(performance.now() - t);
        if (first.stdout !== "hi\n") throw new Error(`bench e2e: the warm member's first command said ${JSON.stringify(first)}`);
        await driver.destroy(w.id);
      }
    } finally {
      for (const s of await driver.list()) await driver.destroy(s.id).catch(() => {});
      await driver.dispose();
      floor?.dispose();
      // The driver's spawner exits on its own after dispose; reaped later, its CPU and all its
      // helpers' (~1 s) would land in this process's children's time inside the window below.
      for (let t = 0; driverSpawner && existsSync(`/proc/${driverSpawner}`) && t < 100; t++) await new Promise((r) => setTimeout(r, 50));
    }
    if (SERIAL > 1) {
      figures["e2e.create_first_cmd_1_client_p50_ms"] = { value: round(median(serial)), unit: "ms", spread: minMax(serial) };
      figures["local.plain_create_to_first_cmd_same_run_p50_ms"] = { value: round(median(plain)), unit: "ms", spread: minMax(plain) };
      // Issue 16's ratio as it defines it: a warm claim (SDK side) over a cold create (plain side).
      figures["e2e.path_overhead_ratio"] = { value: round(median(serial) / median(plain)), unit: "ratio", target: "≤ 2.0" };
      // Like for like: the same warm claim + first command, with and without SDK, edge and agent.
      // Spread: the ratio of each round's pair (interleaved, so the machine's load hits both alike).
      figures["local.plain_warm_claim_to_first_cmd_p50_ms"] = { value: round(median(plainWarm)), unit: "ms", spread: minMax(plainWarm) };
      figures["local.plain_warm_claim_ensure_p50_ms"] = { value: round(median(plainWarmEnsure)), unit: "ms", spread: minMax(plainWarmEnsure) };
      const pairs = serial.map((x, k) => x / plainWarm[k]!);
      figures["e2e.path_overhead_vs_warm_ratio"] = { value: round(median(serial) / median(plainWarm)), unit: "ratio", spread: minMax(pairs) };
      figures["local.driver_cpu_ms_each"] = { value: round(median(plainCpu)), unit: "ms", spread: minMax(plainCpu) };
      figures["local.driver_children_cpu_ms_each"] = { value: round(median(plainChildrenCpu)), unit: "ms" };
      figures["local.driver_total_cpu_ms_each"] = { value: round(median(plainTotalCpu)), unit: "ms", spread: minMax(plainTotalCpu) };
      if (floorCpu.length) {
        figures["local.isolation_floor_cpu_ms_each"] = { value: round(median(floorCpu)), unit: "ms", spread: minMax(floorCpu) };
        figures["local.driver_vs_isolation_floor_ratio"] = { value: round(median(plainTotalCpu) / median(floorCpu)), unit: "ratio" };
      }
      figures["e2e.one_client_cpu_ms_each"] = { value: round(median(serialCpu)), unit: "ms", spread: [Math.min(...serialCpu), Math.max(...serialCpu)] };
      figures["e2e.one_client_latency_vs_cpu"] = { value: round(median(serial) / median(serialCpu)), unit: "ratio" };
    }

    // The window below starts from a settled system (the loop's kills destroyed, their refills
    // ready), so it counts its own creates' work only. Then the server at rest for REST_MS: the
    // CPU it spends whatever the clients do (heartbeats, timers), which the window counts for every
    // second it lasts, the settle included (e2e.rest_share_ms_each).
    await waitSettled(sys.apiUrl, sys.apiKey, WARM, sandboxesDir);
    // E2E_BENCH_WARM_WINDOWS: the same window run first this many times, each settled, its split
    // printed: how much of the window's figure is code not yet optimised (a Node process runs the
    // create + command path ~20 times before the window, in the one-client loop).
    for (let w = 0; w < WARM_WINDOWS; w++) {
      const pids = { agent: sys.agent.pid!, spawner: agentSpawner, edge: sys.edge.pid, sqld: sys.sqld.pid };
      const before = Object.fromEntries(Object.entries(pids).map(([k, pid]) => [k, procCpuMs(pid).own]));
      const kills: Promise<unknown>[] = [];
      await timedConcurrently(CREATES, CLIENTS, async () => {
        const sbx = await Sandbox.create(opts);
        await sbx.commands.run("echo hi");
        kills.push(sbx.kill());
      });
      const split = Object.fromEntries(Object.entries(pids).map(([k, pid]) => [k, round((procCpuMs(pid).own - before[k]!) / CREATES)]));
      console.error(`bench e2e: warm-up window ${w + 1}: server CPU per create + first command ${JSON.stringify(split)}`);
      await Promise.all(kills);
      await waitSettled(sys.apiUrl, sys.apiKey, WARM, sandboxesDir);
    }
    const serverPids = { agent: sys.agent.pid!, spawner: agentSpawner, edge: sys.edge.pid, sqld: sys.sqld.pid };
    const restCounted = await invocations();
    const restBefore = Object.fromEntries(Object.entries(serverPids).map(([k, pid]) => [k, pid ? threadsCpuMs(pid) : 0]));
    const restStart = performance.now();
    await new Promise((r) => setTimeout(r, REST_MS));
    const restS = (performance.now() - restStart) / 1000;
    if (COUNT) countFigures("e2e.rest_edge_invocations_per_s", restCounted, await invocations(), restS, "calls/s");
    let restPerS = 0;
    for (const [k, pid] of Object.entries(serverPids)) {
      const rate = ((pid ? threadsCpuMs(pid) : 0) - restBefore[k]!) / restS;
      restPerS += rate;
      figures[`e2e.rest_cpu_ms_per_s.${k}`] = { value: round(rate, 2), unit: "ms/s" };
    }

    // The two halves are reported too: where the time goes decides what to fix.
    const kills: Promise<unknown>[] = [];
    const creates: number[] = [];
    const firstCmds: number[] = [];
    // Before the counts below: its start is not the window's.
    const perf = PERF_FILE ? await startPerf(PERF_FILE) : null;
    const windowCounted = await invocations();
    const cpuBefore = cpuTimes();
    const parts = { bench: process.pid, agent: sys.agent.pid!, spawner: spawnerOf(sys.agent.pid!), edge: sys.edge.pid, sqld: sys.sqld.pid };
    const partsBefore = Object.fromEntries(Object.entries(parts).map(([k, pid]) => [k, procCpuMs(pid)]));
    // CPU_ONLY: the edge's profile covers this window (the creates), not the gateway loop.
    const windowProfiler = CPU_ONLY && inspectorPort ? await startProfiler(inspectorPort) : null;
    const windowStart = process.hrtime.bigint() / 1000n; // a CPU profile's clock (--cpu-prof)
    const windowStartMs = performance.now();
    const createFirst = await timedConcurrently(CREATES, CLIENTS, async () => {
      const t = performance.now();
      const sbx = await Sandbox.create(opts);
      const created = performance.now();
      await sbx.commands.run("echo hi");
      creates.push(created - t);
      firstCmds.push(performance.now() - created);
      kills.push(sbx.kill());
    });
    const windowEnd = performance.now();
    const windowEndUs = process.hrtime.bigint() / 1000n;
    // What issue 16 measured at e988497: the server's CPU until the last client's answer, without the
    // destroys and refills that run after it.
    const atWindowEnd = Object.fromEntries(Object.entries(parts).map(([k, pid]) => [k, procCpuMs(pid)]));
    // The whole machine's busy time (queueing_ratio_machine): the clients' window only.
    const cpu = cpuTimes(cpuBefore);
    await perf?.stop();
    if (perf) console.error(`perf window: ${PERF_FILE} ${JSON.stringify({ ...parts, creates: CREATES })}`);
    // The CPU window ends once the work these creates caused is done: the kills' sandboxes destroyed
    // and the pool refilled. Whatever the agent runs first (claims before destroys) must not move
    // CPU out of the figure.
    const windowEndCounted = COUNT ? await invocations() : {};
    await Promise.all(kills);
    const settleAsks = { n: 0 };
    await waitSettled(sys.apiUrl, sys.apiKey, WARM, sandboxesDir, { asks: settleAsks });
    const settleMs = performance.now() - windowEnd;
    const partsAfter = Object.fromEntries(Object.entries(parts).map(([k, pid]) => [k, procCpuMs(pid)]));
    if (COUNT) {
      countFigures("e2e.window_edge_invocations_each", windowCounted, windowEndCounted, CREATES, "calls");
      // Each pool ask is one Worker fetch and one PoolDO status.
      countFigures("e2e.edge_invocations_each", windowCounted, await invocations(), CREATES, "calls", { "? fetch": settleAsks.n, "PoolDO rpc status": settleAsks.n });
    }
    if (CPU_ONLY) console.error(`window (monotonic us): ${windowStart} ${windowEndUs} ${process.hrtime.bigint() / 1000n} (start, last answer, settled)`);
    if (windowProfiler && EDGE_PROFILE) writeFileSync(EDGE_PROFILE, JSON.stringify(await windowProfiler.stop()));
    figures["e2e.settle_after_window_ms"] = { value: round(settleMs), unit: "ms" };
    figures["e2e.settle_pool_asks"] = { value: settleAsks.n, unit: "requests" };
    // No target: issue 16 withdrew issue 4's ≤ 50 / ≤ 150 ms (at 20 clients on 2 cores the latency is
    // the machine's CPU, 20 × CPU per operation ÷ cores); e2e.queueing_ratio is what it states instead.
    figures["e2e.create_first_cmd_p50_ms"] = { value: round(median(createFirst)), unit: "ms" };
    figures["e2e.create_first_cmd_p99_ms"] = { value: round(percentile(createFirst, 99)), unit: "ms" };
    figures["e2e.create_p50_ms"] = { value: round(median(creates)), unit: "ms" };
    figures["e2e.first_cmd_p50_ms"] = { value: round(median(firstCmds)), unit: "ms" };
    // Whether 20 clients saturate the machine: busy share of all cores (the whole machine's, so other
    // users of a shared machine show here; the CPU figures below are the system's processes' own).
    figures["e2e.create_first_cmd_cpu_busy_pct"] = { value: round((100 * cpu.busy) / cpu.total), unit: "%" };
    // CPU time per create + first command for each process over the window (the pool's refills and
    // the kills that ran in it included): own time, and `_children` what its exited children used
    // (the spawner's: the launchers, enter.pl, one per command).
    const each: Record<string, number> = {};
    for (const k of Object.keys(parts)) {
      const [a, b] = [partsBefore[k]!, partsAfter[k]!];
      each[k] = (b.own - a.own) / CREATES;
      each[`${k}_children`] = (b.children - a.children) / CREATES;
      figures[`e2e.cpu_ms_each.${k}`] = { value: round(each[k]!), unit: "ms" };
      if (each[`${k}_children`]! > 0) figures[`e2e.cpu_ms_each.${k}_children`] = { value: round(each[`${k}_children`]!), unit: "ms" };
    }
    // The server: edge (workerd), agent, spawner, sqld; not the client nor the sandboxes' processes.
    const server = each.edge! + each.agent! + each.spawner! + each.sqld!;
    figures["e2e.server_cpu_ms_each"] = { value: round(server), unit: "ms", target: "≤ 8" };
    const serverAt = (at: Record<string, { own: number }>) => ["edge", "agent", "spawner", "sqld"].reduce((a, k) => a + at[k]!.own - partsBefore[k]!.own, 0);
    figures["e2e.window_server_cpu_ms_each"] = { value: round(serverAt(atWindowEnd) / CREATES), unit: "ms" };
    // Which process the window's figure is: the one to profile first (the settle's share is the
    // difference from e2e.cpu_ms_each.<part>).
    for (const k of ["edge", "agent", "spawner", "sqld"]) {
      figures[`e2e.window_cpu_ms_each.${k}`] = { value: round((atWindowEnd[k]!.own - partsBefore[k]!.own) / CREATES), unit: "ms" };
    }
    // The share of the server's figure that is its rest rate over the window and the settle: what
    // a faster refill (a shorter settle) or a quieter idle would take off.
    figures["e2e.rest_share_ms_each"] = { value: round((restPerS * (windowEnd + settleMs - windowStartMs)) / 1000 / CREATES), unit: "ms" };
    // The agent's and spawner's share over the driver's own create + first command + destroy (its
    // floor: the window's refill and kill are that work, plus the claim and the command).
    if (plainCpu.length) figures["e2e.agent_cpu_vs_driver_ratio"] = { value: round((each.agent! + each.spawner!) / median(plainCpu)), unit: "ratio" };
    const whole = Object.values(each).reduce((a, b) => a + b, 0);
    figures["e2e.create_first_cmd_cpu_ms_each"] = { value: round(whole), unit: "ms", target: "≤ 18" };
    // Little's law with the CPU as the only server: 20 clients each wait for 20 operations' CPU
    // shared by the cores. Above 1: waits that are not CPU (or CPU nobody here counted).
    const cores = availableParallelism();
    figures["e2e.queueing_ratio"] = { value: round(median(createFirst) / ((CLIENTS * whole) / cores)), unit: "ratio", target: "≤ 1.15" };
    figures["e2e.queueing_ratio_machine"] = { value: round(median(createFirst) / ((CLIENTS * (cpu.busyMs / CREATES)) / cores)), unit: "ratio" };

    // The server's floor, in rounds right after the settle (nothing of the window's left to run):
    // the same processes, the same load, minutes apart at most.
    // A floor that cannot be measured (its command server failing to start, a unit read negative)
    // costs its own figures only, not the suite's, as the isolation floor's above.
    if (FLOOR_ROUNDS > 0) {
      try {
        // The agent reports its level with what it adds ("bwrap+cgroup, disk quota").
        const level = sys.isolation.split(",")[0]!.trim() as IsolationLevel;
        if (!["bwrap+cgroup", "bwrap", "process"].includes(level)) throw new Error(`bench e2e: the agent's isolation ${JSON.stringify(sys.isolation)}?`);
        const floors = await UnitFloorRounds.start(
          { apiUrl: sys.apiUrl, clusterToken: sys.secrets.clusterToken, sqldUrl: sys.sqld.url, edgePid: sys.edge.pid!, sqldPid: sys.sqld.pid! },
          { dataDir: join(dataDir, "cmd-floor"), level },
        );
        const rounds: UnitFloors[] = [];
        try {
          for (let r = 0; r < FLOOR_ROUNDS; r++) rounds.push(await floors.round(FLOOR_STEPS));
        } finally {
          await floors.stop();
        }
        Object.assign(figures, unitFloorFigures("e2e", rounds));
        // 20 clients: what concurrent cycles could share (a libSQL request, an agent frame) counts 0.
        const bound = composedFloors(rounds, true);
        figures["e2e.server_floor_cpu_ms_each"] = { value: round(median(bound), 2), unit: "ms", spread: minMax(bound) };
        const unshared = composedFloors(rounds, false);
        figures["e2e.server_floor_cpu_ms_each.one_at_a_time"] = { value: round(median(unshared), 2), unit: "ms", spread: minMax(unshared) };
        figures["e2e.server_vs_floor_ratio"] = { value: round(server / median(bound), 2), unit: "ratio", spread: minMax(bound.map((b) => server / b)) };
        // With the isolation's own-process work (bench/isolation-unit.ts, measured in the same
        // rounds): above 8 (issue 16's e2e.server_cpu_ms_each target), the target is out of reach
        // while each cycle makes and destroys a sandbox this way; below, what is left per process.
        if (hasIsolation(rounds)) {
          const withIsolation = composedFloors(rounds, true, true);
          figures["e2e.server_floor_with_isolation_cpu_ms_each"] = { value: round(median(withIsolation), 2), unit: "ms", spread: minMax(withIsolation) };
          const alone = composedFloors(rounds, false, true);
          figures["e2e.server_floor_with_isolation_cpu_ms_each.one_at_a_time"] = { value: round(median(alone), 2), unit: "ms", spread: minMax(alone) };
          figures["e2e.server_vs_floor_with_isolation_ratio"] = { value: round(server / median(withIsolation), 2), unit: "ratio", spread: minMax(withIsolation.map((b) => server / b)) };
          const by = floorByProcess(rounds, { concurrent: true, withIsolation: true });
          const gap = gapByProcess({ edge: each.edge!, agent: each.agent!, spawner: each.spawner!, sqld: each.sqld! }, by);
          for (const [k, v] of Object.entries(gap)) figures[`e2e.server_minus_floor_with_isolation_cpu_ms_each.${k}`] = { value: round(v, 2), unit: "ms" };
        }
      } catch (err) {
        console.error(`bench e2e: no server floor: ${(err as Error).message}`);
      }
    }

    if (CPU_ONLY) {
      // Let the refills finish first: stopping an agent in the middle of them left sandboxes behind
      // once (its stop timed out on the loaded machine and it was killed).
      await waitSettled(sys.apiUrl, sys.apiKey, WARM, sandboxesDir, { atLeast: true });
      return figures;
    }
    // The same sandbox, the same call, through the gateway and straight to the runtime, interleaved.
    const sbx = await Sandbox.create(opts);
    const direct = await Sandbox.connect(sbx.sandboxId, { ...opts, sandboxUrl: `http://127.0.0.1:${runtimePort}` });
    for (let i = 0; i < 20; i++) await Promise.all([sbx.commands.run("true"), direct.commands.run("true")]);
    const viaGateway: number[] = [];
    const viaRuntime: number[] = [];
    const profiler = inspectorPort ? await startProfiler(inspectorPort) : null;
    // Only the gateway's calls touch workerd in this loop.
    const edgeCpuBefore = cpuMs(sys.edge.pid!);
    for (let i = 0; i < 200; i++) {
      let t = performance.now();
      await sbx.commands.run("true");
      viaGateway.push(performance.now() - t);
      t = performance.now();
      await direct.commands.run("true");
      viaRuntime.push(performance.now() - t);
    }
    figures["e2e.gateway_edge_cpu_ms_per_cmd"] = { value: round((cpuMs(sys.edge.pid!) - edgeCpuBefore) / 200, 3), unit: "ms" };
    if (profiler && EDGE_PROFILE) writeFileSync(EDGE_PROFILE, JSON.stringify(await profiler.stop()));
    figures["e2e.gateway_run_true_p50_ms"] = { value: round(median(viaGateway)), unit: "ms" };
    figures["e2e.runtime_run_true_p50_ms"] = { value: round(median(viaRuntime)), unit: "ms" };
    figures["e2e.gateway_ratio"] = { value: round(median(viaGateway) / median(viaRuntime)), unit: "ratio", target: "≤ 1.5" };

    // Freeze pause, then connect until the first command succeeds.
    const resumes: number[] = [];
    for (let i = 0; i < 20; i++) {
      await sbx.pause();
      const t = performance.now();
      const back = await Sandbox.connect(sbx.sandboxId, opts);
      await back.commands.run("true");
      resumes.push(performance.now() - t);
    }
    figures["e2e.resume_freeze_p50_ms"] = { value: round(median(resumes)), unit: "ms", target: "≤ 50" };
    await sbx.kill();

    // Memory per idle sandbox: the agent's growth plus the sandboxes' own processes, over 50.
    const agentPid = sys.agent.pid!;
    const before = pssMB(agentPid) + holderChildren(sandboxPids(dataDir)).reduce((a, p) => a + pssMB(p), 0);
    const idle: Sandbox[] = [];
    for (let i = 0; i < 50; i++) idle.push(await createRetryingStaleConnection(opts));
    await new Promise((r) => setTimeout(r, 2_000));
    const after = pssMB(agentPid) + holderChildren(sandboxPids(dataDir)).reduce((a, p) => a + pssMB(p), 0);
    figures["e2e.idle_sandbox_overhead_mb"] = { value: round((after - before) / 50), unit: "MB", target: "≤ 20" };
    await Promise.all(idle.map((s) => s.kill()));
  } finally {
    await sys.stop();
    if (process.env.BENCH_KEEP) console.error(`kept ${dataDir}`);
    else {
      try {
        rmSync(dataDir, { recursive: true, force: true });
      } catch (err) {
        // The figures still count; what is left must be cleaned by hand (a mount still busy).
        console.error(`bench e2e: could not remove ${dataDir}: ${String(err)}`);
      }
    }
  }
  return figures;
}

if (import.meta.main) console.log(JSON.stringify(await run(), null, 2));
