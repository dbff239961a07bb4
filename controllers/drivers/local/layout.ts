// The on-disk shape of one local sandbox and the root view it is given:
//   <dataDir>/sandboxes/<id>/record.json     what the driver knows (two slots, see records.ts)
//   <dataDir>/sandboxes/<id>/etc/            synthetic /etc (users of the `base` template); its
//                                            files but hostname and hosts are hard links into
//   <dataDir>/etc-base/                      written once per agent
//   <dataDir>/rootfs/                        skeleton of `/` (mount points, /bin -> usr/bin
//                                            links), the same for every sandbox
//   <dataDir>/sandboxes/<id>/layer/{home/user,root,tmp}   the writable layer
// or, when the sandbox has a disk of its own (disk.ts), the same inside its image:
//   <dataDir>/sandboxes/<id>/disk.img        ext4 image, mounted at
//   <dataDir>/sandboxes/<id>/disk/{etc,layer/{home/user,root,tmp}}
// (/etc copied rather than linked: a hard link cannot cross file systems). A sandbox whose template
// is a root filesystem (root-overlay.ts) has none of these but the record and disk: its `/` is an
// overlay mounted at
//   <dataDir>/sandboxes/<id>/root                 upper and work directories on its disk:
//   <dataDir>/sandboxes/<id>/disk/{upper,work}    (or in its directory when it has no disk) Bind mounts from the
// image show paths inside it in the sandbox's /proc/self/mountinfo, never the data directory.
// Sharing what is the same for every sandbox took a sandbox's start from ~160 file system calls to
// ~40 (each a few tens of µs on this machine's disk, on the agent's event loop).
// The same mount list drives bubblewrap's arguments and the SandboxView's path mapping, so the
// runtime and the sandbox's processes always agree on what a path means.
import { chmodSync, chownSync, constants, copyFileSync, existsSync, linkSync, lstatSync, mkdirSync, readFileSync, readdirSync, readlinkSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { SandboxUser } from "../../runtime/sandbox-view.ts";

export const USERS: SandboxUser[] = [
  { name: "root", uid: 0, gid: 0, home: "/root", shell: "/bin/bash" },
  { name: "user", uid: 1000, gid: 1000, home: "/home/user", shell: "/bin/bash" },
];

/** One entry of the sandbox's mount table: sandbox path -> host path. */
export interface Mount {
  at: string;
  host: string;
  writable: boolean;
}

/** Host directories of the read-only base system; top-level links such as /bin -> usr/bin on a
 * merged-/usr host are reproduced as links instead. */
const BASE_DIRS = ["usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"];
/** Host /etc entries that are shared system data, not host identity or secrets: without
 * alternatives, Debian's /usr/bin/awk and friends dangle; without ssl, HTTPS fails. */
const SHARED_ETC_DIRS = ["alternatives", "ssl", "ca-certificates"];
const COPIED_ETC_FILES = ["ld.so.cache", "profile", "bash.bashrc", "inputrc", "os-release", "localtime"];
/** Sandbox paths that exist only inside (kernel file systems); never mapped to the host. */
export const VIRTUAL_DIRS = ["/proc", "/dev", "/run", "/sys"];

export interface SandboxLayout {
  dir: string;
  /** The sandbox's disk image and where it is mounted (used when `onDisk`). */
  image: string;
  disk: string;
  /** The writable layer and /etc are on the sandbox's own disk. */
  onDisk: boolean;
  /** Written once and shared: the static /etc files. */
  etcBase: string;
  record: string;
  etc: string;
  rootfs: string;
  layer: string;
  log: string;
  /** Its root (when it has one of its own): the overlay's mount point, upper and work dirs. */
  merged: string;
  upper: string;
  work: string;
  /** The sandbox's `/` is its overlay (`merged`), not a view of the host. */
  rooted: boolean;
  /** Where a sandbox with a user namespace has the tmpfs of its /dev/shm and /run (volatileBinds). */
  volatile: string;
}

/** The last data directory's own paths (a driver has one; asked for at every layoutFor). */
let shared: { dataDir: string; sandboxes: string; etcBase: string; rootfs: string } | undefined;

export function layoutFor(dataDir: string, id: string, onDisk = false, rooted = false): SandboxLayout {
  if (shared?.dataDir !== dataDir) shared = { dataDir, sandboxes: join(dataDir, "sandboxes"), etcBase: join(dataDir, "etc-base"), rootfs: join(dataDir, "rootfs") };
  const dir = join(shared.sandboxes, id);
  // Asked for several times per create (issue 16): the names below are appended to `dir`, which
  // join made normal, so each is normal as join would make it (not after "/" or ".").
  const under = dir.endsWith("/") || dir === "." ? (d: string, name: string) => join(d, name) : (d: string, name: string) => `${d}/${name}`;
  const disk = under(dir, "disk");
  const files = onDisk ? disk : dir;
  const upper = under(files, "upper");
  return {
    merged: under(dir, "root"),
    volatile: volatileDir(dir), // its one home: the unmounts name it too
    upper,
    work: under(files, "work"),
    rooted,
    dir,
    image: under(dir, "disk.img"),
    disk,
    onDisk,
    record: under(dir, "record.json"),
    etc: under(files, "etc"),
    etcBase: shared.etcBase,
    rootfs: shared.rootfs,
    // What snapshots save: with a root of its own, everything the sandbox wrote.
    layer: rooted ? upper : under(files, "layer"),
    // The holder's stderr (and the user namespace helper's), kept by bwrap's pid 1 and its `sleep`
    // for the sandbox's life, whose root may ptrace them and make them write: on the sandbox's own
    // disk where it has one (counted in its size, ENOSPC past it; out of the sandbox's sight: only
    // `upper`, `work` or `layer` and `etc` below the disk's root reach it), never the host's
    // file system without a bound.
    log: under(files, "holder.log"),
  };
}

interface BaseEntry {
  name: string;
  link?: string;
}

function baseEntries(): BaseEntry[] {
  const out: BaseEntry[] = [];
  for (const name of BASE_DIRS) {
    const host = `/${name}`;
    if (!existsSync(host)) continue;
    const st = lstatSync(host);
    if (st.isSymbolicLink()) out.push({ name, link: readlinkSync(host) });
    else if (st.isDirectory()) out.push({ name });
  }
  return out;
}

/** The mount table, most specific last (the resolver picks the longest match). */
export function mountsFor(layout: SandboxLayout): Mount[] {
  // Its own root covers every path but the kernel's (VIRTUAL_DIRS, reached through its holder).
  if (layout.rooted) return [{ at: "/", host: layout.merged, writable: true }];
  const mounts: Mount[] = [{ at: "/", host: layout.rootfs, writable: false }];
  for (const e of baseEntries()) if (!e.link) mounts.push({ at: `/${e.name}`, host: `/${e.name}`, writable: false });
  mounts.push({ at: "/etc", host: layout.etc, writable: false });
  for (const d of SHARED_ETC_DIRS) if (existsSync(`/etc/${d}`)) mounts.push({ at: `/etc/${d}`, host: `/etc/${d}`, writable: false });
  mounts.push(
    { at: "/home/user", host: join(layout.layer, "home/user"), writable: true },
    { at: "/root", host: join(layout.layer, "root"), writable: true },
    { at: "/tmp", host: join(layout.layer, "tmp"), writable: true },
  );
  return mounts;
}

/** Shared directories already written by this process (they depend only on the host). */
const prepared = new Set<string>();

/** Creates the writable layer (unless it exists: a Stop-paused sandbox keeps it), the synthetic
 * /etc and the root skeleton. Idempotent. */
export function prepareLayout(layout: SandboxLayout, hostname: string): void {
  const home = join(layout.layer, "home/user");
  if (!existsSync(home)) {
    mkdirSync(home, { recursive: true, mode: 0o755 });
    chownSync(home, 1000, 1000);
  }
  mkdirSync(join(layout.layer, "root"), { recursive: true, mode: 0o700 });
  mkdirSync(join(layout.layer, "tmp"), { recursive: true });
  // mkdir's mode is masked by the umask; /tmp must be world-writable and sticky for `user`.
  chmodSync(join(layout.layer, "tmp"), 0o1777);
  once(layout.etcBase, writeEtcBase);
  writeEtc(layout.etc, layout.etcBase, hostname, layout.onDisk);
  once(layout.rootfs, writeSkeleton);
}

function once(dir: string, write: (dir: string) => void): void {
  if (prepared.has(dir)) return;
  write(dir);
  prepared.add(dir);
}

/** The /etc files that are the same in every sandbox. Rewritten once per agent start, so a host
 * change (resolv.conf, a new ld.so.cache) reaches sandboxes created after it. */
function writeEtcBase(base: string): void {
  // Sandboxes link to these inodes: replace them by new files instead of writing over them.
  rmSync(base, { recursive: true, force: true });
  mkdirSync(base, { recursive: true });
  const passwd = USERS.map((u) => `${u.name}:x:${u.uid}:${u.gid}:${u.name}:${u.home}:${u.shell}`).join("\n");
  const files: Record<string, string> = {
    passwd: `${passwd}\n`,
    group: USERS.map((u) => `${u.name}:x:${u.gid}:`).join("\n") + "\nsudo:x:27:user\n",
    "nsswitch.conf": "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\n",
    "resolv.conf": resolvConf(),
  };
  for (const [name, text] of Object.entries(files)) writeFileSync(join(base, name), text);
  for (const name of COPIED_ETC_FILES) {
    try {
      copyFileSync(`/etc/${name}`, join(base, name));
    } catch {
      // optional on this host
    }
  }
}

/** A file's text, or undefined where there is none to reach (as existsSync says no): one open,
 * no look first (asked at each new root's identity, writeIdentity). */
function readOr(file: string): string | undefined {
  try {
    return readFileSync(file, "utf8");
  } catch (err) {
    if (["ENOENT", "ENOTDIR", "EACCES", "ELOOP", "ENAMETOOLONG"].includes((err as NodeJS.ErrnoException).code ?? "")) return undefined;
    throw err;
  }
}
const nameservers = (text: string) => [...text.matchAll(/^\s*nameserver\s+(\S+)/gm)].map((m) => m[1]!);
const isLoopback = (ip: string) => /^127\./.test(ip) || ip === "::1";

/** The host's resolvers. A loopback stub (systemd-resolved's 127.0.0.53) is not reachable from a
 * sandbox's own network namespace, so the upstream servers it lists take its place when there
 * are any; otherwise the host's file is kept, and names do not resolve in such sandboxes. */
export function resolvConf(host = readOr("/etc/resolv.conf") ?? "nameserver 1.1.1.1\n", upstream = () => readOr("/run/systemd/resolve/resolv.conf")): string {
  const servers = nameservers(host);
  if (servers.length === 0 || !servers.every(isLoopback)) return host;
  const up = upstream();
  return up && nameservers(up).some((ip) => !isLoopback(ip)) ? up : host;
}

/** The IPv4 resolvers a sandbox's /etc/resolv.conf names (what the host's network must let it
 * reach on port 53, even where they are in a private range). */
export function sandboxResolvers(): string[] {
  return nameservers(resolvConf()).filter((ip) => /^\d{1,3}(\.\d{1,3}){3}$/.test(ip) && !isLoopback(ip));
}

function writeEtc(etc: string, base: string, hostname: string, copy: boolean): void {
  mkdirSync(etc, { recursive: true });
  for (const name of readdirSync(base)) {
    try {
      if (copy) copyFileSync(join(base, name), join(etc, name), constants.COPYFILE_EXCL);
      else linkSync(join(base, name), join(etc, name));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
    }
  }
  writeFileSync(join(etc, "hostname"), `${hostname}\n`);
  writeFileSync(join(etc, "hosts"), `127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t${hostname}\n`);
  for (const d of SHARED_ETC_DIRS) if (existsSync(`/etc/${d}`)) mkdirSync(join(etc, d), { recursive: true });
}

function writeSkeleton(rootfs: string): void {
  for (const d of ["home/user", "root", "tmp", "etc", "proc", "dev", "run", "sys"]) {
    mkdirSync(join(rootfs, d), { recursive: true });
  }
  for (const e of baseEntries()) {
    const p = join(rootfs, e.name);
    if (existsSync(p) || isLink(p)) continue;
    if (e.link) symlinkSync(e.link, p);
    else mkdirSync(p);
  }
}

function isLink(p: string): boolean {
  try {
    return lstatSync(p).isSymbolicLink();
  } catch {
    return false;
  }
}

/** The mount point of a sandbox's /dev/shm and /run tmpfs, in its directory `dir`. */
export function volatileDir(dir: string): string {
  return join(dir, "volatile");
}

/** bubblewrap arguments for the sandbox's /dev/shm and /run (after its /dev). Without `volatile`,
 * tmpfs bwrap mounts; they belong to the user namespace bwrap runs in, which is the host's when the
 * sandbox has none. With one (a sandbox with a user namespace), the `shm` and `run` of the tmpfs
 * userns.pl mounted at `volatile` in the host's user namespace: the kernel lets nobody create in a
 * file system whose user namespace does not map their fsuid (EOVERFLOW), and the files API creates
 * as the host's root, which the sandbox's namespace does not map. Inside, the two behave as
 * bwrap's did (modes 1777 and 0755, the sandbox's root's, nosuid, nodev, gone with the holder). */
export function volatileBinds(volatile?: string): string[] {
  if (volatile) return ["--bind", join(volatile, "shm"), "/dev/shm", "--bind", join(volatile, "run"), "/run"];
  // Shared memory (Python multiprocessing, Chromium) must be writable by `user`.
  return ["--perms", "1777", "--tmpfs", "/dev/shm", "--perms", "0755", "--tmpfs", "/run"];
}

/** bubblewrap arguments that build the sandbox's root view from the layout (`volatile`: see
 * volatileBinds). */
export function bwrapMountArgs(layout: SandboxLayout, volatile?: string): string[] {
  const args: string[] = [];
  for (const e of baseEntries()) {
    if (e.link) args.push("--symlink", e.link, `/${e.name}`);
    else args.push("--ro-bind", `/${e.name}`, `/${e.name}`);
  }
  args.push("--ro-bind", layout.etc, "/etc");
  for (const d of SHARED_ETC_DIRS) if (existsSync(`/etc/${d}`)) args.push("--ro-bind", `/etc/${d}`, `/etc/${d}`);
  args.push(
    // bwrap creates missing parents 0700; /home must be traversable by `user`.
    "--perms", "0755", "--dir", "/home",
    "--bind", join(layout.layer, "home/user"), "/home/user",
    "--bind", join(layout.layer, "root"), "/root",
    "--bind", join(layout.layer, "tmp"), "/tmp",
    "--proc", "/proc",
    "--dev", "/dev",
    // /run is needed before anything is bound below it (toolchain.md §10.21).
    ...volatileBinds(volatile),
    // bwrap's own root is a tmpfs: read-only, so that nothing (the runtime writing through
    // /proc/<holder>/root included) puts files outside the layer, in memory nobody accounts for.
    "--remount-ro", "/",
  );
  return args;
}
