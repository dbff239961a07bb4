// One build step in a build sandbox: the parent layers and a fresh upper directory as an overlay,
// entered by bubblewrap with new mount, pid, ipc, uts and cgroup namespaces and a network
// namespace like a sandbox's (step-net.ts; loopback only where the driver has no sandbox
// network), no host path visible, Docker's default capability set for root
// inside (a build installs packages and chowns files; no CAP_SYS_ADMIN, no mounts), and the
// step's user set inside by setpriv. What the tenant sent (commands, paths, env) is only ever
// positional arguments of our fixed scripts inside the sandbox: never a host process's options or
// environment.
import { execFile, spawn, spawnSync } from "node:child_process";
import { chownSync, closeSync, constants, lstatSync, mkdirSync, openSync, rmdirSync, rmSync, statfsSync, writeFileSync } from "node:fs";
import { basename, dirname, join, relative } from "node:path";
import { promisify } from "node:util";
import { newDiskCommand } from "../disk.ts";
import { removeTree } from "../remove-tree.ts";
import { directLauncher, guardDir, openUserns, reverseIdmap, unmountUnderSync, type OpenUserns } from "../userns.ts";
import type { IdRange } from "../uid-range.ts";
import type { BuildConfig } from "./plan.ts";
import { LineCutter } from "../../../lib/line-cutter.ts";
import { MAX_MESSAGE_LENGTH } from "../../../../schema/api/limits.ts";

const CAPS = ["CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL", "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_MKNOD", "CAP_AUDIT_WRITE", "CAP_SETFCAP"];
const PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/** Where a step with a user namespace has its root mounted: bwrap then starts as an unprivileged
 * uid and resolves the path of what it binds, which the store (under root's home, often) may not
 * let it reach. One directory per step, named as its staging directory (stepRootOf). */
export const STEP_ROOTS = "/run/kruise-builds";

/** A step's root mount point, `<STEP_ROOTS>/<staging name>/root`: the directory around it lets
 * only the step's range pass (guardDir), as a sandbox's does, since the root keeps the set-uid
 * files the step's root made, owned by the range's first uid. */
export function stepRootOf(name: string): string {
  return join(STEP_ROOTS, name, "root");
}

/** Runs as root inside: switches to the step's user with a clean environment plus the template's
 * env, enters the workdir, runs the command with bash (sh without it). $1 user, $2 workdir,
 * $3 command, then NAME=value pairs. */
const RUN = String.raw`u="$1"; d="$2"; c="$3"; shift 3
g=$(id -g "$u") || { echo "user $u does not exist in the template" >&2; exit 1; }
command -v setpriv >/dev/null || { echo "setpriv (util-linux) is missing from the template" >&2; exit 1; }
sh=/bin/sh; [ -x /bin/bash ] && sh=/bin/bash
exec setpriv --reuid="$u" --regid="$g" --init-groups --reset-env env "$@" "$sh" -c 'cd "$0" 2>/dev/null || cd /; exec "$1" -c "$2"' "$d" "$sh" "$c"`;

/** $1 dir, $2 user: creates the workdir owned by the user (as E2B's setWorkdir does). */
const WORKDIR = String.raw`[ -d "$1" ] || { mkdir -p "$1" && chown "$2": "$1"; }`;

/** $1 src (a path or glob in the upload), $2 dest, $3 owner, $4 mode, $5 workdir; the upload (a
 * tar, perhaps compressed: GNU tar detects that only in an archive it opens by name) on stdin. */
const COPY = String.raw`set -e
src="$1"; dest="$2"; owner="$3"; mode="$4"
case "$dest" in /*) ;; *) dest="$5/$dest";; esac
t=$(mktemp -d)
tar -xf /dev/stdin -C "$t" --no-same-owner
cd "$t"
found=0
for s in $src; do
  [ -e "$s" ] || [ -L "$s" ] || continue
  found=1
  if [ -d "$s" ] && [ ! -L "$s" ]; then mkdir -p "$dest"; cp -a "$s/." "$dest/"; target="$dest"
  else
    case "$dest" in
      */) mkdir -p "$dest"; target="$dest$(basename "$s")";;
      *) if [ -d "$dest" ]; then target="$dest/$(basename "$s")"; else mkdir -p "$(dirname "$dest")"; target="$dest"; fi;;
    esac
    cp -a "$s" "$target"
  fi
  [ -z "$owner" ] || chown -R "$owner": "$target"
  [ -z "$mode" ] || chmod "$mode" "$target"
done
[ "$found" = 1 ] || { echo "copy: $src matched nothing in the upload" >&2; exit 1; }`;

