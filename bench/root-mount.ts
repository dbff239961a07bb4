// A rooted sandbox's root with a user namespace, as the local driver makes it at every start: the
// namespace and the ID-mapped layer (userns.pl), then the overlay on that layer. Two ways to mount
// the overlay, measured interleaved in one run (issue 16 §1, the agent's per-create work):
// - spawn (before session 15): a `mount -t overlay` process through the spawner (runHelper) once
//   userns.pl has answered;
// - helper (now): userns.pl mounts it itself (mount(2)) right after the ID-mapped mounts.
// Each side's CPU per root: this process (the agent's side: process.cpuUsage, every thread), the
// spawner's main thread (schedstat), and its reaped children (userns.pl, its namespace child, the
// mount process; 10 ms ticks, so read over a round). The unmount (one `umount` of the overlay and
// the layer) and the directories' removal are off the clock. Needs root; no sandbox is started.
//   node bench/root-mount.ts [rounds] [per round]     prints the figures as JSON
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { runHelper } from "../controllers/drivers/local/disk.ts";
import { Spawner } from "../controllers/drivers/local/spawner.ts";
import { openUserns, type OverlayMount } from "../controllers/drivers/local/userns.ts";
import { median, minMax, procCpuMs, round, schedMs, spawnerOf } from "./stats.ts";

const ROUNDS = Number(process.argv[2] ?? 8);
const PER_ROUND = Number(process.argv[3] ?? 20);
// The top of the id space, where no lease (uid-range.ts) ever is, as userns.test.ts does.
const RANGE = { base: 3_000_000_000, size: 65536 };

const work = mkdtempSync(join(tmpdir(), "bench-root-mount-"));
const layer = join(work, "layer");
mkdirSync(join(layer, "etc"), { recursive: true });
writeFileSync(join(layer, "etc/os-release"), "ID=bench\n");
const spawner = new Spawner();
spawner.warm();
let n = 0;

/** One sandbox directory as the driver lays it out (root-overlay.ts mountRoot), its root mounted
 * either way; returns the directory, for the unmount. */
async function mountOne(helper: boolean): Promise<string> {
  const dir = join(work, `s${n++}`);
  for (const d of ["layers", "upper", "work", "root"]) mkdirSync(join(dir, d), { recursive: true });
  const overlay: OverlayMount = { dir, options: "lowerdir=layers/0,upperdir=upper,workdir=work", merged: join(dir, "root") };
  const ns = await openUserns(spawner, RANGE, [{ source: layer, target: join(dir, "layers/0") }], join(work, "log"), helper ? overlay : undefined);
  if (!helper) await runHelper(spawner, ["mount", "-t", "overlay", "overlay", "-o", overlay.options, overlay.merged], dir);
  await ns.end();
  return dir;
}

async function unmount(dir: string): Promise<void> {
  await runHelper(spawner, ["umount", join(dir, "root"), join(dir, "layers/0")]);
  rmSync(dir, { recursive: true, force: true });
}

const sides = ["spawn", "helper"] as const;
const cpu: Record<(typeof sides)[number], { agent: number[]; spawner: number[]; children: number[]; all: number[] }> = {
  spawn: { agent: [], spawner: [], children: [], all: [] },
  helper: { agent: [], spawner: [], children: [], all: [] },
};
const loadBefore = loadavg()[0]!;
try {
  // The spawner's start and its first helpers are no side's.
  await unmount(await mountOne(true));
  await unmount(await mountOne(false));
  const sp = spawnerOf(process.pid)!;
  const agentMs = () => {
    const u = process.cpuUsage();
    return (u.user + u.system) / 1000;
  };
  for (let r = 0; r < ROUNDS; r++) {
    // Sides alternate which goes first.
    for (const side of r % 2 ? [...sides].reverse() : sides) {
      const dirs: string[] = [];
      const [a0, s0, c0] = [agentMs(), schedMs(sp), procCpuMs(sp).children];
      for (let i = 0; i < PER_ROUND; i++) dirs.push(await mountOne(side === "helper"));
      const [a, s, c] = [(agentMs() - a0) / PER_ROUND, (schedMs(sp) - s0) / PER_ROUND, (procCpuMs(sp).children - c0) / PER_ROUND];
      cpu[side].agent.push(a);
      cpu[side].spawner.push(s);
      cpu[side].children.push(c);
      cpu[side].all.push(a + s + c);
      for (const d of dirs) await unmount(d);
    }
  }
} finally {
  for (const name of readFileSync("/proc/self/mountinfo", "utf8").split("\n").map((l) => l.split(" ")[4]).filter((p) => p?.startsWith(`${work}/`))) {
    await runHelper(spawner, ["umount", "-l", name!]).catch(() => {});
  }
  rmSync(work, { recursive: true, force: true });
  void spawner.dispose();
}
const out: Record<string, { value: number; unit: string; spread?: [number, number] }> = {};
for (const side of sides) {
  for (const [k, v] of Object.entries(cpu[side])) out[`root_mount.${side}.${k}_cpu_ms_each`] = { value: round(median(v), 3), unit: "ms", spread: minMax(v, 3) };
}
const ratio = (k: "agent" | "spawner" | "children" | "all") => cpu.helper[k].map((h, i) => h / cpu.spawn[k][i]!);
for (const k of ["agent", "spawner", "all"] as const) out[`root_mount.helper_vs_spawn_${k}_ratio`] = { value: round(median(ratio(k)), 3), unit: "ratio", spread: minMax(ratio(k), 3) };
console.log(JSON.stringify({ load: [loadBefore, loadavg()[0]], rounds: ROUNDS, perRound: PER_ROUND, figures: out }, null, 1));
