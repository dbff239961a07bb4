// A host helper run to its end through the spawner (disk.ts runHelper: mount, umount, the disk's
// mkfs script; three or four per sandbox made and destroyed), before and after issue 16's cut,
// measured interleaved in one run. No root needed: the helper is `/bin/sh -c 'exit 0'`.
//   node bench/spawner-helper.ts [rounds] [concurrency]     prints the figures as JSON
// - pipe (before): its stderr is a pipe, one of the spawner's pooled connections (the agent
//   connects a new one to refill the pool, the spawner accepts it);
// - file (after): its stderr is a file in the spawner's private directory, read only on failure.
// Each side's CPU per helper: this process (the agent's side: process.cpuUsage, every thread) and
// the spawner's main thread (schedstat, ns).
import { availableParallelism, loadavg } from "node:os";
import { runHelper } from "../controllers/drivers/local/disk.ts";
import { Spawner } from "../controllers/drivers/local/spawner.ts";
import type { LaunchedExit } from "../controllers/runtime/process/launcher.ts";
import { median, minMax, round, schedMs } from "./stats.ts";

const ROUNDS = Number(process.argv[2] ?? 10);
const CONCURRENCY = Number(process.argv[3] ?? 1);
const PER_ROUND = 100;
const ARGS = ["/bin/sh", "-c", "exit 0"];
const spawner = new Spawner();

/** What runHelper did before: stderr through a pipe, collected as it came. */
async function pipe(): Promise<void> {
  const child = await spawner.spawn({ file: ARGS[0]!, args: ARGS.slice(1), cwd: "/", env: { PATH: "/usr/bin:/bin" } }, { detached: false, stdio: ["ignore", "ignore", "pipe"] });
  const err = child.pipes.get(2)!;
  let text = "";
  err.on("data", (c) => (text += String(c).slice(0, 2000)));
  err.on("error", () => {});
  const exit = await new Promise<LaunchedExit>((ok) => child.onExit(ok));
  if (exit.error || exit.code !== 0) throw new Error(text);
}

const file = () => runHelper(spawner, ARGS);

async function measure(run: () => Promise<void>): Promise<{ own: number; spawner: number }> {
  const spawnerPid = spawner.pid!;
  const c = process.cpuUsage();
  const s = schedMs(spawnerPid);
  let next = 0;
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next++ < PER_ROUND) await run();
    }),
  );
  const d = process.cpuUsage(c);
  return { own: (d.user + d.system) / 1000 / PER_ROUND, spawner: (schedMs(spawnerPid) - s) / PER_ROUND };
}

// The spawner's channel keeps nothing alive while it is idle (dispose holds it while it ends).
const keepAlive = setInterval(() => {}, 1000);
const loadBefore = loadavg();
for (let i = 0; i < 20; i++) await Promise.all([pipe(), file()]);
const sides = { pipe: [] as Array<{ own: number; spawner: number }>, file: [] as Array<{ own: number; spawner: number }> };
for (let r = 0; r < ROUNDS; r++) {
  for (const side of r % 2 === 0 ? (["pipe", "file"] as const) : (["file", "pipe"] as const)) sides[side].push(await measure(side === "pipe" ? pipe : file));
}
await spawner.dispose();
clearInterval(keepAlive);

const figure = (xs: number[]) => ({ median: round(median(xs), 3), spread: minMax(xs, 3) });
const out: Record<string, unknown> = { rounds: ROUNDS, perRound: PER_ROUND, concurrency: CONCURRENCY, cores: availableParallelism(), loadBefore, loadAfter: loadavg() };
for (const side of ["pipe", "file"] as const) {
  out[`${side}.agent_cpu_ms_each`] = figure(sides[side].map((m) => m.own));
  out[`${side}.spawner_cpu_ms_each`] = figure(sides[side].map((m) => m.spawner));
  out[`${side}.both_cpu_ms_each`] = figure(sides[side].map((m) => m.own + m.spawner));
}
out["file_vs_pipe.both_cpu_ratio"] = figure(sides.file.map((m, i) => (m.own + m.spawner) / (sides.pipe[i]!.own + sides.pipe[i]!.spawner)));
console.log(JSON.stringify(out, null, 2));
