// The server's CPU per step of e2e.server_cpu_ms_each, one client, on a system whose sandboxes are
// plain processes (the local driver's `process` level, which has no disk either: no mounts, cgroups, namespaces or
// loop devices), so what is left is the edge's, libSQL's and the agent's own work per step, without
// the isolation's (whose floor the e2e suite measures: local.isolation_floor_cpu_ms_each):
//   e2e_steps.create_cpu_ms.<part>   Sandbox.create with a warm pool, and its member's refill
//   e2e_steps.kill_cpu_ms.<part>     Sandbox.kill, and the sandbox's destroy
//   e2e_steps.cmd_cpu_ms.<part>      commands.run('echo hi') through the gateway
//   e2e_steps.request_floor_cpu_ms   workerd's CPU per GET /health (a route that calls nothing),
//                                    one at a time: what each request or event costs workerd before
//                                    any of our work, the floor of a step's edge share per hop
//   e2e_steps.sqld_request_floor_cpu_ms  sqld's CPU per `SELECT 1` over HTTP through the client the
//                                    edge uses (@libsql/client/web), one at a time: the floor of
//                                    each libSQL request a step makes
//   e2e_steps.cycle_cpu_ms.spawner_children  the same window's CPU of the spawner's reaped children
//                                    (the isolation's tools, the sandboxes' processes; /proc stat's
//                                    cutime + cstime, 10 ms ticks), beside the parts, not summed
//   e2e_steps.cycle_cpu_ms.<part>    all the rounds' CPU per create + command + kill, from before the
//                                    first round to TAIL_MS after the last, floors taken off: what
//                                    a step sets off later (a group's alarm, an index check) counts
//                                    too, wherever it lands (the steps' windows miss what runs after)
//   e2e_steps.cmd_floor_cpu_ms        the same command's floor in the agent and its spawner: a bare
//                                    node:http server that takes the same request and starts the
//                                    same command in a sandbox at the same level through the same
//                                    spawner (bench/agent-cmd-floor.ts), CPU of it and its spawner
//                                    per request, one at a time (.server, .spawner: each one's);
//                                    e2e_steps.cmd_agent_vs_floor_ratio:
//                                    cmd_cpu_ms.agent + .spawner over it, same run
//   e2e_steps.agent_frame_floor_cpu_ms  workerd's CPU per agent-link frame that does nothing (a
//                                    heartbeat, on a second cluster's session), one at a time: the
//                                    floor of each ClusterDO WebSocket event a step makes
//   e2e_steps.cycle_server_floor_cpu_ms  the unit floors above (bench/server-floor.ts measures
//                                    them, a round after each round of steps) composed into a
//                                    lower bound of a cycle's server CPU, every item counted (one
//                                    cycle at a time shares nothing); e2e_steps.cycle_server_vs_floor_ratio:
//                                    the cycle_cpu_ms parts' sum over it
//   e2e_steps.cycle_server_floor_with_isolation_cpu_ms  at bwrap+cgroup: the same with the
//                                    isolation's own-process work per sandbox made and destroyed
//                                    (bench/isolation-unit.ts; e2e_steps.isolation_floor_cpu_ms_each);
//                                    e2e_steps.cycle_server_vs_floor_with_isolation_ratio, and
//                                    e2e_steps.cycle_server_minus_floor_with_isolation_cpu_ms.<edge|
//                                    agent_spawner|sqld>: each process's cycle CPU minus its share
// <part>: edge (workerd), agent, spawner, sqld; CPU of all their threads (schedstat, ns). Each step
// runs STEPS times in a row and waits until the pool is whole again; ROUNDS rounds alternate the
// steps; the median of the rounds, with their spread. Sequential on purpose: at 20 clients the
// window batches some commits, but the settle's destroys and refills run one by one like these.
// E2E_STEPS_LEVEL=bwrap+cgroup|bwrap runs the same steps at that isolation level instead (the
// driver's own isolation work then counts in the agent's and spawner's share; bwrap+cgroup is what
// `npm run bench -- e2e` and `npm start` get here); E2E_STEPS_STEPS and E2E_STEPS_ROUNDS change the
// counts (shorter profiling runs). E2E_STEPS_MARKS=<file> writes each step's windows as
// CLOCK_MONOTONIC µs (the clock of a V8 profile's timestamps: `node --cpu-prof`'s startTime, and
// of `perf record -k CLOCK_MONOTONIC`) and the parts' pids, for bench/agent-profile.ts to cut the
// agent's and spawner's profiles by step (bench/perf-window.ts with PERF_TIME, a perf recording).
// E2E_STEPS_COUNT=1 instead counts the edge's invocations per step (a tail Worker, whose own CPU
// would count: a run of its own): e2e_steps.<step>_edge_invocations.<kind> (Worker fetches, each
// Durable Object RPC method, alarms, WebSocket events), with the pool's status asks left out, and
// e2e_steps.cycle_edge_invocations.<kind>: the whole run's per create + command + kill, what lands
// outside the steps' windows included (as cycle_cpu_ms counts it).
//   node bench/e2e-steps.ts   prints the figures as JSON
import { Sandbox } from "e2b";
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startSystem } from "../scripts/lib/system.ts";
import { freePort } from "../scripts/lib/sqld.ts";
import type { Figures } from "./run.ts";
import { median, minMax, procCpuMs, round, spawnerOf, threadsCpuMs } from "./stats.ts";
import { composedFloors, floorByProcess, gapByProcess, hasIsolation, unitFloorFigures, UnitFloorRounds, type UnitFloors } from "./server-floor.ts";

