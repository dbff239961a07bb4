// A disk of its own per sandbox: a sparse file formatted as ext4 and loop-mounted at
// `<dataDir>/sandboxes/<id>/disk`, holding everything the sandbox can write (its writable layer
// and its /etc). Its size is the template's `diskSizeMB`, so a sandbox that fills it gets ENOSPC
// inside and the host's free space loses at most that much. The same file system is what a
// writable root (overlayfs) will keep its upper and work directories on.
//
// Why one image per sandbox rather than one shared image with project quotas: destroy is an
// unmount and one unlink whatever the sandbox wrote; a snapshot or fork can later copy one file;
// inodes and metadata are the sandbox's own (a shared file system's inodes or journal are one
// pool any sandbox can exhaust); and it needs no quota tools, only root, loop devices and
// mkfs.ext4. The cost is one mkfs and one mount per create (`node bench/local.ts --disk`), run
// through the spawner so the agent's event loop never waits on it, and taken off the create path
// altogether by disks made ahead (spare-disks.ts).
import { spawnSync } from "node:child_process";
import { closeSync, existsSync, ftruncateSync, mkdirSync, mkdtempSync, openSync, readFileSync, readSync, rmSync, statSync, statfsSync, writeFileSync } from "node:fs";
import { rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import type { LaunchedExit } from "../../runtime/process/launcher.ts";
import { helperEnv } from "./host-helpers.ts";
import type { Spawner } from "./spawner.ts";

/** What the host allows: `quota` (a disk per sandbox) or `none` (sandboxes write into the data
 * directory without a limit). */
export type DiskLevel = "quota" | "none";

const ENV = helperEnv();
/** No root reservation (root inside gets no more room than `user`); inode tables and the journal
 * are initialised lazily by the kernel, so formatting writes ~1 MB whatever the size. */
const MKFS = ["mkfs.ext4", "-q", "-F", "-m", "0", "-E", "nodiscard,lazy_itable_init=1,lazy_journal_init=1"];
/** Nothing on a sandbox's disk is a device or set-uid for the host; its inode tables are not
 * zeroed in the background (checksummed group descriptors say which are unused). */
export const MOUNT_OPTIONS = "loop,nosuid,nodev,noinit_itable";
/** `mount`'s arguments for a sandbox's image: always ext4 (mkfs.ext4 made it), so said rather than
 * probed. Without `-t`, libmount and blkid read the image to guess its type: ~2.5 ms more CPU per
 * mount here (20 mount + umount pairs, interleaved, load 5.9), and bytes a sandbox wrote into its
 * image are never read by a probe. */
export const MOUNT_ARGS = ["-t", "ext4", "-o", MOUNT_OPTIONS];
/** Smallest disk: ext4 needs room for its own metadata and journal. */
export const MIN_DISK_MB = 8;

/** Formats the sparse file `$1.new` the caller made, renames it to the image and mounts that at
 * `$2` (which exists): renamed only once formatted, so an image that exists is always formatted.
 * The arguments after those two are mkfs's (`-N <inodes>`). The shell gets paths and numbers the
 * driver made, never tenant bytes. The file and the mount point are made
 * by the caller's own syscalls and the mount is exec'd: a `truncate` and a `mkdir` process and
 * the shell's fork fewer per disk (each exec costs ~1 ms of CPU). */
const CREATE = `set -e; img=$1; at=$2; shift 2; ${MKFS.join(" ")} "$@" "$img.new"; mv "$img.new" "$img"; exec mount ${MOUNT_ARGS.join(" ")} "$img" "$at"`;

/** The sparse file CREATE formats (`<image>.new`, replaced if a failed create left one). */
function sparseFile(image: string, sizeMB: number): void {
  const fd = openSync(`${image}.new`, "w", 0o600);
  try {
    ftruncateSync(fd, sizeMB * 1024 * 1024);
  } finally {
    closeSync(fd);
  }
}

/** Makes the sparse file of a new image of `sizeMB` and answers the command that formats it and
 * mounts it at `at` (which exists): CREATE, for the caller's way of running a helper (the
 * spawner's for a sandbox's disk, the builder's own for a build step's). `inodes`: at least that
 * many files fit (ext4 rounds up to fill its inode tables), by default one per 16 KiB. */
export function newDiskCommand(image: string, at: string, sizeMB: number, inodes?: number): string[] {
  sparseFile(image, sizeMB);
  return ["/bin/sh", "-c", CREATE, "sh", image, at, ...(inodes !== undefined ? ["-N", String(Math.floor(inodes))] : [])];
}

/** Whether `at` is a mount point (its device differs from its parent's). */
export function isMounted(at: string): boolean {
  try {
    // Missing (a new sandbox's root) is an answer, not an error: no exception made for it.
    const st = statSync(at, { throwIfNoEntry: false });
    return st !== undefined && st.dev !== statSync(dirname(at)).dev;
  } catch {
    return false;
  }
}

let probed: { level: DiskLevel; reason?: string } | undefined;

/** Tries the whole path once per process (format, loop-mount, write, unmount) in a scratch
 * directory: ~20 ms on a quiet machine, and the host does not change between drivers. */
export function probeDisk(): { level: DiskLevel; reason?: string } {
  probed ??= probeOnce();
  return probed;
}

function probeOnce(): { level: DiskLevel; reason?: string } {
  if (process.getuid?.() !== 0) return { level: "none", reason: "the agent is not root (loop mounts need root)" };
  if (!existsSync("/dev/loop-control")) return { level: "none", reason: "no loop devices (/dev/loop-control is missing: modprobe loop)" };
  if (!/\text4$/m.test(readOrEmpty("/proc/filesystems"))) return { level: "none", reason: "the kernel has no ext4" };
  const dir = mkdtempSync(join(tmpdir(), "kruise-disk-probe-"));
  try {
    const image = join(dir, "probe.img");
    sparseFile(image, MIN_DISK_MB);
    mkdirSync(join(dir, "m"));
    const r = spawnSync("/bin/sh", ["-c", CREATE, "sh", image, join(dir, "m")], { env: ENV, encoding: "utf8", timeout: 20_000 });
    if (r.error || r.status !== 0) {
      const why = r.error?.message ?? (r.stderr.trim() || `exit ${r.status}`);
      return { level: "none", reason: `cannot format and loop-mount an ext4 image: ${why} (needs e2fsprogs' mkfs.ext4 and util-linux' mount)` };
    }
    try {
      writeFileSync(join(dir, "m", "probe"), "ok");
    } finally {
      spawnSync("umount", [join(dir, "m")], { env: ENV, timeout: 20_000 });
    }
    return { level: "quota" };
  } catch (err) {
    return { level: "none", reason: `loop-mounted ext4 image: ${(err as Error).message}` };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function readOrEmpty(file: string): string {
  try {
    return readFileSync(file, "utf8");
  } catch {
    return "";
  }
}

/** Runs a helper to its end through the spawner (not forked from the agent: see spawner.ts). Its
 * stderr goes to a file the spawner opens for it, read only when it fails: a pipe would take one of
 * the spawner's pooled connections (a connect and an accept to refill it, and the stream's events)
 * for what is nearly always nothing. */
export async function runHelper(spawner: Spawner, args: string[], cwd = "/"): Promise<void> {
  const { exit, stderr } = await helperExit(spawner, args, cwd);
  if (exit.error || exit.code !== 0) throw new Error(`${args[0] === "/bin/sh" ? "sh" : args[0]}: ${exit.error ?? (stderr.trim() || `exit ${exit.code ?? exit.signal}`)}`);
}

/** The same, answering how it ended (and the first 2000 bytes of its stderr when that was not
 * exit 0) for a caller that tells its exit codes apart. */
export async function helperExit(spawner: Spawner, args: string[], cwd = "/"): Promise<{ exit: LaunchedExit; stderr: string }> {
  const errFile = spawner.scratchFile("helper-stderr");
  try {
    const child = await spawner.spawn({ file: args[0]!, args: args.slice(1), cwd, env: ENV }, { detached: false, stdio: ["ignore", "ignore", { append: errFile }] });
    const exit = await new Promise<LaunchedExit>((ok) => child.onExit(ok));
    return { exit, stderr: exit.error || exit.code !== 0 ? head(errFile, 2000) : "" };
  } finally {
    rmSync(errFile, { force: true });
  }
}

/** The first `max` bytes of a file, as text ("" when there is none). */
function head(file: string, max: number): string {
  let fd: number;
  try {
    fd = openSync(file, "r");
  } catch {
    return "";
  }
  try {
    const buf = Buffer.alloc(max);
    return buf.subarray(0, readSync(fd, buf, 0, max, 0)).toString("utf8");
  } finally {
    closeSync(fd);
  }
}

/** Mounts the sandbox's image at `at`, formatting a new one of `sizeMB` first when there is none.
 * Idempotent: a mounted disk is left as it is (an agent restart finds it mounted). */
export async function mountDisk(spawner: Spawner, image: string, at: string, sizeMB: number): Promise<void> {
  if (isMounted(at)) return;
  mkdirSync(at, { recursive: true });
  if (existsSync(image)) return runHelper(spawner, ["mount", ...MOUNT_ARGS, image, at]);
  const mb = Math.max(MIN_DISK_MB, Math.ceil(sizeMB));
  // Disks are sparse, so together they may promise more than the host has; one that could fill
  // the host on its own is refused.
  const st = statfsSync(dirname(image));
  const freeMB = Math.floor((st.bavail * st.bsize) / (1024 * 1024));
  if (mb > freeMB) throw new Error(`a disk of ${mb} MB is larger than the ${freeMB} MB free on the host`);
  await runHelper(spawner, newDiskCommand(image, at, mb));
}

/** Unmounts the disk at `at` (the loop device goes with it: mount sets autoclear). A disk still
 * busy (a file the runtime holds open) is detached lazily: gone from the host's tree at once, its
 * loop device freed when the last file closes. */
export async function unmountDisk(spawner: Spawner, at: string): Promise<void> {
  if (!isMounted(at)) return;
  try {
    await runHelper(spawner, ["umount", at]);
  } catch {
    if (isMounted(at)) await runHelper(spawner, ["umount", "-l", at]);
  }
}

/** Unmounts the disk at `<dir>/disk` and deletes `dir` (a spare disk, a snapshot's copy made
 * ahead); never deletes through a mount, so a disk that will not unmount keeps its directory. */
export async function removeDiskDir(spawner: Spawner, dir: string): Promise<void> {
  const disk = join(dir, "disk");
  try {
    await unmountDisk(spawner, disk);
  } catch {
    return;
  }
  if (!isMounted(disk)) await rm(dir, { recursive: true, force: true }).catch(() => {});
}

/** The same, synchronously, for what a previous agent left in the trash (at start, rarely). */
export function unmountDiskSync(at: string): void {
  if (!isMounted(at)) return;
  const r = spawnSync("umount", [at], { env: ENV, timeout: 20_000 });
  if (r.status !== 0 && isMounted(at)) spawnSync("umount", ["-l", at], { env: ENV, timeout: 20_000 });
}