export type SandboxStep =
  | { kind: "run"; command: string; user: string }
  | { kind: "workdir"; dir: string }
  | { kind: "copy"; src: string; dest: string; owner: string; mode: string; archive: string };

export interface StepRun {
  /** Layer trees, bottom first. */
  lowers: string[];
  /** The staging directory: `rootfs/` becomes the layer (the upper dir, or a copy of it from the
   * step's disk); `work/`, `merged/`, `disk/` go. */
  staging: string;
  config: BuildConfig;
  step: SandboxStep;
  onLine(line: string, stream: "stdout" | "stderr"): void;
  timeoutMs: number;
  /** cgroup.procs files bwrap joins before it starts anything (the step's limits). */
  cgroupProcs?: string[];
  /** Stops the step (its command, or the copy of its layer) as the timeout does: SIGKILL. */
  signal?: AbortSignal;
  /** The seccomp program bwrap loads into the step's command (seccomp.ts); none: no filter. */
  seccomp?: Uint8Array;
  /** The step's network (step-net.ts); none: loopback only. */
  net?: { nsFd: number; resolvConf: string };
  /** The most the step may write, in MiB: its upper and work directories are on a loop-mounted
   * ext4 image of this size (ENOSPC inside past it), copied out as the layer when the step
   * succeeds. None: they are plain directories of the host's file system (no bound). */
  diskMB?: number;
  /** With `diskMB`: at least this many files fit on that image (mkfs -N), and no more than ext4's
   * rounding up of it. */
  files?: number;
  /** The step's user namespace maps its 0..size-1 to this host range (userns.ts, as a sandbox's):
   * its root is an unprivileged uid on the host. The layers below are attached ID-mapped, and the
   * upper directory is copied into the layer through a reverse ID-mapped mount, so the layer says
   * 0 where the step's root wrote. None: the step runs as the host's root. */
  userns?: IdRange;
}

const run = promisify(execFile);
const HOST_ENV = { PATH };

/** A sparse image of `sizeMB` formatted ext4 and mounted at `at` as a sandbox's disk is (disk.ts:
 * nodev, nosuid, no root reservation). Async: the builder runs in the agent, whose event loop
 * must not wait on mkfs or the copy out. */
async function mountStepDisk(image: string, at: string, sizeMB: number, files: number | undefined): Promise<void> {
  mkdirSync(at, { recursive: true });
  const [file, ...args] = newDiskCommand(image, at, sizeMB, files);
  await run(file!, args, { env: HOST_ENV, timeout: 60_000 });
}

/** What the host keeps free whatever builds write: a step's disk is sized so that it and the copy
 * of the layer off it (both on the host's file system at once) leave this much. */
export const HOST_RESERVE_MB = 2048;
/** The same for inodes: a layer's files are made again on the host's file system by its copy (an
 * empty file costs no bytes), which also holds the data directory, records and logs. */
export const HOST_RESERVE_FILES = 256 * 1024;

/** The size of a step's disk: what is left of the build's bound, and no more than leaves the host
 * HOST_RESERVE_MB with the image full and the layer copied off it. */
export function stepDiskMB(budgetMB: number, hostFreeBytes: number): number {
  return Math.min(budgetMB, Math.floor((hostFreeBytes / (1024 * 1024) - HOST_RESERVE_MB) / 2));
}

/** The files (inodes) a step may make: what is left of the build's bound, and no more than leaves
 * the host HOST_RESERVE_FILES once its layer is copied off (`hostFreeFiles` undefined: the host's
 * file system does not count them, as btrfs does not). */
export function stepFiles(budgetFiles: number, hostFreeFiles: number | undefined): number {
  return hostFreeFiles === undefined ? budgetFiles : Math.min(budgetFiles, hostFreeFiles - HOST_RESERVE_FILES);
}

/** What the step used up on the file system at `dir`: its space (under 1 % or 1 MiB free) or its
 * inodes (under 1 % or 16 free): it hit its bound. */
function fullOf(dir: string): "space" | "files" | undefined {
  try {
    const s = statfsSync(dir);
    if (s.files > 0 && s.ffree < Math.max(16, s.files / 100)) return "files";
    return s.bavail * s.bsize < Math.max(1 << 20, (s.blocks * s.bsize) / 100) ? "space" : undefined;
  } catch {
    return undefined;
  }
}

