// Directory watching for WatchDir and the polling watchers. One inotify watch per directory
// (fs.watch, non-recursive), added for new subdirectories as they appear when recursive. Node
// reports only "rename" and "change"; classifyChange turns them back into envd's event types.
// Directories are watched and looked into through fds opened without following a link, so a
// subdirectory swapped for `-> /etc` is neither watched nor statted on the host; only the root's
// fd is held for the watch's life.
import { closeSync, lstatSync, watch, type BigIntStats, type FSWatcher } from "node:fs";
import { readdir } from "node:fs/promises";
import { EventType } from "../../../schema/envd/gen/filesystem/filesystem_pb.js";
import { fdPath, openDirIn } from "../pinned-path.ts";
import type { Resolved } from "./resolve.ts";

export interface DirEvent {
  /** Relative to the watched directory ("sub/f.txt"). */
  name: string;
  type: EventType;
}

/** "rename" means the name appeared or disappeared; "change" is a write unless only the inode
 * changed (a write sets ctime and mtime to the same instant, chmod/chown move ctime alone). */
export function classifyChange(kind: "rename" | "change", st: Pick<BigIntStats, "ctimeNs" | "mtimeNs"> | undefined): EventType {
  if (kind === "rename") return st ? EventType.CREATE : EventType.REMOVE;
  if (!st) return EventType.REMOVE;
  return st.ctimeNs === st.mtimeNs ? EventType.WRITE : EventType.CHMOD;
}

/** Deepest subdirectory a recursive watch follows: a walk to a watched directory holds one fd per
 * level for its moment (a tenant's `mkdir a; cd a` chain must not hold the shared agent's fds). */
const MAX_WATCH_DEPTH = 64;

export class DirWatcher {
  readonly recursive: boolean;
  /** Buffered events for the polling API (GetWatcherEvents drains it). */
  readonly pending: DirEvent[] = [];
  /** Set for polling watchers: where the watch is and whether events carry entries. */
  resolved?: Resolved;
  includeEntry?: boolean;
  /** The watched directory's fd (O_PATH, opened without following a link: pinned-path.ts), the
   * only one held: a subdirectory is reached again from it, one name at a time, when one of its
   * events comes (the runtime's fds are every sandbox's: one held per watched directory would let
   * one tree of them exhaust the agent's). */
  readonly #root: number;
  /** Each watched directory's watch by its path below the root ("" the root). inotify watches the
   * inode, so its fd need not stay open. */
  #dirs = new Map<string, FSWatcher>();
  #onEvent: (ev: DirEvent) => void;
  #closed = false;

  /** `root`: an fd of the directory, which the watcher owns from here (close() closes it). */
  constructor(root: number, recursive: boolean, onEvent?: (ev: DirEvent) => void) {
    this.#root = root;
    this.recursive = recursive;
    this.#onEvent = onEvent ?? ((ev) => this.pending.push(ev));
  }

  async start(): Promise<void> {
    if (!this.#add(this.#root, "")) throw new Error("watcher closed");
    if (this.recursive) await this.#addTree(this.#root, "");
  }

  /** Watches the subdirectories below `fd` (the directory at `rel`), each while its fd is open. */
  async #addTree(fd: number, rel: string): Promise<void> {
    const w = this.#dirs.get(rel);
    if (rel.split("/").length >= MAX_WATCH_DEPTH) return;
    const entries = await readdir(fdPath(fd), { withFileTypes: true }).catch(() => []);
    for (const e of entries) {
      // The same watch as before the await, or this directory is gone (and `fd`, the caller's,
      // is closed only after this returns).
      if (this.#closed || this.#dirs.get(rel) !== w || !e.isDirectory()) continue;
      const childRel = rel ? `${rel}/${e.name}` : e.name;
      let child: number;
      try {
        child = openDirIn(fdPath(fd), e.name);
      } catch {
        continue; // gone, or swapped for a link, since the listing
      }
      try {
        if (this.#add(child, childRel)) await this.#addTree(child, childRel);
      } finally {
        closeSync(child);
      }
    }
  }

  /** Watches the directory `fd` (the caller's, left open) as `rel`. */
  #add(fd: number, rel: string): boolean {
    if (this.#closed || this.#dirs.has(rel)) return false;
    let w: FSWatcher;
    try {
      w = watch(fdPath(fd), { persistent: false }, (kind, filename) => {
        if (filename) this.#handle(kind as "rename" | "change", rel, filename.toString());
      });
    } catch (err) {
      if (rel === "") throw err;
      return false;
    }
    w.on("error", () => this.#drop(rel));
    this.#dirs.set(rel, w);
    return true;
  }

  #drop(rel: string): void {
    for (const [r, w] of this.#dirs) {
      if (r === rel || r.startsWith(`${rel}/`)) {
        w.close();
        this.#dirs.delete(r);
      }
    }
  }

  /** The watched directory at `rel`, opened again from the root one name at a time (undefined:
   * gone, or a link there now). The caller closes it. */
  #open(rel: string): number | undefined {
    if (rel === "") return undefined;
    let fd: number | undefined;
    try {
      for (const name of rel.split("/")) {
        const next = openDirIn(fdPath(fd ?? this.#root), name);
        if (fd !== undefined) closeSync(fd);
        fd = next;
      }
      return fd;
    } catch {
      if (fd !== undefined) closeSync(fd);
      return undefined;
    }
  }

  #handle(kind: "rename" | "change", rel: string, filename: string): void {
    if (this.#closed || !this.#dirs.has(rel)) return;
    const opened = this.#open(rel);
    if (rel !== "" && opened === undefined) return;
    const dir = opened ?? this.#root;
    try {
      let st: BigIntStats | undefined;
      try {
        st = lstatSync(`${fdPath(dir)}/${filename}`, { bigint: true, throwIfNoEntry: false });
      } catch {
        st = undefined;
      }
      const type = classifyChange(kind, st);
      const name = rel ? `${rel}/${filename}` : filename;
      if (type === EventType.REMOVE) this.#drop(name);
      this.#onEvent({ name, type });
      if (type === EventType.CREATE && this.recursive && st?.isDirectory()) {
        let child: number;
        try {
          child = openDirIn(fdPath(dir), filename);
        } catch {
          return;
        }
        if (!this.#add(child, name)) return closeSync(child);
        void this.#addTree(child, name).finally(() => closeSync(child));
      }
    } finally {
      if (opened !== undefined) closeSync(opened);
    }
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    for (const w of this.#dirs.values()) w.close();
    this.#dirs.clear();
    closeSync(this.#root);
  }
}
