// A sandbox's user namespace: its uids and gids 0..65535 are a host range of its own
// (uid-range.ts), so root inside holds capabilities only over what that namespace owns (its mount,
// pid, network, ipc and uts namespaces, files owned by its range) and is an unprivileged uid on
// the host. README.md ("User namespace") has the whole picture.
//
// `userns.pl` makes the namespace and the ID-mapped mounts; bwrap joins it (`--userns`) and
// creates the sandbox's other namespaces inside it, so they belong to it; `enter.pl` joins it
// first when a command enters.
import { spawn, spawnSync } from "node:child_process";
import { chmodSync, chownSync, closeSync, existsSync, mkdirSync, openSync, readFileSync, statSync } from "node:fs";
import type { Socket } from "node:net";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { helperEnv, lastLine, PERL, syscallNumbers } from "./host-helpers.ts";
import { RANGE_SIZE, type IdRange } from "./uid-range.ts";
import type { Spawner } from "./spawner.ts";
import type { ProcRef } from "./records.ts";
import { runHelper } from "./disk.ts";
import { openStdioFile } from "./spawner-protocol.ts";

export const USERNS_SCRIPT = fileURLToPath(new URL("./userns.pl", import.meta.url));
export const ALLOW_SETUID_SCRIPT = fileURLToPath(new URL("./allow-setuid.pl", import.meta.url));

/** What bwrap's holder needs to start inside the namespace: a path to open as its `--userns` fd
 * (valid until `end`), and the host uid it runs as (the range's 0, the namespace's owner). */
export interface OpenUserns {
  nsPath: string;
  owner: number;
  /** Lets the helper's process go; the namespace lives on in whatever joined it. */
  end(): Promise<void>;
  /** bwrap mounts the sandbox's `/` nosuid; a sandbox of its own user namespace gets it without,
   * so that `sudo` works: allow-setuid.pl for the holder whose pid 1 is `holderInit` (by pid and
   * start time: it refuses a process that has the pid only since pid 1 ended), run by the helper
   * (a fork of it, not a new perl). */
  allowSetuid(holderInit: ProcRef): Promise<void>;
}

/** An ID-mapped mount to make: `source` (a host directory) appears read-only at `target` with
 * host uid/gid 0..size-1 shown as the range's. */
export interface IdmapMount {
  source: string;
  target: string;
}

/** An overlayfs to mount once the ID-mapped mounts are made (a sandbox's root on its layers):
 * `options` (driver-made, `lowerdir=…`) name paths relative to `dir`. */
export interface OverlayMount {
  dir: string;
  options: string;
  merged: string;
}

/** What starts `userns.pl`: the driver's spawner, or `directLauncher`. */
export type UsernsLauncher = Pick<Spawner, "spawn">;

/** Starts it as a child of this process: for the template builder, which runs in the agent (as
 * root) without the driver's spawner. */
export const directLauncher: UsernsLauncher = {
  async spawn(cmd, opts) {
    const files = opts.stdio.map((s) => (typeof s === "string" ? s : "same" in s ? "ignore" : openStdioFile(s)));
    try {
      const child = spawn(cmd.file, cmd.args, { cwd: cmd.cwd, env: cmd.env, stdio: files });
      const pipes = new Map<number, Socket>();
      child.stdio.forEach((s, fd) => s && pipes.set(fd, s as Socket));
      const exit = new Promise<{ code: number | null; signal: NodeJS.Signals | null; error?: string }>((ok) => {
        child.once("error", (err) => ok({ code: null, signal: null, error: err.message }));
        child.once("exit", (code, signal) => ok({ code, signal }));
      });
      return { pid: child.pid ?? -1, pipes, onExit: (fn) => void exit.then(fn), forget: () => undefined };
    } finally {
      for (const f of files) if (typeof f === "number") closeSync(f);
    }
  },
};

/** The tmpfs of a sandbox's /dev/shm and /run: where, and its bounds (volatileBounds). */
export interface VolatileMount {
  dir: string;
  sizeMiB: number;
  inodes: number;
}