/** Joins the cgroups named by its first arguments (our own paths), then execs the rest. */
const JOIN = String.raw`n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 125; shift; n=$((n-1)); done; exec "$@"`;

/** Runs the step; resolves with its exit code (null: killed, e.g. by the timeout) and, when it
 * failed on a full disk (`diskMB`), whether its space or its files ran out. */
export async function runStep(r: StepRun): Promise<{ code: number | null; diskFull: "space" | "files" | undefined }> {
  const disk = join(r.staging, "disk");
  const image = join(r.staging, "disk.img");
  // With a bound, upper and work live on the step's image (overlayfs wants them on one file
  // system); the layer is `rootfs/` of the staging directory either way: the upper directory
  // itself when there is neither a bound nor a user namespace, else a copy of it.
  const top = r.diskMB === undefined ? r.staging : disk;
  const layer = join(r.staging, "rootfs");
  const upper = r.diskMB === undefined && !r.userns ? layer : join(top, "upper");
  const work = join(top, "work");
  const merged = r.userns ? stepRootOf(basename(r.staging)) : join(r.staging, "merged");
  let diskMounted = false;
  let ns: OpenUserns | undefined;
  try {
    if (r.diskMB !== undefined) {
      await mountStepDisk(image, disk, r.diskMB, r.files);
      diskMounted = true;
    }
    if (r.userns) {
      mkdirSync(STEP_ROOTS, { recursive: true, mode: 0o711 });
      mkdirSync(dirname(merged), { recursive: true });
      guardDir(dirname(merged), r.userns);
    }
    for (const d of [upper, work, merged]) mkdirSync(d, { recursive: true });
    if (r.userns) {
      // The layers below, attached ID-mapped (host 0 shown as the range's 0, as a sandbox's root
      // is made), and the overlay on them, by userns.pl; the upper directory belongs to the
      // step's root (it is `/`'s owner inside).
      chownSync(upper, r.userns.base, r.userns.base);
      const mounts = r.lowers.map((l, i) => ({ source: l, target: join(r.staging, "lower", String(i)) }));
      const options = `lowerdir=${mounts.map((m) => relative(r.staging, m.target)).reverse().join(":")},upperdir=${upper},workdir=${work}`;
      ns = await openUserns(directLauncher, r.userns, mounts, join(r.staging, "userns.log"), { dir: r.staging, options, merged });
    } else {
      // Relative lowerdirs (from the layers' common parent) keep the option within one page.
      const base = join(r.staging, "..");
      const lowers = [...r.lowers].reverse().map((l) => relative(base, l));
      const mount = spawnSync("mount", ["-t", "overlay", "overlay", "-o", `lowerdir=${lowers.join(":")},upperdir=${upper},workdir=${work}`, merged], { cwd: base, encoding: "utf8" });
      if (mount.status !== 0) throw new Error(`overlay mount failed: ${(mount.stderr || mount.error?.message || "").trim()}`);
    }
    let code: number | null;
    try {
      code = await bwrap(merged, r, ns);
    } finally {
      await ns?.end();
      spawnSync("umount", ["-l", merged], { env: HOST_ENV });
    }
    const diskFull = diskMounted && code !== 0 ? fullOf(disk) : undefined;
    if (upper !== layer && code === 0) {
      // The layer leaves the image as it is: owners, modes, links, overlay whiteouts (0/0 devices)
      // and opaque-directory xattrs; links are copied as links, never followed. In the step's
      // cgroups (cp keeps a path per hard-linked inode: the step's memory bound is its bound too)
      // and with the step's timeout again. With a user namespace, through a reverse ID-mapped
      // mount of the upper directory: the range's ids read as 0-based (set-id bits and file
      // capabilities kept, the latter as the kernel shows them there: for root); the whiteouts
      // the overlay made as the host's root read as 65534 (a whiteout's owner means nothing).
      const from = r.userns ? join(r.staging, "upper-0") : upper;
      if (r.userns) reverseIdmap(r.userns, upper, from);
      mkdirSync(layer);
      const procs = r.cgroupProcs ?? [];
      const copy = run("/bin/sh", ["-c", JOIN, "sh", String(procs.length), ...procs, "cp", "-a", "--", `${from}/.`, layer], { env: HOST_ENV, timeout: r.timeoutMs, maxBuffer: 1 << 20, signal: r.signal, killSignal: "SIGKILL" });
      try {
        await copy;
      } catch (err) {
        // Its message names host paths: the build's log gets the gist, the agent's the detail.
        console.warn(`build step copy off its disk: ${(err as Error).message.slice(0, 2000)}`);
        if (r.signal?.aborted) {
          // execFile answers an abort at once, before the killed cp is gone: the cleanup below
          // must not race it (the step's bwrap is waited for the same way).
          const c = copy.child;
          if (c.exitCode === null && c.signalCode === null) await new Promise((ok) => c.once("close", ok));
          throw r.signal.reason;
        }
        const why = (err as { killed?: boolean }).killed ? "it ran out of time" : ((err as { stderr?: string }).stderr ?? "").includes("File name too long") ? "a path in it is too long" : "see the agent's log";
        throw new Error(`the step's files could not be copied into its layer (${why})`);
      }
    }
    return { code, diskFull };
  } finally {
    // The ID-mapped mounts (the layers below, the reverse one) and the overlay, then the disk.
    if (r.userns) unmountUnderSync(r.staging);
    if (diskMounted) spawnSync("umount", ["-l", disk], { env: HOST_ENV });
    rmSync(image, { force: true });
    rmSync(join(r.staging, "userns.log"), { force: true });
    // The upper directory is the step's tree (on the host's file system when the step had no
    // disk); the rest are mount points and the overlay's work directory. An empty mount point at
    // STEP_ROOTS (never under the store: never a recursive removal there).
    if (r.userns) removeMountPoint(merged);
    const trees = [disk, ...(upper !== layer ? [upper] : []), join(r.staging, "lower"), join(r.staging, "upper-0"), work, ...(r.userns ? [] : [merged])];
    // What cannot go now (a mount still busy) goes with the staging directory, or at the next start.
    await removeTree(trees).catch((err: Error) => console.warn(`build step cleanup: ${err.message.slice(0, 2000)}`));
    rmSync(join(r.staging, "bwrap-args"), { force: true });
    rmSync(join(r.staging, "seccomp.bpf"), { force: true });
    rmSync(join(r.staging, "resolv.conf"), { force: true });
  }
}

