// The agent's CPU per command against its floor, interleaved in one run (issue 16 §1): only
// commands, many in one warm sandbox, so sub-millisecond changes in the agent's command path
// resolve (bench/e2e-steps.ts's cmd step runs 30 first commands in 30 new sandboxes between
// creates and kills, which does not).
//   agent_cmd.agent_cpu_ms      the agent's CPU (all threads) per `commands.run('echo hi')` of the
//                               SDK through the edge's gateway, one at a time, in one sandbox
//                               that already ran commands (.spawner: its spawner's)
//   agent_cmd.floor_cpu_ms      the same command's floor (bench/agent-cmd-floor.ts: a bare
//                               node:http server taking the same envelope, starting the same
//                               command through the same launcher at the same level), its own
//                               CPU per request (.spawner: its spawner's)
//   agent_cmd.agent_over_floor_ms  agent_cpu_ms - floor_cpu_ms, per round: what the agent does
//                               per command that the floor does not
//   agent_cmd.agent_vs_floor_ratio (agent + spawner) over (floor + its spawner), per round
//   agent_cmd.wall_ms, .floor_wall_ms  median time per command as the client sees it
// ROUNDS rounds of N commands on each side, the sides alternating (ABBA: which goes first
// alternates by round); the median of the rounds, with their spread. The edge, sqld and the SDK
// client are not counted: they are the same work whatever the agent does.
//   AGENT_CMD_LEVEL   isolation level (default bwrap+cgroup, what `npm start` gets here)
//   AGENT_CMD_N, AGENT_CMD_ROUNDS  commands per round (200), rounds (6)
//   AGENT_CMD_MARKS=<file>  each round's windows (CLOCK_MONOTONIC µs) and the pids, in
//     bench/agent-profile.ts's format (step `cmd`: the agent's rounds, `floor`: the floor's), to
//     cut `SBX_AGENT_NODE_ARGS="--cpu-prof --cpu-prof-dir=D"` profiles by side
//   node bench/agent-cmd.ts   prints the figures as JSON
import { Sandbox } from "e2b";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startSystem } from "../scripts/lib/system.ts";
import { CmdFloor } from "./agent-cmd-floor.ts";
import type { Figures } from "./run.ts";
import { median, minMax, round, spawnerOf, threadsCpuMs } from "./stats.ts";

const LEVEL = (process.env.AGENT_CMD_LEVEL ?? "bwrap+cgroup") as "process" | "bwrap" | "bwrap+cgroup";
const N = Number(process.env.AGENT_CMD_N ?? 200);
const ROUNDS = Number(process.env.AGENT_CMD_ROUNDS ?? 6);
const MARKS = process.env.AGENT_CMD_MARKS;
/** Commands on each side before the first round: the JIT's warm-up and the connection pools. */
const WARMUP = 50;
const monoUs = () => Number(process.hrtime.bigint() / 1000n);

export async function run(): Promise<Figures> {
  if (!["process", "bwrap", "bwrap+cgroup"].includes(LEVEL)) throw new Error(`AGENT_CMD_LEVEL: ${LEVEL}?`);
  const dataDir = mkdtempSync(join(tmpdir(), "sbx-bench-agent-cmd-"));
  const sys = await startSystem({ dataDir, baseReplicas: 1, level: LEVEL, agentStopMs: 60_000 });
  let floor: CmdFloor | undefined;
  let sbx: Sandbox | undefined;
  try {
    floor = await CmdFloor.start(join(dataDir, "cmd-floor"), LEVEL);
    sbx = await Sandbox.create({ apiKey: sys.apiKey, apiUrl: sys.apiUrl, sandboxUrl: sys.apiUrl });
    const s = sbx;
    const command = async () => {
      const r = await s.commands.run("echo hi");
      if (r.stdout !== "hi\n" || r.exitCode !== 0) throw new Error(`echo hi answered ${JSON.stringify(r)}`);
    };
    for (let i = 0; i < WARMUP; i++) await command();
    for (let i = 0; i < WARMUP; i++) await floor.request();
    const agent = sys.agent.pid!;
    const spawner = spawnerOf(agent)!;
    const f = floor;
    const rounds: { agent: number; spawner: number; floor: number; floorSpawner: number; wall: number; floorWall: number }[] = [];
    const marks: { step: string; from: number; to: number }[] = [];
    const timed = async (fn: () => Promise<void>) => {
      const walls: number[] = [];
      for (let i = 0; i < N; i++) {
        const t = performance.now();
        await fn();
        walls.push(performance.now() - t);
      }
      return median(walls);
    };
    for (let r = 0; r < ROUNDS; r++) {
      const ours = async () => {
        const from = monoUs();
        const [a, p] = [threadsCpuMs(agent), threadsCpuMs(spawner)];
        const wall = await timed(command);
        const out = { agent: (threadsCpuMs(agent) - a) / N, spawner: (threadsCpuMs(spawner) - p) / N, wall };
        marks.push({ step: "cmd", from, to: monoUs() });
        return out;
      };
      const floors = async () => {
        const from = monoUs();
        const server = f.pid;
        const fs = spawnerOf(server)!;
        const [a, p] = [threadsCpuMs(server), threadsCpuMs(fs)];
        const wall = await timed(() => f.request());
        const out = { floor: (threadsCpuMs(server) - a) / N, floorSpawner: (threadsCpuMs(fs) - p) / N, floorWall: wall };
        marks.push({ step: "floor", from, to: monoUs() });
        return out;
      };
      // ABBA: the side that goes first alternates, so a drift over the run lands on both.
      if (r % 2 === 0) rounds.push({ ...(await ours()), ...(await floors()) });
      else {
        const fl = await floors();
        rounds.push({ ...(await ours()), ...fl });
      }
    }
    for (const r of rounds) console.error(`agent-cmd round: ${Object.entries(r).map(([k, v]) => `${k} ${v.toFixed(3)}`).join(", ")}`);
    if (MARKS) writeFileSync(MARKS, JSON.stringify({ steps: N, marks, parts: { agent, spawner, floor: f.pid } }));
    const fig = (xs: number[], unit = "ms") => ({ value: round(median(xs), 3), unit, spread: minMax(xs, 3) });
    return {
      "agent_cmd.agent_cpu_ms": fig(rounds.map((r) => r.agent)),
      "agent_cmd.agent_cpu_ms.spawner": fig(rounds.map((r) => r.spawner)),
      "agent_cmd.floor_cpu_ms": fig(rounds.map((r) => r.floor)),
      "agent_cmd.floor_cpu_ms.spawner": fig(rounds.map((r) => r.floorSpawner)),
      "agent_cmd.agent_over_floor_ms": fig(rounds.map((r) => r.agent - r.floor)),
      "agent_cmd.agent_vs_floor_ratio": fig(rounds.map((r) => (r.agent + r.spawner) / (r.floor + r.floorSpawner)), "ratio"),
      "agent_cmd.wall_ms": fig(rounds.map((r) => r.wall)),
      "agent_cmd.floor_wall_ms": fig(rounds.map((r) => r.floorWall)),
    };
  } finally {
    await sbx?.kill().catch(() => {});
    await floor?.stop();
    await sys.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

if (import.meta.main) console.log(JSON.stringify(await run(), null, 2));
