// The SandboxView of one local sandbox: what the shared agent-runtime uses to reach its files and
// start its processes.
//
// Paths: the writable layer maps to its host directories. Read-only parts map through
// `/proc/<holder>/root/...` when the sandbox has its own mount namespace, so a write there fails
// with EROFS exactly as it would inside, instead of landing in the host's /usr or /etc.
//
// Processes: `enter.pl` (perl-base is on every Debian-like host and starts in ~3 ms) joins the
// sandbox's cgroups, setns()es into the holder's namespaces and root, switches user and execs.
// It stays as the host-side parent so exit status and signals keep meaning what they should
// (see enter.pl); the pid the runtime reports is its child's, as the sandbox sees it
// (enter.pl reports it: spawner-sandbox-pid.ts), so `kill <pid>` inside the sandbox reaches the
// same process.
// enter.pl runs as root on the host until its last privilege drop, so its own environment is
// fixed (host-helpers.ts) and the command's travels apart, as `sandboxEnv` (launcher.ts).
import { closeSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { SANDBOX_ENV_FILE, type ProcessLauncher } from "../../runtime/process/launcher.ts";
import type { HostCommand, PinOptions, SandboxUsage, SandboxUser, SandboxView, SpawnRequest } from "../../runtime/sandbox-view.ts";
import { pinResolved, type PinnedPath } from "../../runtime/pinned-path.ts";
import { statfsSync } from "node:fs";
import { SandboxNotFoundError } from "../driver.ts";
import { helperEnv, PERL, syscallNumbers } from "./host-helpers.ts";
import { USERS, type Mount } from "./layout.ts";
import { resolveSandboxPath, sandboxPathOf, type Resolved } from "./path-resolver.ts";
import { SANDBOX_CAPS } from "./userns.ts";
import { handleIs, openProc } from "./proc-handle.ts";
import { PID_FILE_ENV, PID_FILE_WANTED } from "./spawner-sandbox-pid.ts";
import { IDENTITY, idToHost, idToSandbox, type IdMapping } from "./id-map.ts";
import type { ProcRef } from "./records.ts";

/** What a user namespace shows for an id it does not map (/proc/sys/kernel/overflowuid). */
const OVERFLOW_ID = 65534;
import { cachedFile, parseGroup, parsePasswd } from "../../runtime/passwd.ts";

const NAME_RECHECK_MS = 1_000;

export const ENTER_SCRIPT = fileURLToPath(new URL("./enter.pl", import.meta.url));
/** Environment variable carried by every process of a sandbox; how sandboxes without a cgroup
 * find their processes (a process that clears its environment escapes that search). */
export const MARKER_ENV = "KRUISE_SANDBOX_ID";

/** Where the sandbox's processes live right now (the holder changes when a sandbox restarts). */
export interface ViewTarget {
  /** The host process whose namespaces and root the sandbox's processes join (its pid 1), by pid
   * and start time, so that enter.pl refuses a process that has its pid only since it ended;
   * undefined at `process` level. */
  nsInit?: ProcRef;
  /** cgroup.procs files to join before exec. */
  cgroupProcs: string[];
  /** Environment every process gets beneath its own (the egress proxy's HTTP_PROXY and kin). */
  env?: Record<string, string>;
  /** The capabilities root inside may hold (its bounding set under a user namespace). Default
   * SANDBOX_CAPS. */
  caps?: readonly number[];
  /** The sandbox's seccomp program file (seccomp.ts), which every command loads before exec;
   * undefined: none (process level, or turned off). */
  seccomp?: string;
}

export interface LocalViewOptions {
  id: string;
  mounts: Mount[];
  /** False at `process` level: no namespaces, the sandbox sees host paths. */
  namespaces: boolean;
  /** The current target, or undefined while the sandbox has no processes (Stop-paused). Asked on
   * every call, so a view handed to the runtime stays valid across restarts of the sandbox. */
  target: () => ViewTarget | undefined;
  /** Who forks the sandbox's processes (the driver's spawner); absent: the runtime itself. */
  launcher?: ProcessLauncher;
  /** How the sandbox's ids map to the host's (id-map.ts; its user namespace's range, or the
   * identity without one). */
  ids?: () => IdMapping;
}

export class LocalSandboxView implements SandboxView {
  readonly #o: LocalViewOptions;
  readonly launcher: ProcessLauncher | undefined;

  constructor(opts: LocalViewOptions) {
    this.#o = opts;
    this.launcher = opts.launcher;
  }

  #current(): ViewTarget {
    const t = this.#o.target();
    if (!t) throw new SandboxNotFoundError(this.#o.id, "not running");
    return t;
  }

  /** Where a resolved path lives: a trusted start (a mount's host directory, or the holder's
   * root for what the table does not cover or keeps read-only) and the rest below it. `root`
   * names that root (pin: through a checked handle); default `/proc/<pid 1>/root` by pid. */
  #locate(sandboxPath: string, followFinal: boolean, root = this.#rootByPid()): { start: string; rest: string; sandboxPath: string } {
    const r = resolveSandboxPath(this.#o.mounts, sandboxPath, followFinal, root);
    if (r.mount.writable || !root) return inMount(r);
    return { start: root(), rest: r.sandboxPath, sandboxPath: r.sandboxPath };
  }

  /** pid 1's root by its pid (toHost's strings only; pin goes through a checked handle). */
  #rootByPid(): (() => string) | undefined {
    return this.#o.namespaces ? () => `/proc/${this.#current().nsInit?.pid}/root` : undefined;
  }

  toHost(sandboxPath: string, opts?: { followFinal?: boolean }): string {
    const l = this.#locate(sandboxPath, opts?.followFinal ?? true);
    return `${l.start}${l.rest}`;
  }

  /** The runtime is the host's root here: every file operation goes through this (see
   * pinned-path.ts for why a host path string is not enough). */
  pin(sandboxPath: string, opts?: PinOptions): PinnedPath {
    // The sandbox's `/` is pid 1's root, reached through one handle on its /proc directory
    // checked for the recorded start before anything under it is looked at (proc-handle.ts):
    // by pid, once pid 1 ended and a host process got its pid, the resolution's lstat/readlink
    // and the walk would run in the host's `/` (an answer, even an ENOENT, about a host path).
    let handle: { fd: number; ref: ProcRef } | undefined;
    const root = this.#o.namespaces
      ? () => {
          if (!handle) {
            const ref = this.#current().nsInit;
            const fd = ref && openProc(ref);
            if (!ref || fd === undefined) throw new SandboxNotFoundError(this.#o.id, "not running");
            handle = { fd, ref };
          }
          return `/proc/self/fd/${handle.fd}/root`;
        }
      : undefined;
    try {
      const p = pinResolved(sandboxPath, () => this.#locate(sandboxPath, opts?.followFinal ?? true, root), opts?.create ?? false);
      try {
        p.kernelFile = kernelFileRefused(p);
      } catch (err) {
        p.close();
        throw err;
      }
      return p;
    } catch (err) {
      // Every lookup under a handle whose process has ended fails: the sandbox stopped meanwhile,
      // which is what the caller hears, not that a path is missing.
      if (handle && !handleIs(handle.fd, handle.ref)) throw new SandboxNotFoundError(this.#o.id, "not running");
      throw err;
    } finally {
      // What was opened under it (the walk's fds) stays the sandbox's without it.
      if (handle) closeSync(handle.fd);
    }
  }

  toSandbox(hostPath: string): string {
    const m = /^\/proc\/\d+\/root(?=\/|$)/.exec(hostPath);
    if (m && this.#o.namespaces) return hostPath.slice(m[0].length) || "/";
    return sandboxPathOf(this.#o.mounts, hostPath);
  }

  #ids(): IdMapping {
    return this.#o.ids?.() ?? IDENTITY;
  }

  hostOwner(uid: number, gid: number): { uid: number; gid: number } {
    const ids = this.#ids();
    return { uid: idToHost(ids, uid), gid: idToHost(ids, gid) };
  }

  /** A host id as the sandbox sees it: one outside its range is the kernel's overflow id. */
  #inside(hostId: number): number {
    return idToSandbox(this.#ids(), hostId) ?? OVERFLOW_ID;
  }

  /** From the sandbox's own /etc/passwd (a user added inside is one the API can act as), else
   * the template's users. */
  lookupUser(name: string): SandboxUser | undefined {
    return this.#passwd().find((u) => u.name === name) ?? USERS.find((u) => u.name === name);
  }

  /** Names from the sandbox's own /etc/passwd and /etc/group (its `/etc` mount, readable while
   * the sandbox is paused too), re-read when they change, looked at no more than once a second. */
  readonly #passwd = cachedFile(() => this.#etcFile("passwd"), parsePasswd, [], NAME_RECHECK_MS);
  readonly #groups = cachedFile(() => this.#etcFile("group"), parseGroup, new Map<number, string>(), NAME_RECHECK_MS);

  #etcFile(name: string): PinnedPath {
    return pinResolved(`/etc/${name}`, () => inMount(resolveSandboxPath(this.#o.mounts, `/etc/${name}`)), false);
  }

  userName(hostUid: number): string | undefined {
    const uid = this.#inside(hostUid);
    return this.#passwd().find((u) => u.uid === uid)?.name;
  }

  groupName(hostGid: number): string | undefined {
    return this.#groups().get(this.#inside(hostGid));
  }

  /** Memory and CPU from the sandbox's cgroups (v2 names first, then v1 on a hybrid host); a
   * sandbox without cgroups (process level without them) has no figures of its own. */
  usage(): SandboxUsage | undefined {
    const dirs = this.#o.target()?.cgroupProcs.map((f) => dirname(f)) ?? [];
    if (dirs.length === 0) return undefined;
    const memUsed = firstNumber(dirs, ["memory.current", "memory.usage_in_bytes"]);
    if (memUsed === undefined) return undefined;
    const memLimit = firstNumber(dirs, ["memory.max", "memory.limit_in_bytes"]);
    const stat = firstText(dirs, ["memory.stat"]);
    const cache = stat ? /^(?:file|cache) (\d+)$/m.exec(stat)?.[1] : undefined;
    const cpuStat = firstText(dirs, ["cpu.stat"]);
    const usec = cpuStat ? /^usage_usec (\d+)$/m.exec(cpuStat)?.[1] : undefined;
    const nsec = usec === undefined ? firstNumber(dirs, ["cpuacct.usage"]) : undefined;
    return {
      memUsed,
      // v1 reports "no limit" as a huge page-rounded number; anything past 2^60 is unlimited.
      memLimit: memLimit !== undefined && memLimit < 2 ** 60 ? memLimit : undefined,
      memCache: cache === undefined ? undefined : Number(cache),
      cpuUsageUsec: usec !== undefined ? Number(usec) : nsec !== undefined ? nsec / 1000 : undefined,
      cpuLimit: cpuLimitOf(dirs),
    };
  }

  command(req: SpawnRequest): HostCommand {
    const nr = syscallNumbers();
    const t = this.#current();
    // Without a root view the process sees host paths, so its cwd is the host side of the layer.
    const cwd = this.#o.namespaces ? req.cwd : this.toHost(req.cwd);
    const joins = t.cgroupProcs.length > 0 ? t.cgroupProcs.join(":") : "-";
    const args = [ENTER_SCRIPT, SANDBOX_ENV_FILE, t.nsInit ? `${t.nsInit.pid}:${t.nsInit.start}` : "0", String(req.user.uid), String(req.user.gid), cwd, joins, String(nr.setns), String(nr.prctl), (t.caps ?? SANDBOX_CAPS).join(","), t.seccomp ?? "-", "--", req.cmd, ...req.args];
    const marker = { [MARKER_ENV]: this.#o.id };
    // Its launcher (spawner.ts) names the file enter.pl reports the command's sandbox pid in.
    return { file: PERL, args, cwd: "/", env: helperEnv({ ...marker, [PID_FILE_ENV]: PID_FILE_WANTED }), sandboxEnv: { ...t.env, ...req.env, ...marker } };
  }
}

/** A resolved path as its mount's host directory and the rest below it. */
function inMount(r: Resolved): { start: string; rest: string; sandboxPath: string } {
  return { start: r.mount.host, rest: r.hostPath.slice(r.mount.host.length), sandboxPath: r.sandboxPath };
}

function firstText(dirs: string[], names: string[]): string | undefined {
  for (const name of names) {
    for (const dir of dirs) {
      try {
        return readFileSync(join(dir, name), "utf8");
      } catch {
        // not this hierarchy
      }
    }
  }
  return undefined;
}

function firstNumber(dirs: string[], names: string[]): number | undefined {
  const text = firstText(dirs, names)?.trim();
  if (text === undefined || !/^\d+$/.test(text)) return undefined;
  return Number(text);
}

function cpuLimitOf(dirs: string[]): number | undefined {
  const max = firstText(dirs, ["cpu.max"])?.trim().split(/\s+/);
  if (max && max[0] !== "max" && max[1]) return Number(max[0]) / Number(max[1]);
  const quota = firstNumber(dirs, ["cpu.cfs_quota_us"]);
  const period = firstNumber(dirs, ["cpu.cfs_period_us"]);
  return quota !== undefined && period ? quota / period : undefined;
}

/** statfs types of the kernel's own file systems (linux/magic.h). Their files answer to the
 * opener's credentials, and the opener here is the agent, the host's root: `/proc/sys/kernel/
 * core_pattern`, `/proc/sysrq-trigger`, `/proc/kallsyms`' addresses, `/proc/keys`. A sandbox's
 * bwrap binds some of them read-only, but root inside may unmount those binds (the mounts are its
 * namespace's) or bind any of them elsewhere (`/run/x`): what is checked is the file system the
 * target and its directory are on, not the path. */
const KERNEL_FS = new Set([
  0x9fa0, // proc
  0x62656572, // sysfs
  0x27e0eb, // cgroup
  0x63677270, // cgroup2
  0x64626720, // debugfs
  0x74726163, // tracefs
  0x73636673, // securityfs
  0xcafe4a11, // bpf
  0x62656570, // configfs
  0x6165676c, // pstore
  0xde5e81e4, // efivarfs
  0x42494e4d, // binfmt_misc
  0x65735543, // fusectl
]);
/** The sandbox's own processes' files (its pid namespace's; `/proc/self` is its pid 1) and the
 * list of them: readable, as envd in a VM reads its own. */
const OWN_PROC = /^\/proc(?:\/(?:\d+|self)(?:\/.*)?)?$/;

function onKernelFs(path: string): boolean {
  return KERNEL_FS.has(statfsSync(path).type);
}

/** Whether the pinned target is a kernel file the runtime may only read; throws (EACCES) for one
 * it may not touch at all. */
function kernelFileRefused(p: PinnedPath): boolean {
  const st = p.lstat();
  const kernel = onKernelFs(p.dir) || (st !== undefined && !st.isSymbolicLink() && onKernelFs(p.host));
  if (!kernel) return false;
  if (OWN_PROC.test(p.sandboxPath)) return true;
  throw Object.assign(new Error(`'${p.sandboxPath}' is on one of the kernel's file systems, which the files API does not act on as the host's root: read or change it with a command in the sandbox`), { code: "EACCES" });
}
