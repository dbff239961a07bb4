// Per-sandbox cgroups on the two layouts found on Linux hosts:
// - pure v2 (`/sys/fs/cgroup/cgroup.controllers` exists): one directory holds limits, freeze, kill;
// - hybrid: v1 hierarchies (memory, cpu, pids) hold the limits, and the v2 tree mounted at
//   `/sys/fs/cgroup/unified` holds only the core files (`cgroup.freeze`, `cgroup.kill`).
// Every sandbox cgroup nests under the agent's own cgroup (from /proc/self/cgroup) unless a parent
// is given, so the supervisor that accounts for the agent also accounts for its sandboxes.
import { existsSync, mkdirSync, readFileSync, readdirSync, rmdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";

const ROOT = "/sys/fs/cgroup";
const LIMIT_CONTROLLERS = ["memory", "cpu", "pids"] as const;
type LimitController = (typeof LIMIT_CONTROLLERS)[number];

/** Absolute cgroup directories of one sandbox; persisted in its record so a restarted agent (maybe
 * in another cgroup) finds them again. */
export interface CgroupSet {
  /** v2 directory: freeze and kill (and the limits on a pure v2 host). */
  core: string;
  /** v1 directories by controller (hybrid layout only). */
  v1: Partial<Record<LimitController, string>>;
}

export interface CgroupLayout {
  mode: "v2" | "hybrid";
  /** v2 directory under which sandbox cgroups are created. */
  coreParent: string;
  v1Parents: Partial<Record<LimitController, string>>;
  limits: Record<LimitController, boolean>;
  notes: string[];
}

export interface Limits {
  cpuCount: number;
  memoryMB: number;
  pidsMax: number;
}

function ownPaths(): Map<string, string> {
  const paths = new Map<string, string>();
  for (const line of readFileSync("/proc/self/cgroup", "utf8").split("\n")) {
    const m = /^\d+:([^:]*):(.*)$/.exec(line);
    if (!m) continue;
    const ctrls = m[1] === "" ? [""] : m[1]!.split(",");
    for (const c of ctrls) paths.set(c, m[2]!);
  }
  return paths;
}

function tryWrite(file: string, value: string): string | undefined {
  try {
    writeFileSync(file, value);
    return undefined;
  } catch (e) {
    return (e as Error).message;
  }
}

/** Finds where this process may create sandbox cgroups and which limits work there. Creates the
 * parents, `<own cgroup>/<name>` in each hierarchy or `parentOverride` (a cgroup path such as
 * `/kruise`, the same in every hierarchy); gives a reason instead when no v2 core is usable. */
export function detectCgroups(name: string, parentOverride?: string): { layout?: CgroupLayout; reason?: string } {
  const own = ownPaths();
  const notes: string[] = [];
  const pureV2 = existsSync(join(ROOT, "cgroup.controllers"));
  const v2Root = pureV2 ? ROOT : join(ROOT, "unified");
  if (!existsSync(join(v2Root, "cgroup.procs"))) return { reason: "no cgroup v2 hierarchy mounted" };
  const base = (ctrl: string) => parentOverride ?? join(own.get(ctrl) ?? "/", name);
  const coreParent = join(v2Root, base(""));
  try {
    mkdirSync(coreParent, { recursive: true });
  } catch (e) {
    return { reason: `cannot create ${coreParent}: ${(e as Error).message}` };
  }
  if (!existsSync(join(coreParent, "cgroup.freeze")) || !existsSync(join(coreParent, "cgroup.kill"))) {
    return { reason: "kernel lacks cgroup.freeze/cgroup.kill (needs Linux ≥ 5.14)" };
  }
  const limits: Record<LimitController, boolean> = { memory: false, cpu: false, pids: false };
  const v1Parents: Partial<Record<LimitController, string>> = {};
  if (pureV2) {
    for (const c of LIMIT_CONTROLLERS) {
      // Each ancestor from the hierarchy root down must delegate the controller.
      const err = enableDown(v2Root, coreParent, c);
      limits[c] = err === undefined;
      if (err) notes.push(`${c} limit unavailable: ${err}`);
    }
  } else {
    for (const c of LIMIT_CONTROLLERS) {
      const mount = join(ROOT, c);
      if (!existsSync(join(mount, "cgroup.procs"))) {
        notes.push(`${c} limit unavailable: no v1 ${c} hierarchy`);
        continue;
      }
      const dir = join(mount, base(c));
      try {
        mkdirSync(dir, { recursive: true });
        v1Parents[c] = dir;
        limits[c] = true;
      } catch (e) {
        notes.push(`${c} limit unavailable: ${(e as Error).message}`);
      }
    }
  }
  return { layout: { mode: pureV2 ? "v2" : "hybrid", coreParent, v1Parents, limits, notes } };
}

function enableDown(root: string, leafParent: string, controller: string): string | undefined {
  const rel = leafParent.slice(root.length).split("/").filter(Boolean);
  let dir = root;
  for (const part of rel) {
    const err = tryWrite(join(dir, "cgroup.subtree_control"), `+${controller}`);
    if (err && !readFileSync(join(dir, "cgroup.subtree_control"), "utf8").includes(controller)) {
      return `${dir}: ${err}`;
    }
    dir = join(dir, part);
  }
  return tryWrite(join(dir, "cgroup.subtree_control"), `+${controller}`);
}

export function cgroupSetFor(layout: CgroupLayout, id: string): CgroupSet {
  const v1: CgroupSet["v1"] = {};
  for (const [c, parent] of Object.entries(layout.v1Parents)) v1[c as LimitController] = join(parent, id);
  return { core: join(layout.coreParent, id), v1 };
}

export function allDirs(set: CgroupSet): string[] {
  return [set.core, ...Object.values(set.v1)];
}

/** The cgroup.procs files a process writes its pid into to join the sandbox (before exec). */
export function procsFiles(set: CgroupSet): string[] {
  return allDirs(set).map((d) => join(d, "cgroup.procs"));
}

export function createCgroups(layout: CgroupLayout, set: CgroupSet, limits: Limits): void {
  for (const dir of allDirs(set)) mkdirSync(dir, { recursive: true });
  const memBytes = String(limits.memoryMB * 1024 * 1024);
  const quota = String(Math.max(1000, Math.round(limits.cpuCount * 100_000)));
  if (layout.mode === "v2") {
    if (layout.limits.memory) writeFileSync(join(set.core, "memory.max"), memBytes);
    if (layout.limits.memory) tryWrite(join(set.core, "memory.swap.max"), "0");
    if (layout.limits.cpu) writeFileSync(join(set.core, "cpu.max"), `${quota} 100000`);
    if (layout.limits.pids) writeFileSync(join(set.core, "pids.max"), String(limits.pidsMax));
    return;
  }
  if (set.v1.memory) writeFileSync(join(set.v1.memory, "memory.limit_in_bytes"), memBytes);
  // The period is the kernel's default for a new cgroup (100 ms), which only this writes to.
  if (set.v1.cpu) writeFileSync(join(set.v1.cpu, "cpu.cfs_quota_us"), quota);
  if (set.v1.pids) writeFileSync(join(set.v1.pids, "pids.max"), String(limits.pidsMax));
}

export function cgroupPids(dir: string): number[] {
  try {
    return readFileSync(join(dir, "cgroup.procs"), "utf8").split("\n").filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

export function isFrozen(set: CgroupSet): boolean {
  try {
    return /^frozen 1$/m.test(readFileSync(join(set.core, "cgroup.events"), "utf8"));
  } catch {
    return false;
  }
}

/** Freezes (or thaws) the whole tree and waits until the kernel reports it done. */
export async function setFrozen(set: CgroupSet, frozen: boolean, timeoutMs = 5000): Promise<void> {
  writeFileSync(join(set.core, "cgroup.freeze"), frozen ? "1" : "0");
  const deadline = Date.now() + timeoutMs;
  while (isFrozen(set) !== frozen) {
    if (Date.now() > deadline) throw new Error(`cgroup ${set.core} did not ${frozen ? "freeze" : "thaw"} in ${timeoutMs} ms`);
    await sleep(1);
  }
}

/** SIGKILLs every process of the sandbox (frozen ones too) and removes its cgroups. */
export async function killAndRemove(set: CgroupSet, timeoutMs = 5000): Promise<void> {
  if (existsSync(set.core)) tryWrite(join(set.core, "cgroup.kill"), "1");
  const deadline = Date.now() + timeoutMs;
  for (const dir of allDirs(set)) {
    while (existsSync(dir)) {
      try {
        rmdirSync(dir);
      } catch (e) {
        const code = (e as NodeJS.ErrnoException).code;
        if (code === "ENOENT") break;
        if (code !== "EBUSY" || Date.now() > deadline) throw new Error(`cannot remove cgroup ${dir}: ${(e as Error).message}`);
        if (dir !== set.core) for (const pid of cgroupPids(dir)) tryKill(pid);
        await sleep(2);
      }
    }
  }
}

function tryKill(pid: number): void {
  try {
    process.kill(pid, "SIGKILL");
  } catch {
    // already gone
  }
}

/** Sandbox ids that have a cgroup under the driver's parent (for the inventory). */
export function listCgroupIds(layout: CgroupLayout): string[] {
  try {
    return readdirSync(layout.coreParent, { withFileTypes: true })
      .filter((d) => d.isDirectory())
      .map((d) => d.name);
  } catch {
    return [];
  }
}

/** Removes the driver's parent cgroups when they are empty (used by tests and probes). */
export function removeParents(layout: CgroupLayout): void {
  for (const dir of [layout.coreParent, ...Object.values(layout.v1Parents)]) {
    try {
      rmdirSync(dir);
    } catch {
      // still in use by sandboxes, or already gone
    }
  }
}
