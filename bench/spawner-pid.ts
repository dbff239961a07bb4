// A command's start through the spawner, as the agent makes it for every command it runs in a local
// sandbox, with the two ways of learning its pid in the sandbox, measured interleaved in one run.
// No root needed: enter.pl runs at `process` level (no namespaces, own user), as in
// test/controllers/drivers/local/spawner.test.ts; inside a sandbox its setns and user switch come
// before the exec too.
//   node bench/spawner-pid.ts [rounds] [concurrency]     prints the figures as JSON
// - poll (main before session 14): spawn, then the agent looks for enter.pl's child in /proc every
//   millisecond until it has exec'd the command (the function below is that code, unchanged);
// - report (now): enter.pl writes the pid to a file once its child has exec'd; the agent reads
//   that file every millisecond until it is there (Spawner.spawnPipes, spawner-sandbox-pid.ts).
// Each side's CPU per command: this process (the agent's side: process.cpuUsage, every thread),
// the spawner's main thread (schedstat), and enter.pl's with its command's (the spawner's reaped
// children, in 10 ms ticks: read it over a round of 100); the start's wall time (spawn until the
// pid is known), and the share of starts that reported no sandbox pid (the runtime reported the
// host pid for those before; now the start fails). The command (`echo hi`) is read to its end and
// reaped before the next.
import { existsSync, readFileSync } from "node:fs";
import { availableParallelism, loadavg } from "node:os";
import type { Readable } from "node:stream";
import { PERL, syscallNumbers } from "../controllers/drivers/local/host-helpers.ts";
import { ENTER_SCRIPT } from "../controllers/drivers/local/local-view.ts";
import { Spawner } from "../controllers/drivers/local/spawner.ts";
import { PID_FILE_ENV, PID_FILE_WANTED } from "../controllers/drivers/local/spawner-sandbox-pid.ts";
import { SANDBOX_ENV_FILE, type LaunchedExit } from "../controllers/runtime/process/launcher.ts";
import { median, minMax, procCpuMs, round, schedMs } from "./stats.ts";

const ROUNDS = Number(process.argv[2] ?? 10);
const CONCURRENCY = Number(process.argv[3] ?? 1);
const PER_ROUND = 100;

const { setns, prctl } = syscallNumbers();
const host = (env: Record<string, string>) => ({
  file: PERL,
  args: [ENTER_SCRIPT, SANDBOX_ENV_FILE, "0", String(process.getuid!()), String(process.getgid!()), "/", "-", String(setns), String(prctl), "-", "-", "--", "/bin/echo", "hi"],
  cwd: "/",
  env: { PATH: "/usr/bin:/bin", ...env },
  sandboxEnv: { PATH: "/usr/bin:/bin" },
});
const plain = host({});
const reporting = host({ [PID_FILE_ENV]: PID_FILE_WANTED });

const drained = (s: Readable) => new Promise<void>((ok) => (s.resume(), s.once("close", ok)));
const exitOf = (p: { onExit(fn: (e: LaunchedExit) => void): void }) => new Promise<LaunchedExit>((ok) => p.onExit(ok));

// ---- main's spawner-sandbox-pid.ts sandboxPidOf, as it was (the "poll" side) ----
const CAN_LOOK = existsSync(`/proc/self/task/${process.pid}/children`);
function read(path: string): string | undefined {
  try {
    return readFileSync(path, "utf8");
  } catch {
    return undefined;
  }
}
function innermostPid(pid: number): number | undefined {
  const ns = read(`/proc/${pid}/status`)?.match(/^NSpid:\s*(.*)$/m)?.[1]?.trim().split(/\s+/).at(-1);
  return ns ? Number(ns) : undefined;
}
async function pollProc(hostPid: number, ended: () => boolean): Promise<number | undefined> {
  if (!CAN_LOOK) return undefined;
  const deadline = Date.now() + 2_000;
  const own = read(`/proc/${hostPid}/cmdline`);
  let found: number | undefined;
  for (;;) {
    const child = read(`/proc/${hostPid}/task/${hostPid}/children`)?.trim().split(" ")[0];
    const pid = child ? innermostPid(Number(child)) : undefined;
    if (pid !== undefined) {
      found = pid;
      const line = read(`/proc/${child}/cmdline`);
      if (own === undefined || line === undefined || line !== own) return pid;
    }
    if (ended() || Date.now() > deadline) return found;
    await new Promise((r) => setTimeout(r, 1));
  }
}
// ----

