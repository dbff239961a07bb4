// Snapshots of a sandbox's private writable state, kept under `<dataDir>/snapshots/<id>/`:
//   disk.img     a copy of the sandbox's disk image (disk.ts), when it has one: its writable
//                layer and /etc, whatever layout sits on that file system (so a writable root's
//                overlay upper directory on the same disk is captured the same way);
//   layer/       otherwise (`KRUISE_LOCAL_DISK=off`), a copy of its layer directory;
//   meta.json    written last: a directory without it is a snapshot being taken.
// A snapshot is made in `<id>.partial/` and renamed into place, so a half-made one is never used
// and a restarted agent deletes what an interrupted copy left (a `layer/` is a tree the tenant
// shaped: deleted by remove-tree.ts, at any depth, never through a link).
//
// Consistency: the caller freezes the sandbox's cgroup; for a mounted disk the copy also runs
// under `fsfreeze`, which flushes the file system and its journal to the image and holds every
// writer (the runtime writing on the sandbox's behalf included) until the copy is done, so the
// copy is a clean ext4 that mounts without recovery. The whole step is one shell run through the
// spawner, so the file system is thawed (trap) even if the agent dies meanwhile.
// Copies are sparse (`cp --sparse=always`: only data extents are read and written) and use a
// reflink where the host's file system has them (`--reflink=auto`; this host's ext4 has not, so
// the cost is the bytes the sandbox wrote: `local.snapshot_ms_per_100mb_changed`).
import { existsSync, mkdirSync, readFileSync, readdirSync, renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { TerminalError } from "../driver.ts";
import { isMounted, MOUNT_ARGS, runHelper } from "./disk.ts";
import { SnapshotCopies } from "./snapshot-copies.ts";
import type { Spawner } from "./spawner.ts";
import type { RootRecord } from "./root-overlay.ts";
import type { IdMapping } from "./id-map.ts";
import { treeSize } from "./rootfs/tree-size.ts";
import { removeTree } from "./remove-tree.ts";

/** Snapshot ids name directories: the edge makes them, the driver still refuses anything else. */
const SNAPSHOT_ID = /^[a-z0-9][a-z0-9_-]{0,63}$/;
const COPY = "cp --sparse=always --reflink=auto";
/** $1 image, $2 its mount point, $3 destination. The trap thaws on every exit, an error's too. */
const COPY_MOUNTED = `set -e; fsfreeze -f "$2"; trap 'fsfreeze -u "$2"' EXIT; ${COPY} "$1" "$3"`;
/** $1 source, $2 destination (a file, or a directory copied with owners, modes, links, xattrs). */
const COPY_FILE = `set -e; ${COPY} "$1" "$2"`;
const COPY_TREE = `set -e; mkdir -p "$2"; cp -a --sparse=always --reflink=auto "$1/." "$2/"`;
/** $1 snapshot image, $2 the new sandbox's image, $3 where it is mounted: one helper run, not two. */
const COPY_AND_MOUNT = `set -e; ${COPY} "$1" "$2.new"; mv "$2.new" "$2"; mkdir -p "$3"; mount ${MOUNT_ARGS.join(" ")} "$2" "$3"`;
/** $1 layer: empties its directories (bind-mounted into a running sandbox: emptied, never replaced). */
const EMPTY_LAYER = `set -e; for d in home/user root tmp; do mkdir -p "$1/$d"; find "$1/$d" -mindepth 1 -maxdepth 1 -exec rm -rf {} +; done`;
/** $1 a root's upper directory: emptied whole. */
const EMPTY_UPPER = `set -e; mkdir -p "$1"; find "$1" -mindepth 1 -maxdepth 1 -exec rm -rf {} +`;

export interface SnapshotMeta {
  id: string;
  sandboxId: string;
  /** `disk`: disk.img holds it; `layer`: the layer directory does. */
  kind: "disk" | "layer";
  /** The image's size (a sandbox made from it gets a disk of this size). */
  sizeMB?: number;
  /** Bytes the snapshot takes on the host (allocated, not apparent). */
  bytes: number;
  createdAt: string;
  /** The source's own root (root-overlay.ts): what it holds is that overlay's upper directory
   * over exactly these layers, so a sandbox made from it mounts the same ones. Absent: the
   * source had the host view, and its layer directories are what it holds. */
  root?: RootRecord;
  /** The source's id range (uid-range.ts): the host ids its files carry; absent: host ids. */
  userns?: IdMapping;
}

/** What a sandbox holds that a snapshot copies: its disk, or its layer directory. */
export type SnapshotSource = { kind: "disk"; image: string; mountedAt: string; sizeMB: number } | { kind: "layer"; layer: string };

export class LocalSnapshots {
  readonly #dir: string;
  readonly #spawner: Spawner;
  readonly #copies: SnapshotCopies;
  /** What an interrupted copy left, being deleted. */
  readonly #leftovers: Promise<void>;

  constructor(dataDir: string, spawner: Spawner) {
    this.#dir = join(dataDir, "snapshots");
    this.#spawner = spawner;
    this.#copies = new SnapshotCopies(dataDir, spawner, (id, image, at) => this.copyImage(this.need(id), image, at));
    mkdirSync(this.#dir, { recursive: true });
    // What an interrupted copy left; older tar snapshots are not this driver's format any more.
    const leftovers = readdirSync(this.#dir).filter((name) => name.endsWith(".partial") || name.endsWith(".tar"));
    this.#leftovers = removeTree(leftovers.map((name) => join(this.#dir, name)), spawner).catch((err: Error) => console.warn(`snapshot leftovers: ${err.message}`));
  }

  /** Where a snapshot lives (it may not exist). */
  path(id: string): string {
    if (!SNAPSHOT_ID.test(id)) throw new TerminalError("InvalidSnapshot", `invalid snapshot id ${JSON.stringify(id.slice(0, 80))}`);
    return join(this.#dir, id);
  }

  meta(id: string): SnapshotMeta | undefined {
    try {
      return JSON.parse(readFileSync(join(this.path(id), "meta.json"), "utf8")) as SnapshotMeta;
    } catch {
      return undefined;
    }
  }

  /** Copies `source` into snapshot `id`. Idempotent: a snapshot that exists is returned as it is
   * (an agent restarted after the copy, the intent redelivered). The caller has frozen the sandbox. */
  async take(id: string, sandboxId: string, source: SnapshotSource, root?: RootRecord, userns?: IdMapping): Promise<SnapshotMeta> {
    const done = this.meta(id);
    if (done) return done;
    const final = this.path(id);
    const partial = `${final}.partial`;
    try {
      await removeTree([partial], this.#spawner);
      mkdirSync(partial, { recursive: true });
      if (source.kind === "disk") {
        const dest = join(partial, "disk.img");
        if (isMounted(source.mountedAt)) await this.#sh(COPY_MOUNTED, source.image, source.mountedAt, dest);
        else await this.#sh(COPY_FILE, source.image, dest);
      } else {
        await this.#sh(COPY_TREE, source.layer, join(partial, "layer"));
      }
      const meta: SnapshotMeta = {
        id,
        sandboxId,
        kind: source.kind,
        ...(source.kind === "disk" ? { sizeMB: source.sizeMB } : {}),
        // Off the event loop and without following links: a layer's links are the tenant's (one to
        // `/` walked the host's tree as root, on the agent's thread).
        bytes: (await treeSize(partial)).bytes,
        createdAt: new Date().toISOString(),
        ...(root ? { root } : {}),
        ...(userns ? { userns } : {}),
      };
      writeFileSync(join(partial, "meta.json"), JSON.stringify(meta));
      // Freed before it was done (the edge gave up waiting and let its slot go): published, it
      // would be a copy no row names, never freed and counted in no bound.
      if (this.#freed.has(id)) throw new Error(`snapshot ${id} was freed while it was being taken`);
      renameSync(partial, final);
      return meta;
    } catch (err) {
      await removeTree([partial], this.#spawner).catch(() => {});
      throw err;
    }
  }
  /** Ids freed lately, so a copy still under way is not published after its free (ids are never
   * reused; the newest 1024 kept). */
  readonly #freed = new Set<string>();

  /** The snapshot, or a terminal error naming it: a sandbox cannot be made from what is gone. */
  need(id: string): SnapshotMeta {
    const meta = this.meta(id);
    if (!meta) throw new TerminalError("SnapshotNotFound", `snapshot ${id} does not exist on this agent`);
    return meta;
  }

  /** Moves a copy of the snapshot's disk made ahead to `dir` (a new sandbox's directory, which
   * must not exist), mounted; false when none is ready (copyImage then). Either way the next
   * sandbox from it will find one. */
  takeCopy(meta: SnapshotMeta, dir: string): boolean {
    return this.#copies.take(meta.id, dir);
  }

  /** Releases the copies made ahead (the driver stops), once the leftovers' deletion (through the
   * spawner, which goes with the driver) is done. */
  async dispose(): Promise<void> {
    await this.#leftovers;
    return this.#copies.dispose();
  }

  /** A new sandbox's disk image starts as a copy of the snapshot's, mounted at `at`. */
  async copyImage(meta: SnapshotMeta, image: string, at: string): Promise<void> {
    await this.#sh(COPY_AND_MOUNT, join(this.path(meta.id), "disk.img"), image, at);
  }

  /** Replaces the contents of `layer` (mounted or not) with the snapshot's layer. */
  async fillLayer(meta: SnapshotMeta, layer: string): Promise<void> {
    // A root's upper directory is emptied whole (its top-level directories would otherwise hide
    // the template's own); the host view's layer directories are bind-mounted: emptied, kept.
    await this.#sh(meta.root ? EMPTY_UPPER : EMPTY_LAYER, layer);
    if (meta.kind === "layer") return this.#sh(COPY_TREE, join(this.path(meta.id), "layer"), layer);
    // A disk snapshot's layer is inside its image: a scratch copy is mounted to read it (the
    // snapshot itself is never mounted, so nothing can change it).
    const scratch = join(this.#dir, `${meta.id}.${process.pid}.${Date.now()}.partial`);
    mkdirSync(join(scratch, "m"), { recursive: true });
    try {
      await this.copyImage(meta, join(scratch, "disk.img"), join(scratch, "m"));
      try {
        await this.#sh(COPY_TREE, join(scratch, "m", meta.root ? "upper" : "layer"), layer);
      } finally {
        await runHelper(this.#spawner, ["umount", join(scratch, "m")]);
      }
    } finally {
      if (!isMounted(join(scratch, "m"))) await removeTree([scratch], this.#spawner);
    }
  }

  /** Frees a snapshot; sandboxes made from it have their own copies. Unknown ids are fine. */
  async delete(id: string): Promise<void> {
    const path = this.path(id);
    this.#copies.drop(id);
    this.#freed.add(id);
    if (this.#freed.size > 1024) this.#freed.delete(this.#freed.values().next().value!);
    const trash = `${path}.${process.pid}.deleting.partial`;
    try {
      renameSync(path, trash);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") return;
      throw err;
    }
    await removeTree([trash], this.#spawner);
  }

  /** Every complete snapshot on this agent. */
  ids(): string[] {
    return readdirSync(this.#dir).filter((n) => SNAPSHOT_ID.test(n) && existsSync(join(this.#dir, n, "meta.json")));
  }

  #sh(script: string, ...args: string[]): Promise<void> {
    return runHelper(this.#spawner, ["/bin/sh", "-c", script, "sh", ...args]);
  }
}

