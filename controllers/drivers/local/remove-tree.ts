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
import { runHelper } from "./disk.ts";
import { helperEnv } from "./host-helpers.ts";
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