/** Removes a step's root mount point and the directory around it (stepRootOf), if they are empty. */
export function removeMountPoint(root: string): void {
  for (const dir of [root, dirname(root)]) {
    try {
      rmdirSync(dir);
    } catch {
      // gone already, or still mounted (a lazy unmount's leftovers are swept at the next start)
    }
  }
}

function isFile(path: string): boolean {
  try {
    return lstatSync(path).isFile();
  } catch {
    return false;
  }
}

/** The step's network namespace (its StepNet's fd), when it has one: a fixed fd below 10, since
 * the shell that closes it past nsenter (`exec "$@" 3<&-`) is dash, which reads only one digit
 * as a redirection's fd (`12<&-` would close stdin and pass "12" to the command as an argument). */
const NET_FD = 3;
/** Where bwrap's options and descriptors start: fd 4 is the options file. */
const ARGS_FD = 4;

function bwrap(root: string, r: StepRun, ns: OpenUserns | undefined): Promise<number | null> {
  const s = r.step;
  // Descriptors bwrap is handed after its options (fd 5 on), opened here as root: with a user
  // namespace, bwrap runs as the range's owner (`--bind-fd` still needs the root's path to be
  // reachable by it: STEP_ROOTS).
  const fds: string[] = [];
  const fdOf = (path: string) => String(ARGS_FD + fds.push(path));
  // /tmp as any Linux system has it (1777): apt's `_apt` and a step run as `user` write there.
  const args = [...(ns ? ["--userns", fdOf(ns.nsPath), "--bind-fd", fdOf(root)] : ["--bind", root]), "/", "--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--tmpfs", "/tmp", "--tmpfs", "/run"];
  // A sandbox's resolvers over the template's file (as Docker does for RUN), never written into
  // the layer; a template whose resolv.conf is a link, or that has none, keeps its own. A copy
  // bwrap makes from a descriptor (it resolves no path of ours).
  if (r.net && isFile(join(root, "etc", "resolv.conf"))) {
    const conf = join(r.staging, "resolv.conf");
    writeFileSync(conf, r.net.resolvConf, { mode: 0o644 });
    args.push("--perms", "0644", "--ro-bind-data", fdOf(conf), "/etc/resolv.conf");
  }
  if (!r.net) args.push("--unshare-net");
  args.push("--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--hostname", "build", "--die-with-parent", "--new-session");
  args.push("--cap-drop", "ALL", ...CAPS.flatMap((c) => ["--cap-add", c]));
  args.push("--clearenv", "--setenv", "PATH", PATH, "--setenv", "HOME", "/root", "--chdir", "/");
  const env = Object.entries(r.config.env).map(([k, v]) => `${k}=${v}`);
  const command = ["/bin/sh", "-c"];
  if (s.kind === "run") command.push(RUN, "sh", s.user, r.config.workdir, s.command, ...env);
  else if (s.kind === "workdir") command.push(WORKDIR, "sh", s.dir, r.config.user);
  else command.push(COPY, "sh", s.src, s.dest, s.owner, s.mode, r.config.workdir);
  // Options through a file (NUL-terminated, as bwrap reads them; a file, not a pipe: bwrap does
  // not wait on a non-blocking socket): pid 1 inside (bwrap) shows `bwrap --args 4 -- <command>`,
  // not the host path of the merged tree.
  const argsFile = join(r.staging, "bwrap-args");
  // The sandboxes' filter, so a step's root meets the same kernel surface as a sandbox's.
  if (r.seccomp) {
    const filter = join(r.staging, "seccomp.bpf");
    writeFileSync(filter, r.seccomp, { mode: 0o600 });
    args.push("--seccomp", fdOf(filter));
  }
  writeFileSync(argsFile, args.map((a) => `${a}\0`).join(""), { mode: 0o600 });
  const opened = [argsFile, ...fds].map((f) => openSync(f, lstatSync(f).isDirectory() ? constants.O_RDONLY | constants.O_DIRECTORY : "r"));
  return new Promise((resolve, reject) => {
    if (r.signal?.aborted) {
      for (const fd of opened) closeSync(fd);
      return reject(r.signal.reason);
    }
    const procs = r.cgroupProcs ?? [];
    // The step's network by the fd its StepNet holds (step-net.ts), handed over at NET_FD and
    // closed again past nsenter, so the step's processes do not inherit it.
    const enter = r.net ? ["nsenter", `--net=/proc/self/fd/${NET_FD}`, "--", "/bin/sh", "-c", `exec "$@" ${NET_FD}<&-`, "sh"] : [];
    // With a user namespace, bwrap starts as the range's owner with no capability on the host and
    // joins the namespace (`--userns`): the step's root is that uid on the host.
    const as = ns ? ["/usr/bin/setpriv", `--reuid=${ns.owner}`, `--regid=${ns.owner}`, "--clear-groups"] : [];
    const argv = ["-c", JOIN, "sh", String(procs.length), ...procs, ...enter, ...as, "bwrap", "--args", String(ARGS_FD), "--", ...command];
    // A copy step's archive is the command's stdin (extracted inside): no path bwrap must reach.
    const stdin = s.kind === "copy" ? openSync(s.archive, "r") : "ignore";
    const child = spawn("/bin/sh", argv, { stdio: [stdin, "pipe", "pipe", r.net ? r.net.nsFd : "ignore", ...opened], env: HOST_ENV, cwd: "/" });
    for (const fd of opened) closeSync(fd);
    if (typeof stdin === "number") closeSync(stdin);
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill("SIGKILL");
    }, r.timeoutMs);
    // Stopped (the build given up): killed as the timeout kills, and settled on `close` as it is,
    // so the caller's cleanup (cgroup, uid range, staging) runs once the step's output has ended.
    // Not spawn's `signal`: that rejects at once, while the step's processes may still be dying.
    const stop = () => child.kill("SIGKILL");
    r.signal?.addEventListener("abort", stop, { once: true });
    const settled = () => (clearTimeout(timer), r.signal?.removeEventListener("abort", stop));
    for (const [stream, name] of [[child.stdout!, "stdout"], [child.stderr!, "stderr"]] as const) {
      const lines = new LineCutter((l) => r.onLine(l, name), MAX_MESSAGE_LENGTH); // a log entry's bound: nothing clipped
      stream.setEncoding("utf8");
      stream.on("data", (chunk: string) => lines.push(chunk));
      stream.on("end", () => lines.end());
    }
    child.on("error", (err) => (settled(), reject(err)));
    child.on("close", (code) => {
      settled();
      if (code === null && r.signal?.aborted) return reject(r.signal.reason);
      // Killed by a signal (the OOM killer takes bwrap too): reported as a shell would, 128 + 9.
      resolve(code ?? (timedOut ? null : 137));
    });
  });
}
