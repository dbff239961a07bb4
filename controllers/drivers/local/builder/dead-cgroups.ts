// What a direct build killed with SIGKILL (builder/direct-build.ts: `npm start`'s, `.ci/run`'s or
// a test setup's process) leaves in the cgroup hierarchies: `kruise-builds-direct-<pid>` with its
// step's cgroup, maybe still holding the step's processes. The next direct build removes those of
// dead pids (their processes killed first); live builders' stay. Where the kernel put the dead
// process decides where its v1 directories are (the memory controller's follows the caller's own
// cgroup), so every hierarchy is searched a few levels down.
import { existsSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { killAndRemove } from "../cgroups.ts";

const ROOT = "/sys/fs/cgroup";
const NAME = /^kruise-builds-direct-(\d+)$/;
const DEPTH = 3;

/** The `kruise-builds-direct-<pid>` directories of dead pids, under every hierarchy. */
export function deadDirectBuildCgroups(root = ROOT): string[] {
  const found: string[] = [];
  const walk = (dir: string, depth: number) => {
    let entries;
    try {
      entries = readdirSync(dir, { withFileTypes: true });
    } catch {
      return;
    }
    for (const e of entries) {
      if (!e.isDirectory()) continue;
      const m = NAME.exec(e.name);
      if (m) {
        if (!existsSync(`/proc/${m[1]}`)) found.push(join(dir, e.name));
      } else if (depth < DEPTH && !e.name.startsWith("kruise-")) walk(join(dir, e.name), depth + 1);
    }
  };
  walk(root, 0);
  return found;
}

/** Kills what is left in the dead builders' cgroups and removes them; returns the directories. */
export async function removeDeadDirectBuildCgroups(root = ROOT): Promise<string[]> {
  const dirs = deadDirectBuildCgroups(root);
  // A v1 controller's directory (cpu, memory, pids under the hybrid layout) has no cgroup.kill:
  // its processes are killed one by one; the v2 ones (first) end them all with cgroup.kill.
  const v1 = (dir: string) => /^\/sys\/fs\/cgroup\/(memory|cpu|pids|cpu,cpuacct)\//.test(dir);
  const asSet = (dir: string) => (v1(dir) ? { core: join(dir, "no-core"), v1: { pids: dir } } : { core: dir, v1: {} });
  for (const dir of [...dirs.filter((d) => !v1(d)), ...dirs.filter(v1)]) {
    for (const step of readdirSync(dir, { withFileTypes: true }).filter((e) => e.isDirectory())) await killAndRemove(asSet(join(dir, step.name)));
    await killAndRemove(asSet(dir));
  }
  return dirs;
}
