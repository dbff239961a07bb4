// A destroy's unmount and deletion of a sandbox's directory with a disk, two ways, interleaved in one
// run (needs root: it mounts): the total CPU of each, the spawner's, its children's and the
// agent's, so moving work from the spawner into a helper cannot pass for a gain.
//   node bench/destroy-helpers.ts [rounds]   prints the figures as JSON
// Sides, in a new random order each round, PER_ROUND destroys each, one at a time, of directories
// shaped like a sandbox's (a record, an image file, a mounted `disk/` holding a few files):
// - two: root-overlay.ts unmountSandbox (a `umount` process), then remove-tree.ts removeTree (an
//   `rm` process): the two spawns a destroy made before unmountAndRemoveSandbox;
// - one: root-overlay.ts unmountAndRemoveSandbox: one perl helper (umount2, then exec rm).
// The disk is a tmpfs: each side's unmount is the same syscall, so what differs is the processes.
// Figures per destroy: the spawner's threads (schedstat, ns), its reaped children (/proc stat
// cutime + cstime: 10 ms ticks, over a round), this process (the agent's side); and their sum.
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { Spawner } from "../controllers/drivers/local/spawner.ts";
import { removeTree } from "../controllers/drivers/local/remove-tree.ts";
import { unmountAndRemoveSandbox, unmountSandbox } from "../controllers/drivers/local/root-overlay.ts";
import type { Figures } from "./run.ts";
import { median, minMax, procCpuMs, round, seededRandom, shuffle, threadsCpuMs } from "./stats.ts";

const PER_ROUND = 50;

export async function run(_ctx?: unknown, rounds = 7): Promise<Figures> {
  if (process.getuid?.() !== 0) throw new Error("destroy-helpers: needs root (it mounts)");
  const top = mkdtempSync(join(tmpdir(), "sbx-bench-destroy-helpers-"));
  const spawner = new Spawner();
  let n = 0;
  /** A sandbox-shaped directory, its disk mounted (set up by this process, outside the figures). */
  const make = (): string => {
    const dir = join(top, `s${n++}`);
    mkdirSync(join(dir, "disk"), { recursive: true });
    mkdirSync(join(dir, "root"));
    writeFileSync(join(dir, "record.json"), "{}");
    writeFileSync(join(dir, "disk.img"), "");
    execFileSync("mount", ["-t", "tmpfs", "-o", "size=1m", "tmpfs", join(dir, "disk")]);
    for (const f of ["a", "b", "c"]) writeFileSync(join(dir, "disk", f), "x");
    return dir;
  };
  const ways = {
    two: async (dir: string) => {
      await unmountSandbox(spawner, join(dir, "root"), join(dir, "disk"));
      await removeTree([dir], spawner);
    },
    one: async (dir: string) => {
      if (!(await unmountAndRemoveSandbox(spawner, join(dir, "root"), join(dir, "disk"), dir)).removed) throw new Error(`${dir}: not removed`);
    },
  };
  const agentMs = () => {
    const u = process.cpuUsage();
    return (u.user + u.system) / 1000;
  };
  const per: Record<string, { spawner: number[]; children: number[]; agent: number[]; total: number[] }> = {};
  try {
    // Warm: the spawner starts, both ways run once.
    for (const way of Object.values(ways)) for (let i = 0; i < 5; i++) await way(make());
    const sp = spawner.pid!;
    const rand = seededRandom(34);
    for (let r = 0; r < rounds; r++) {
      for (const side of shuffle(Object.keys(ways) as (keyof typeof ways)[], rand)) {
        const dirs = Array.from({ length: PER_ROUND }, make);
        const [s, c, a] = [threadsCpuMs(sp), procCpuMs(sp).children, agentMs()];
        for (const dir of dirs) await ways[side](dir);
        const d = { spawner: (threadsCpuMs(sp) - s) / PER_ROUND, children: (procCpuMs(sp).children - c) / PER_ROUND, agent: (agentMs() - a) / PER_ROUND };
        const p = (per[side] ??= { spawner: [], children: [], agent: [], total: [] });
        p.spawner.push(d.spawner);
        p.children.push(d.children);
        p.agent.push(d.agent);
        p.total.push(d.spawner + d.children + d.agent);
      }
    }
  } finally {
    await spawner.dispose();
    for (const line of execFileSync("findmnt", ["-rn", "-o", "TARGET"], { encoding: "utf8" }).split("\n")) if (line.startsWith(top)) execFileSync("umount", ["-l", line]);
    rmSync(top, { recursive: true, force: true });
  }
  const figures: Figures = {};
  for (const [side, p] of Object.entries(per)) {
    for (const [k, xs] of Object.entries(p)) figures[`destroy_helpers.${side}.${k}_cpu_ms_each`] = { value: round(median(xs), 3), unit: "ms", spread: minMax(xs, 3) };
  }
  const ratios = per.one!.total.map((t, i) => t / per.two!.total[i]!);
  figures["destroy_helpers.one_vs_two_total_ratio"] = { value: round(median(ratios)), unit: "x", spread: minMax(ratios) };
  figures["destroy_helpers.load_1min"] = { value: round(loadavg()[0]!), unit: "" };
  return figures;
}

if (import.meta.main) console.log(JSON.stringify(await run(undefined, Number(process.argv[2] ?? 7)), null, 2));