/** The bounds of a sandbox's /dev/shm and /run together: half its memory, as a Linux machine's
 * /dev/shm is by default half its RAM, and 64 inodes a MiB. Its processes' writes there are charged
 * to its memory cgroup anyway, but the files API writes as the shared runtime, whose pages (and
 * inodes) are charged to the agent's cgroup: without `size=` only tmpfs's default, half the host's
 * memory per sandbox, would bound them. */
export function volatileBounds(memoryMB: number): { sizeMiB: number; inodes: number } {
  const sizeMiB = Math.max(1, Math.floor(memoryMB / 2));
  return { sizeMiB, inodes: sizeMiB * 64 };
}

/** Makes the namespace of `range` (and the ID-mapped mounts asked for, then the overlay on them)
 * through `userns.pl`, forked by `spawner`. With `volatile` (a directory the driver made), a fresh
 * tmpfs of the host's is mounted there with `shm` and `run` for the holder to bind
 * (layout.ts `volatileBinds`). */
export async function openUserns(spawner: UsernsLauncher, range: IdRange, mounts: IdmapMount[], log: string, overlay?: OverlayMount, volatile?: VolatileMount): Promise<OpenUserns> {
  const nr = syscallNumbers();
  for (const m of mounts) mkdirSync(m.target, { recursive: true });
  const args = [USERNS_SCRIPT, String(range.base), String(range.size), String(nr.unshare), String(nr.openTree), String(nr.mountSetattr), String(nr.moveMount), ...mounts.flatMap((m) => [m.source, m.target])];
  if (overlay) args.push("overlay", String(nr.mount), overlay.dir, overlay.options, overlay.merged);
  if (volatile) {
    mkdirSync(volatile.dir, { recursive: true, mode: 0o700 });
    args.push("volatile", String(nr.mount), String(nr.umount2), volatile.dir, String(volatile.sizeMiB), String(volatile.inodes));
  }
  const child = await spawner.spawn({ file: PERL, args, cwd: "/", env: helperEnv() }, { detached: false, stdio: ["pipe", "pipe", { append: log }] });
  const [stdin, stdout] = [child.pipes.get(0)!, child.pipes.get(1)!];
  stdin.on("error", () => {});
  const exited = new Promise<string>((resolve) => child.onExit((e) => resolve(`${e.error ?? e.signal ?? `exit ${e.code}`}`)));
  // Its answers, a line each: the pid first, then one per request.
  const lines: string[] = [];
  const waiting: Array<(line: string | undefined) => void> = [];
  let text = "";
  let closed = false;
  stdout.on("data", (c) => {
    text += String(c);
    for (let i = text.indexOf("\n"); i >= 0; i = text.indexOf("\n")) {
      const line = text.slice(0, i);
      text = text.slice(i + 1);
      const w = waiting.shift();
      if (w) w(line);
      else lines.push(line);
    }
  });
  const close = () => {
    closed = true;
    for (const w of waiting.splice(0)) w(undefined);
  };
  stdout.once("close", close);
  stdout.once("error", close);
  const next = () => (lines.length ? Promise.resolve(lines.shift()) : closed ? Promise.resolve(undefined) : new Promise<string | undefined>((r) => waiting.push(r)));
  const first = await next();
  const pid = first !== undefined && /^\d+$/.test(first) ? Number(first) : undefined;
  const end = async () => {
    stdin.end();
    await exited;
  };
  if (pid === undefined) {
    await end();
    throw new Error(`user namespace helper failed (${await exited}): ${lastLine(log)}`);
  }
  const allowSetuid = async (holderInit: ProcRef) => {
    stdin.write(`allow-setuid ${holderInit.pid}:${holderInit.start} ${nr.setns} ${nr.mount}\n`);
    const answer = await next();
    if (answer !== "ok") throw new Error(`${answer ?? `user namespace helper exited (${await exited})`}: ${lastLine(log)}`);
  };
  return { nsPath: `/proc/${pid}/ns/user`, owner: range.base, end, allowSetuid };
}