const spawner = new Spawner();
const missed = { poll: 0, report: 0 };

/** One command, main's way: spawn, then poll /proc. */
async function poll(): Promise<number> {
  const t = performance.now();
  const p = await spawner.spawn(plain, { detached: true, stdio: ["ignore", "pipe", "pipe"] });
  let ended = false;
  const exit = exitOf(p).then(() => (ended = true));
  const pid = await pollProc(p.pid, () => ended);
  const wall = performance.now() - t;
  if (pid === undefined) missed.poll++;
  await Promise.all([drained(p.pipes.get(1)!), drained(p.pipes.get(2)!), exit]);
  return wall;
}

/** One command, now: enter.pl reports. */
async function report(): Promise<number> {
  const t = performance.now();
  const p = await spawner.spawnPipes(reporting, false).catch(() => undefined);
  const wall = performance.now() - t;
  if (p?.sandboxPid === undefined) {
    missed.report++;
    return wall;
  }
  await Promise.all([drained(p.stdout), drained(p.stderr), exitOf(p)]);
  return wall;
}

interface Round {
  own: number;
  spawner: number;
  children: number;
  wall: number;
}

async function measure(run: () => Promise<number>): Promise<Round> {
  const spawnerPid = spawner.pid!;
  const c = process.cpuUsage();
  const s = schedMs(spawnerPid);
  const k = procCpuMs(spawnerPid).children;
  const walls: number[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next++ < PER_ROUND) walls.push(await run());
    }),
  );
  const d = process.cpuUsage(c);
  return { own: (d.user + d.system) / 1000 / PER_ROUND, spawner: (schedMs(spawnerPid) - s) / PER_ROUND, children: (procCpuMs(spawnerPid).children - k) / PER_ROUND, wall: median(walls) };
}

// The spawner's channel keeps nothing alive while it is idle (dispose holds it while it ends).
const keepAlive = setInterval(() => {}, 1000);
const loadBefore = loadavg();
// Warm both paths (the spawner's start, the pool, JIT) before anything counts.
await spawner.spawnPipes(reporting, false).then((p) => Promise.all([drained(p.stdout), drained(p.stderr), exitOf(p)]));
for (let i = 0; i < 20; i++) await Promise.all([poll(), report()]);
missed.poll = missed.report = 0;

const sides = { poll: [] as Round[], report: [] as Round[] };
for (let r = 0; r < ROUNDS; r++) {
  // Sides alternate which goes first.
  for (const side of r % 2 === 0 ? (["poll", "report"] as const) : (["report", "poll"] as const)) sides[side].push(await measure(side === "poll" ? poll : report));
}
await spawner.dispose();
clearInterval(keepAlive);

const figure = (xs: number[]) => ({ median: round(median(xs), 3), spread: minMax(xs, 3) });
const total = (m: Round) => m.own + m.spawner + m.children;
const out: Record<string, unknown> = { rounds: ROUNDS, perRound: PER_ROUND, concurrency: CONCURRENCY, cores: availableParallelism(), loadBefore, loadAfter: loadavg() };
for (const side of ["poll", "report"] as const) {
  out[`${side}.agent_cpu_ms_each`] = figure(sides[side].map((m) => m.own));
  out[`${side}.spawner_cpu_ms_each`] = figure(sides[side].map((m) => m.spawner));
  out[`${side}.enter_and_command_cpu_ms_each`] = figure(sides[side].map((m) => m.children));
  out[`${side}.all_cpu_ms_each`] = figure(sides[side].map(total));
  out[`${side}.start_wall_ms_p50`] = figure(sides[side].map((m) => m.wall));
  out[`${side}.no_sandbox_pid_share`] = round(missed[side] / (ROUNDS * PER_ROUND), 3);
}
// Per round, the same round's two sides: the ratio's spread is the rounds'.
out["report_vs_poll.agent_cpu_ratio"] = figure(sides.report.map((m, i) => m.own / sides.poll[i]!.own));
out["report_vs_poll.all_cpu_ratio"] = figure(sides.report.map((m, i) => total(m) / total(sides.poll[i]!)));
console.log(JSON.stringify(out, null, 2));
