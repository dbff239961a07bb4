// A command's start through the spawner, as the agent makes it for every command it runs in a local
// sandbox, before and after issue 16's cut, measured interleaved in one run. No root needed:
// enter.pl runs at `process` level (no namespaces, own user), as in test/controllers/drivers/local/
// spawner.test.ts; inside a sandbox its setns and user switch come before the exec too, so the
// polls it replaces there are at least as many.
//   node bench/spawner-exec.ts [rounds] [concurrency]     prints the figures as JSON
// - poll (before): spawn, then the agent looks for enter.pl's child in /proc every millisecond until
//   it has exec'd the command (spawner-sandbox-pid.ts sandboxPidOf);
// - signal (after): the spawner hands enter.pl a descriptor it holds close-on-exec and reads the
//   pid once at its end of file, then replies (Spawner.spawnPipes).
// Each side's CPU per command: this process (the agent's side: process.cpuUsage, every thread) and
// the spawner's main thread (schedstat, ns), and the start's wall time (spawn until the pid is
// known), and the share of starts that reported no sandbox pid. The command (`echo hi`) is read to
// its end and reaped before the next.
import { availableParallelism, loadavg } from "node:os";
import type { Readable } from "node:stream";
import { ENTER_SCRIPT, PERL, syscallNumbers } from "../controllers/drivers/local/host-helpers.ts";
import { Spawner } from "../controllers/drivers/local/spawner.ts";
import { sandboxPidOf } from "../controllers/drivers/local/spawner-sandbox-pid.ts";
import { SANDBOX_ENV_FILE, type LaunchedExit } from "../controllers/runtime/process/launcher.ts";
import { median, minMax, round, schedMs } from "./stats.ts";

const ROUNDS = Number(process.argv[2] ?? 10);
const CONCURRENCY = Number(process.argv[3] ?? 1);
const PER_ROUND = 100;

const { setns, prctl } = syscallNumbers();
const host = {
  file: PERL,
  args: [ENTER_SCRIPT, SANDBOX_ENV_FILE, "0", String(process.getuid!()), String(process.getgid!()), "/", "-", String(setns), String(prctl), "-", "--", "/bin/echo", "hi"],
  cwd: "/",
  env: { PATH: "/usr/bin:/bin" },
  sandboxEnv: { PATH: "/usr/bin:/bin" },
};

const drained = (s: Readable) => new Promise<void>((ok) => (s.resume(), s.once("close", ok)));
const exitOf = (p: { onExit(fn: (e: LaunchedExit) => void): void }) => new Promise<LaunchedExit>((ok) => p.onExit(ok));

const spawner = new Spawner();
/** Starts that reported no sandbox pid (the command was gone before the poll saw it exec). */
const missed = { poll: 0, signal: 0 };

/** One command, the old way: what Spawner.spawnPipes did before (spawn, then sandboxPidOf). */
async function poll(): Promise<number> {
  const t = performance.now();
  const p = await spawner.spawn(host, { detached: true, stdio: ["ignore", "pipe", "pipe"] });
  let ended = false;
  const exit = exitOf(p).then(() => (ended = true));
  const pid = await sandboxPidOf(p.pid, () => ended);
  const wall = performance.now() - t;
  if (pid === undefined) missed.poll++;
  await Promise.all([drained(p.pipes.get(1)!), drained(p.pipes.get(2)!), exit]);
  return wall;
}

/** One command, the new way. */
async function signal(): Promise<number> {
  const t = performance.now();
  const p = await spawner.spawnPipes(host, false);
  const wall = performance.now() - t;
  if (p.sandboxPid === undefined) missed.signal++;
  await Promise.all([drained(p.stdout), drained(p.stderr), exitOf(p)]);
  return wall;
}

async function measure(run: () => Promise<number>): Promise<{ own: number; spawner: number; wall: number }> {
  const spawnerPid = spawner.pid!;
  const c = process.cpuUsage();
  const s = schedMs(spawnerPid);
  const walls: number[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next++ < PER_ROUND) walls.push(await run());
    }),
  );
  const d = process.cpuUsage(c);
  return { own: (d.user + d.system) / 1000 / PER_ROUND, spawner: (schedMs(spawnerPid) - s) / PER_ROUND, wall: median(walls) };
}

// The spawner's channel keeps nothing alive while it is idle (its exit on dispose included).
const keepAlive = setInterval(() => {}, 1000);
const loadBefore = loadavg();
// Warm both paths (the spawner's start, the pool, JIT) before anything counts.
await spawner.spawnPipes(host, false).then((p) => Promise.all([drained(p.stdout), drained(p.stderr), exitOf(p)]));
for (let i = 0; i < 20; i++) await Promise.all([poll(), signal()]);
missed.poll = missed.signal = 0;

const sides = { poll: [] as Array<{ own: number; spawner: number; wall: number }>, signal: [] as Array<{ own: number; spawner: number; wall: number }> };
for (let r = 0; r < ROUNDS; r++) {
  // Sides alternate which goes first.
  for (const side of r % 2 === 0 ? (["poll", "signal"] as const) : (["signal", "poll"] as const)) sides[side].push(await measure(side === "poll" ? poll : signal));
}
await spawner.dispose();
clearInterval(keepAlive);

const figure = (xs: number[]) => ({ median: round(median(xs), 3), spread: minMax(xs, 3) });
const out: Record<string, unknown> = { rounds: ROUNDS, perRound: PER_ROUND, concurrency: CONCURRENCY, cores: availableParallelism(), loadBefore, loadAfter: loadavg() };
for (const side of ["poll", "signal"] as const) {
  out[`${side}.agent_cpu_ms_each`] = figure(sides[side].map((m) => m.own));
  out[`${side}.spawner_cpu_ms_each`] = figure(sides[side].map((m) => m.spawner));
  out[`${side}.both_cpu_ms_each`] = figure(sides[side].map((m) => m.own + m.spawner));
  out[`${side}.start_wall_ms_p50`] = figure(sides[side].map((m) => m.wall));
  out[`${side}.no_sandbox_pid_share`] = round(missed[side] / (ROUNDS * PER_ROUND), 3);
}
// Per round, the same round's two sides: the ratio's spread is the rounds'.
out["signal_vs_poll.both_cpu_ratio"] = figure(sides.signal.map((m, i) => (m.own + m.spawner) / (sides.poll[i]!.own + sides.poll[i]!.spawner)));
console.log(JSON.stringify(out, null, 2));