/** Attaches `source` read-only at `target` with the range's host ids shown as 0-based (the range's
 * `base + n` as `n`; ids outside it as the overflow id, 65534): what a build step's root wrote in
 * its user namespace, seen as the layer must hold it (builder/sandbox.ts). Throws with the
 * helper's reason. */
export function reverseIdmap(range: IdRange, source: string, target: string): void {
  const nr = syscallNumbers();
  mkdirSync(target, { recursive: true });
  const r = spawnSync(PERL, [USERNS_SCRIPT, "reverse", String(range.base), String(range.size), String(nr.unshare), String(nr.openTree), String(nr.mountSetattr), String(nr.moveMount), source, target], { env: helperEnv(), input: "", encoding: "utf8", timeout: 20_000 });
  if (r.error || r.status !== 0 || !/^\d+\n$/.test(r.stdout)) throw new Error(`reverse ID-mapped mount failed: ${r.error?.message ?? (r.stderr.trim() || `exit ${r.status}`)}`);
}

/** Why sandboxes and build steps get no user namespace here, or undefined when they do: turned
 * off (`KRUISE_LOCAL_USERNS=off`, or `off` from a caller's option), else what the probe found. */
export function usernsUnavailable(off = false): string | undefined {
  if (off || process.env.KRUISE_LOCAL_USERNS === "off") return "turned off (KRUISE_LOCAL_USERNS=off)";
  return probeUserns();
}

let probed: string | undefined | null = null;

/** Why user namespaces cannot be used here, or undefined when they can: tried for real once per
 * process (a namespace with a range of the lease-free top slot, mapped and dropped at once). */
export function probeUserns(): string | undefined {
  if (probed !== null) return probed;
  probed = (() => {
    if (process.getuid?.() !== 0) return "the agent is not root";
    if (!existsSync("/usr/bin/setpriv")) return "/usr/bin/setpriv (util-linux) is missing: bwrap must start as the range's owner";
    const nr = syscallNumbers();
    const top = 2 ** 32 - 2 - RANGE_SIZE;
    const r = spawnSync(PERL, [USERNS_SCRIPT, String(top), String(RANGE_SIZE), String(nr.unshare), String(nr.openTree), String(nr.mountSetattr), String(nr.moveMount)], { env: helperEnv(), input: "", encoding: "utf8", timeout: 10_000 });
    if (r.error) return `userns.pl: ${r.error.message}`;
    if (r.status !== 0 || !/^\d+\n$/.test(r.stdout)) return `cannot make a user namespace: ${r.stderr.trim() || `exit ${r.status}`}`;
    return undefined;
  })();
  return probed;
}

/** Gives the layer's top directories (host view: /home/user, /root, /tmp) to the range's ids of
 * their owners inside (user 1000, root 0). */
export function chownLayer(layer: string, range: IdRange): void {
  for (const [dir, id] of [["home/user", 1000], ["root", 0], ["tmp", 0]] as const) {
    chownSync(join(layer, dir), range.base + id, range.base + id);
  }
}

/** Makes `dir` (a sandbox's directory, or a build step's around its root's mount point) passable by
 * its range's group only: host root's, mode 0710, group the range's first gid, which its holder
 * or step's bwrap runs with (setpriv `--regid`), so that uid still resolves the root it binds;
 * without a range, 0700. The data directory lets every uid pass (letOwnersPass), and the overlay
 * below keeps the set-uid files of its template and of its root, owned by the range's first uid,
 * the owner of the sandbox's user namespace: a host user who reached one could exec it and, as
 * that uid, setns or ptrace into the sandbox. Root's, not the range's: a process of the range
 * must not be able to rename or replace what the agent keeps beside the root (the record, the
 * holder's log). Search only: the group lists nothing. */