const WARM = 20;
const STEPS = Number(process.env.E2E_STEPS_STEPS ?? 30);
const ROUNDS = Number(process.env.E2E_STEPS_ROUNDS ?? 3);
const LEVEL = (process.env.E2E_STEPS_LEVEL ?? "process") as "process" | "bwrap" | "bwrap+cgroup";
const MARKS = process.env.E2E_STEPS_MARKS;
/** Now on CLOCK_MONOTONIC in µs, as V8's profiler stamps its samples. */
const monoUs = () => Number(process.hrtime.bigint() / 1000n);
const COUNT = Boolean(process.env.E2E_STEPS_COUNT);
/** After the last round, long enough for what the steps set off later to run (a create's
 * undelivered retry at the ack wait + 2 s, an index op's 30 s check). */
const TAIL_MS = 35_000;

export async function run(): Promise<Figures> {
  if (!["process", "bwrap", "bwrap+cgroup"].includes(LEVEL)) throw new Error(`E2E_STEPS_LEVEL: ${LEVEL}?`);
  const dataDir = mkdtempSync(join(tmpdir(), "sbx-bench-e2e-steps-"));
  // At process level the driver makes no disk image either (probe.ts).
  const counterPort = COUNT ? await freePort() : undefined;
  const sys = await startSystem({ dataDir, baseReplicas: WARM, level: LEVEL, agentStopMs: 60_000, edgeInvocationCounterPort: counterPort });
  // Tail events arrive just after each invocation ends: read after a short pause.
  const invocations = async (): Promise<Record<string, number>> => {
    if (!counterPort) return {};
    await new Promise((r) => setTimeout(r, 300));
    return (await (await fetch(`http://127.0.0.1:${counterPort}/`)).json()) as Record<string, number>;
  };
  let asks = 0;
  const figures: Figures = {};
  let floors: UnitFloorRounds | undefined;
  try {
    const sandboxesDir = join(dataDir, "agent/local/sandboxes");
    const opts = { apiKey: sys.apiKey, apiUrl: sys.apiUrl, sandboxUrl: sys.apiUrl };
    const available = async () => {
      asks++;
      const res = await fetch(`${sys.apiUrl}/admin/teams/admin/templates/base`, { headers: { "x-api-key": sys.apiKey } });
      return res.ok ? (((await res.json()) as { pool?: { available?: number } }).pool?.available ?? 0) : 0;
    };
    // Whole: WARM members available, no other sandbox (the admin request costs ~7 ms of server CPU:
    // asked once a second at most, and only once the agent's count is right).
    const whole = async () => {
      for (const deadline = Date.now() + 120_000; Date.now() < deadline; await new Promise((r) => setTimeout(r, 1000))) {
        if ((existsSync(sandboxesDir) ? readdirSync(sandboxesDir).length : 0) === WARM && (await available()) >= WARM) return;
      }
      throw new Error(`the pool did not come back to ${WARM} members`);
    };
    await whole();
    const parts = { edge: sys.edge.pid!, agent: sys.agent.pid!, spawner: spawnerOf(sys.agent.pid!)!, sqld: sys.sqld.pid! };
    const snap = () => Object.fromEntries(Object.entries(parts).map(([k, pid]) => [k, threadsCpuMs(pid)])) as Record<keyof typeof parts, number>;
    const per: Record<string, Record<string, number[]>> = { create: {}, kill: {}, cmd: {} };
    const marks: { step: string; from: number; to: number }[] = [];
    let markFrom = monoUs();
    const add = (step: string, a: Record<string, number>, b: Record<string, number>) => {
      for (const k of Object.keys(parts)) (per[step]![k] ??= []).push((b[k]! - a[k]!) / STEPS);
      marks.push({ step, from: markFrom, to: monoUs() });
    };
    // The invocations of each step, the admin status asks (one Worker fetch and one PoolDO status
    // each) taken off.
    const calls: Record<string, Record<string, number>> = { create: {}, kill: {}, cmd: {} };
    let counted = await invocations();
    let asksBefore = asks;
    const count = async (step: string) => {
      const now = await invocations();
      const n = asks - asksBefore;
      for (const [k, v] of Object.entries(now)) {
        const d = v - (counted[k] ?? 0) - (k === "? fetch" || k === "PoolDO rpc status" ? n : 0);
        calls[step]![k] = (calls[step]![k] ?? 0) + d;
      }
      counted = await invocations();
      asksBefore = asks;
    };
    const floorRounds: UnitFloors[] = [];
    floors = await UnitFloorRounds.start(
      { apiUrl: sys.apiUrl, clusterToken: sys.secrets.clusterToken, sqldUrl: sys.sqld.url, edgePid: parts.edge, sqldPid: parts.sqld },
      COUNT ? undefined : { dataDir: join(dataDir, "cmd-floor"), level: LEVEL },
    );
    const shell = await Sandbox.create(opts);
    for (let i = 0; i < 10; i++) await shell.commands.run("echo hi");
    await shell.kill();
    await whole();
    const cycleStart = snap();
    const childrenStart = procCpuMs(parts.spawner).children;
    const cycleCounted = await invocations();
    const cycleAsks = asks;
    const floorsCpu: Record<string, number> = {};
    for (let r = 0; r < ROUNDS; r++) {
      if (COUNT) {
        counted = await invocations();
        asksBefore = asks;
      }
      markFrom = monoUs();
      let a = snap();
      const held: Sandbox[] = [];
      for (let i = 0; i < STEPS; i++) held.push(await Sandbox.create(opts));
      // The refills run after the claims (pool work yields to claims): wait for them.
      for (const deadline = Date.now() + 120_000; (await available()) < WARM && Date.now() < deadline; ) await new Promise((r) => setTimeout(r, 1000));
      let b = snap();
      add("create", a, b);
      if (COUNT) await count("create");
      markFrom = monoUs();
      a = snap();
      for (const s of held.slice(0, STEPS)) await s.commands.run("echo hi");
      b = snap();
      add("cmd", a, b);
      if (COUNT) await count("cmd");
      markFrom = monoUs();
      a = snap();
      for (const s of held) await s.kill();
      await whole();
      b = snap();
      add("kill", a, b);
      if (COUNT) await count("kill");
      const floorsFrom = snap();
      floorRounds.push(await floors.round(STEPS));
      const floorsTo = snap();
      for (const k of Object.keys(parts)) floorsCpu[k] = (floorsCpu[k] ?? 0) + floorsTo[k as keyof typeof parts] - floorsFrom[k as keyof typeof parts];
    }
    // The frame floor's session closes before the tail: its close is not a cycle's work.
    await floors.stop();
    floors = undefined;
    await new Promise((r) => setTimeout(r, TAIL_MS));
    const cycleEnd = snap();
    const childrenEnd = procCpuMs(parts.spawner).children;
    if (MARKS) writeFileSync(MARKS, JSON.stringify({ steps: STEPS, marks, parts }));
    if (COUNT) {
      for (const [step, byKind] of Object.entries(calls)) {
        let all = 0;
        for (const [k, n] of Object.entries(byKind)) {
          if (!n) continue;
          all += n;
          figures[`e2e_steps.${step}_edge_invocations.${k.replace(/^\? /, "Worker ").replaceAll(" ", "_")}`] = { value: round(n / STEPS / ROUNDS, 2), unit: "calls" };
        }
        figures[`e2e_steps.${step}_edge_invocations`] = { value: round(all / STEPS / ROUNDS, 2), unit: "calls" };
      }
      // The whole run per create + command + kill, what lands between and after the steps' windows
      // too (a group's alarm, an index check): the status asks, the floors' /health fetches and
      // agent-link frames taken off.
      const ended = await invocations();
      const n = asks - cycleAsks;
      const floors: Record<string, number> = { "? fetch": n + STEPS * ROUNDS, "PoolDO rpc status": n, "ClusterDO websocket": STEPS * ROUNDS };
      let all = 0;
      for (const [k, v] of Object.entries(ended)) {
        const d = v - (cycleCounted[k] ?? 0) - (floors[k] ?? 0);
        if (d <= 0) continue;
        all += d;
        figures[`e2e_steps.cycle_edge_invocations.${k.replace(/^\? /, "Worker ").replaceAll(" ", "_")}`] = { value: round(d / STEPS / ROUNDS, 2), unit: "calls" };
      }
      figures["e2e_steps.cycle_edge_invocations"] = { value: round(all / STEPS / ROUNDS, 2), unit: "calls" };
      return figures;
    }
    for (const [step, byPart] of Object.entries(per)) {
      let server = 0;
      for (const [k, xs] of Object.entries(byPart)) {
        server += median(xs);
        figures[`e2e_steps.${step}_cpu_ms.${k}`] = { value: round(median(xs), 2), unit: "ms", spread: minMax(xs) };
      }
      figures[`e2e_steps.${step}_server_cpu_ms`] = { value: round(server, 2), unit: "ms" };
    }
    let cycle = 0;
    const ours = {} as Record<keyof typeof parts, number>;
    for (const k of Object.keys(parts) as (keyof typeof parts)[]) {
      ours[k] = (cycleEnd[k] - cycleStart[k] - (floorsCpu[k] ?? 0)) / STEPS / ROUNDS;
      cycle += ours[k];
      figures[`e2e_steps.cycle_cpu_ms.${k}`] = { value: round(ours[k], 2), unit: "ms" };
    }
    // Not a server part (not in the sum): what the spawner's children cost, the sandboxes' own
    // processes and the isolation's tools (disk script, userns.pl, umount, rm), reaped ones only,
    // in 10 ms ticks; the floors' spawns (the command floor has a spawner of its own) are not here.
    figures["e2e_steps.cycle_cpu_ms.spawner_children"] = { value: round((childrenEnd - childrenStart) / STEPS / ROUNDS, 2), unit: "ms" };
    Object.assign(figures, unitFloorFigures("e2e_steps", floorRounds));
    const cmdFloorCpu = floorRounds.map((f) => f.cmdServer + f.cmdSpawner);
    const cmdOurs = per.cmd!.agent!.map((a, i) => a + per.cmd!.spawner![i]!);
    figures["e2e_steps.cmd_agent_vs_floor_ratio"] = { value: round(median(cmdOurs) / median(cmdFloorCpu), 2), unit: "ratio", spread: minMax(cmdOurs.map((c, i) => c / cmdFloorCpu[i]!)) };
    // The composed floor of a cycle (bench/server-floor.ts), one at a time: nothing here runs
    // beside another cycle, so no work could be shared and every item counts.
    const cycleFloor = composedFloors(floorRounds, false);
    figures["e2e_steps.cycle_server_floor_cpu_ms"] = { value: round(median(cycleFloor), 2), unit: "ms", spread: minMax(cycleFloor) };
    figures["e2e_steps.cycle_server_vs_floor_ratio"] = { value: round(cycle / median(cycleFloor), 2), unit: "ratio", spread: minMax(cycleFloor.map((f) => cycle / f)) };
    // With the isolation's own-process work (bench/isolation-unit.ts; at bwrap+cgroup only).
    if (hasIsolation(floorRounds)) {
      const withIsolation = composedFloors(floorRounds, false, true);
      figures["e2e_steps.cycle_server_floor_with_isolation_cpu_ms"] = { value: round(median(withIsolation), 2), unit: "ms", spread: minMax(withIsolation) };
      figures["e2e_steps.cycle_server_vs_floor_with_isolation_ratio"] = { value: round(cycle / median(withIsolation), 2), unit: "ratio", spread: minMax(withIsolation.map((f) => cycle / f)) };
      const by = floorByProcess(floorRounds, { concurrent: false, withIsolation: true });
      const gap = gapByProcess(ours, by);
      for (const [k, v] of Object.entries(gap)) figures[`e2e_steps.cycle_server_minus_floor_with_isolation_cpu_ms.${k}`] = { value: round(v, 2), unit: "ms" };
    }
  } finally {
    await floors?.stop();
    await sys.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
  return figures;
}

if (import.meta.main) console.log(JSON.stringify(await run(), null, 2));
