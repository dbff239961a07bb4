// Small statistics and measurement helpers shared by the benchmark suites.
import { execFileSync } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";

/** A seeded uniform generator on [0, 1) (mulberry32): the same seed, the same sequence, so a
 * bench's shuffled orders can be repeated. */
export function seededRandom(seed: number): () => number {
  let t = seed >>> 0;
  return () => {
    t = (t + 0x6d2b79f5) >>> 0;
    let x = Math.imul(t ^ (t >>> 15), t | 1);
    x ^= x + Math.imul(x ^ (x >>> 7), x | 61);
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296;
  };
}

/** `xs` shuffled in place (Fisher-Yates) by `rand`; answers `xs`. */
export function shuffle<T>(xs: T[], rand: () => number): T[] {
  for (let i = xs.length - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    [xs[i], xs[j]] = [xs[j]!, xs[i]!];
  }
  return xs;
}

/** The p-th percentile (nearest rank) of `xs`. */
export function percentile(xs: number[], p: number): number {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))]!;
}

export const median = (xs: number[]) => percentile(xs, 50);

/**
 * A 95 % interval of the median of a run's values (one list per round): the 2.5th and 97.5th
 * percentiles of the medians of 2,000 resamples of its rounds (a round's values stay together).
 */
export function medianInterval(perRound: number[][], rand: () => number): [number, number] {
  const meds = Array.from({ length: 2000 }, () => median(perRound.flatMap(() => perRound[Math.floor(rand() * perRound.length)]!)));
  return [percentile(meds, 2.5), percentile(meds, 97.5)];
}

export const round = (x: number, digits = 2) => Number(x.toFixed(digits));

/** A figure's spread: the smallest and largest of `xs`, rounded. */
export const minMax = (xs: number[], digits = 2): [number, number] => [round(Math.min(...xs), digits), round(Math.max(...xs), digits)];

/** A /proc/<pid>/status memory field in KB (VmRSS, VmHWM, RssAnon, ...); 0 when the process is gone. */
export function statusKB(pid: number, field = "VmRSS"): number {
  try {
    return Number(new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1] ?? 0);
  } catch {
    return 0;
  }
}

/** Proportional set size of a process in KB (shared pages split among their users); 0 when gone. */
export function pssKB(pid: number): number {
  try {
    return Number(/^Pss:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/smaps_rollup`, "utf8"))?.[1] ?? 0);
  } catch {
    return 0;
  }
}

/** Runs `task` `total` times with at most `concurrency` in flight; returns each duration in ms. */
export async function timedConcurrently(total: number, concurrency: number, task: (i: number) => Promise<unknown>): Promise<number[]> {
  const durations: number[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < total) {
        const i = next++;
        const t = performance.now();
        await task(i);
        durations.push(performance.now() - t);
      }
    }),
  );
  return durations;
}

/** CPU time (user + system) the process has used, in ms (Linux: /proc, 100 ticks a second). */
export function cpuMs(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

/** A process's own CPU in ms at nanosecond resolution (schedstat: time on a CPU; 0 when gone). */
export function schedMs(pid: number | undefined): number {
  try {
    return Number(readFileSync(`/proc/${pid}/schedstat`, "utf8").split(" ")[0]) / 1e6;
  } catch {
    return 0;
  }
}

/** CPU time of one process and of its reaped children, in ms (0 when there is no such process). */
export function procCpuMs(pid: number | undefined): { own: number; children: number } {
  try {
    const f = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ").map(Number);
    // Fields 14-17 of stat (utime stime cutime cstime), counted from the state field (3).
    return { own: (f[11]! + f[12]!) * 10, children: (f[13]! + f[14]!) * 10 };
  } catch {
    return { own: 0, children: 0 };
  }
}

/** The spawner process of `parentPid` (an agent, or a process running a LocalDriver), if it has one. */
export function spawnerOf(parentPid: number): number | undefined {
  try {
    return Number(execFileSync("pgrep", ["-P", String(parentPid), "-f", "spawner-main"], { encoding: "utf8" }).trim().split("\n")[0]) || undefined;
  } catch {
    return undefined;
  }
}

/** The pids of `root` and its descendants, as they are now. */
export function processTree(root: number): number[] {
  const children = new Map<number, number[]>();
  for (const d of readdirSync("/proc")) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = readFileSync(`/proc/${d}/stat`, "utf8");
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      children.set(ppid, [...(children.get(ppid) ?? []), Number(d)]);
    } catch {}
  }
  const out: number[] = [];
  for (let todo = [root]; todo.length; ) {
    const pid = todo.pop()!;
    out.push(pid);
    todo.push(...(children.get(pid) ?? []));
  }
  return out;
}

/** CPU time of every thread of a process so far, in ms (schedstat: ns, not 10 ms ticks; a
 * process's own schedstat counts its main thread only). 0 when it is gone; a thread that ends
 * meanwhile counts 0. */
export function threadsCpuMs(pid: number): number {
  let ns = 0;
  let tasks: string[];
  try {
    tasks = readdirSync(`/proc/${pid}/task`);
  } catch {
    return 0;
  }
  for (const t of tasks) {
    try {
      ns += Number(readFileSync(`/proc/${pid}/task/${t}/schedstat`, "utf8").split(" ")[0]);
    } catch {}
  }
  return ns / 1e6;
}