export function guardDir(dir: string, range: IdRange | undefined): void {
  // An agent that is not root has no range and owns the directory itself (its commands run as it).
  if (process.getuid?.() === 0) chownSync(dir, 0, range?.base ?? 0);
  chmodSync(dir, range ? 0o710 : 0o700);
}

/** bwrap starts as the range's owner, an unprivileged host uid, and resolves the paths of what it
 * binds (its `--bind-fd` sources too): the data directory and every directory above it must let
 * other users pass (search only, never list). Makes the data directory so; returns why it cannot
 * be when a directory above it does not. */
export function letOwnersPass(dataDir: string): string | undefined {
  for (const dir of [dataDir, join(dataDir, "sandboxes")]) {
    mkdirSync(dir, { recursive: true });
    const mode = statSync(dir).mode & 0o7777;
    if ((mode & 0o001) === 0) chmodSync(dir, mode | 0o001);
  }
  for (let dir = dirname(resolve(dataDir)); ; dir = dirname(dir)) {
    if ((statSync(dir).mode & 0o001) === 0) return `${dir}, above the data directory, does not let other users pass (mode ${(statSync(dir).mode & 0o777).toString(8)}): sandboxes' holders start as unprivileged uids`;
    if (dir === "/") return undefined;
  }
}

/** Capabilities root inside keeps (its bounding set), by number: Docker's default set (CHOWN,
 * DAC_OVERRIDE, FOWNER, FSETID, KILL, SETGID, SETUID, SETPCAP, NET_BIND_SERVICE, NET_RAW,
 * SYS_CHROOT, MKNOD, AUDIT_WRITE, SETFCAP) plus SYS_ADMIN, which the user namespace confines to
 * the mounts and namespaces it owns (`mount -t tmpfs` inside works; nothing on the host is
 * reachable with it). enter.pl keeps these only when it joins a user namespace. */
export const SANDBOX_CAPS = [0, 1, 3, 4, 5, 6, 7, 8, 10, 13, 18, 21, 27, 29, 31];

/** The same without CAP_NET_RAW (13), for every sandbox of a driver with the kernel's fast path
 * and any sandbox behind the proxy: such a sandbox may have an eth0 whose only guard is the
 * `gate` chain on the IPv4 output hook, and frames sent on a packet (or raw) socket never pass
 * that hook. A sandbox whose network changes keeps the bounding set its processes started with,
 * so the driver drops it for all its sandboxes, not only those governed now (README.md, "The
 * sandbox cannot undo it"). CAP_NET_ADMIN (12) is in neither set. */
export const GOVERNED_CAPS = SANDBOX_CAPS.filter((c) => c !== 13);

/** Mount points strictly below `dir` in the host's mount table, deepest first (ID-mapped mounts
 * are on the same device as their directory, so the device test of disk.ts cannot see them). */
export function mountsUnder(dir: string, mountinfo = readFileSync("/proc/self/mountinfo", "utf8")): string[] {
  const prefix = `${dir.replace(/\/+$/, "")}/`;
  const unescape = (p: string) => p.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)));
  const points = mountinfo.split("\n").map((l) => l.split(" ")[4]).filter((p): p is string => p !== undefined).map(unescape);
  return [...new Set(points.filter((p) => p.startsWith(prefix)))].sort((a, b) => b.length - a.length);
}

/** Unmounts every mount below `dir` (lazily where one is busy). */
export async function unmountUnder(spawner: Spawner, dir: string): Promise<void> {
  for (const at of mountsUnder(dir)) {
    try {
      await runHelper(spawner, ["umount", at]);
    } catch {
      if (mountsUnder(dirname(at)).includes(at)) await runHelper(spawner, ["umount", "-l", at]);
    }
  }
}

/** The same, synchronously (a driver's start, emptying the trash). */
export function unmountUnderSync(dir: string): void {
  for (const at of mountsUnder(dir)) {
    const r = spawnSync("umount", [at], { env: helperEnv(), timeout: 20_000 });
    if (r.status !== 0) spawnSync("umount", ["-l", at], { env: helperEnv(), timeout: 20_000 });
  }
}
