// Deleting a tree a tenant shaped, as the host's root: a build step's layer or staging directory,
// a sandbox's directory in the trash (its writable layer, without a disk), a snapshot. The tenant
// chose its depth, its entry count, its names and its links. Node's own recursive deletes fail on
// such trees (`rmSync` recurses on the JavaScript stack: "Maximum call stack size exceeded" at a
// depth of about 1800; `fs.promises.rm` builds whole paths: ENAMETOOLONG past PATH_MAX, the tree
// left in place) and `rmSync` runs on the agent's event loop whatever the entry count (a layer
// holds up to a step disk's inodes). GNU `rm -rf` walks with fts and openat at any depth, never
// follows a link, and skips a directory on another file system (`--one-file-system`; a mount point
// named as the path itself is refused: `--preserve-root=all`). A bind or ID-mapped mount of the
// same file system looks like a plain directory to it: every caller unmounts what it mounted
// under the path first. It runs in a process of its own with a fixed environment, so the event
// loop only waits for its exit.
import { execFile } from "node:child_process";
import { lstatSync } from "node:fs";
import { helperExit, runHelper } from "./disk.ts";
import { PERL, helperEnv } from "./host-helpers.ts";
import type { Spawner } from "./spawner.ts";

const RM = ["rm", "-rf", "--one-file-system", "--preserve-root=all", "--"];

/**
 * Removes each of `paths` (absolute, driver-made: what is below them is the tenant's) and
 * everything under it; a missing one is fine. Rejects, naming what rm said, when any of them
 * could not go whole (something mounted inside it, a busy mount point): the caller decides
 * whether that stops it. Through the spawner when the caller has one (no fork of the agent: see
 * spawner.ts), else a child of this process.
 */
export async function removeTree(paths: string[], spawner?: Spawner): Promise<void> {
  for (const p of paths) if (!p.startsWith("/")) throw new Error(`removeTree: ${JSON.stringify(p)} is not an absolute path`);
  // No process for what is not there (most calls clear a leftover that is usually absent: one
  // runs inside a snapshot's freeze); what `rm -f` would have said of it is nothing either.
  const present = paths.filter((p) => lstatSync(p, { throwIfNoEntry: false }) !== undefined);
  if (!present.length) return;
  if (spawner) return runHelper(spawner, [...RM, ...present]);
  await new Promise<void>((ok, fail) =>
    execFile(RM[0]!, [...RM.slice(1), ...present], { env: helperEnv(), cwd: "/", maxBuffer: 1 << 20 }, (err, _out, stderr) => (err ? fail(new Error(`rm: ${String(stderr).trim().slice(0, 2000) || err.message}`)) : ok())),
  );
}

/** Unmounts each target (umount2, in the order given), moves one file aside (a rename: when it
 * fails, the rm takes the file), then becomes `rm` on the directory: at the first target that will
 * not unmount it says why and exits 64 with nothing removed or moved. Paths and a number, all the
 * driver's, as arguments (perl runs with the helpers' fixed environment). */
const UNMOUNT_THEN_RM = `my ($nr, $dir, $from, $to, @at) = @ARGV;
for (@at) { next if syscall($nr, $_, 0) == 0; print STDERR "umount $_: $!\\n"; exit 64 }
rename $from, $to if length $from;
exec "${RM[0]}", ${RM.slice(1).map((a) => `"${a}"`).join(", ")}, $dir; print STDERR "rm: $!\\n"; exit 65`;

/**
 * A sandbox's destroy as one process where it was two (a `umount`, then an `rm` of its directory):
 * each spawn is a fork of the ~60 MB spawner (spawner.ts), and this one has no `umount` process
 * either (perl's umount2, then an exec of rm). `targets`: every mount under `dir`, in the order
 * they unmount (each is in use by the one before); `umount2`: the syscall's number on this CPU
 * (host-helpers.ts); `aside`: a file below `dir` and where it goes instead of being deleted (the same
 * file system: a rename), after the unmounts. Answers:
 * - "removed": all unmounted and `dir` gone;
 * - "not-unmounted": a target would not unmount (busy); nothing was removed, and the targets before
 *   it are unmounted: the caller unmounts what is left its own way (it must not remove `dir` before);
 * - "not-removed": all unmounted (and `aside` moved), but `dir` could not go whole, by rm or
 *   because rm did not start (the caller removes what is left).
 */
export async function unmountThenRemove(spawner: Spawner, dir: string, targets: string[], umount2: number, aside?: { from: string; to: string }): Promise<{ done: "removed" | "not-unmounted" | "not-removed"; why: string }> {
  for (const p of [dir, ...targets, ...(aside ? [aside.from, aside.to] : [])]) if (!p.startsWith("/")) throw new Error(`unmountThenRemove: ${JSON.stringify(p)} is not an absolute path`);
  const { exit, stderr } = await helperExit(spawner, [PERL, "-e", UNMOUNT_THEN_RM, "--", String(umount2), dir, aside?.from ?? "", aside?.to ?? "", ...targets]);
  const why = exit.error ?? (stderr.trim() || `exit ${exit.code ?? exit.signal}`);
  if (!exit.error && exit.code === 0) return { done: "removed", why: "" };
  // rm's own failure (1) and an exec of rm that failed (65) come after every unmount and the
  // rename: the image is in the trash. Anything else (perl that did not start, a signal) may have
  // stopped before an unmount: the caller's way, which checks each mount, decides.
  return { done: exit.code === 1 || exit.code === 65 ? "not-removed" : "not-unmounted", why };
}
