// Directory watching for WatchDir and the polling watchers. One inotify watch per directory
// (fs.watch, non-recursive), added for new subdirectories as they appear when recursive. Node
// reports only "rename" and "change"; classifyChange turns them back into envd's event types.
// Directories are watched and looked into through fds opened without following a link, so a
// subdirectory swapped for `-> /etc` is neither watched nor statted on the host.
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

export class DirWatcher {
  readonly recursive: boolean;
  /** Buffered events for the polling API (GetWatcherEvents drains it). */
  readonly pending: DirEvent[] = [];
  /** Set for polling watchers: where the watch is and whether events carry entries. */
  resolved?: Resolved;
  includeEntry?: boolean;
  /** Each watched directory by its path below the root ("" the root): its fd (O_PATH, opened
   * without following a link: pinned-path.ts) and its watch. */
  #dirs = new Map<string, { fd: number; w?: FSWatcher }>();
  #onEvent: (ev: DirEvent) => void;
  #closed = false;

  /** `root`: an fd of the directory, which the watcher owns from here (close() closes it). */
  constructor(root: number, recursive: boolean, onEvent?: (ev: DirEvent) => void) {
    this.#dirs.set("", { fd: root });
    this.recursive = recursive;
    this.#onEvent = onEvent ?? ((ev) => this.pending.push(ev));
  }

  async start(): Promise<void> {
    const root = this.#dirs.get("")!;
    this.#dirs.delete("");
    if (!this.#add(root.fd, "")) throw new Error("watcher closed");
    if (this.recursive) await this.#addTree(root.fd, "");
  }

  async #addTree(fd: number, rel: string): Promise<void> {
    const entries = await readdir(fdPath(fd), { withFileTypes: true }).catch(() => []);
    for (const e of entries) {
      if (!e.isDirectory() || !this.#dirs.has(rel)) continue;
      const childRel = rel ? `${rel}/${e.name}` : e.name;
      let child: number;
      try {
        child = openDirIn(fdPath(fd), e.name);
      } catch {
        continue; // gone, or swapped for a link, since the listing
      }
      if (this.#add(child, childRel)) await this.#addTree(child, childRel);
    }
  }

  /** Watches `fd` (owned from here: closed when not kept). */
  #add(fd: number, rel: string): boolean {
    if (this.#closed || this.#dirs.has(rel)) {
      closeSync(fd);
      return false;
    }
    let w: FSWatcher;
    try {
      w = watch(fdPath(fd), { persistent: false }, (kind, filename) => {
        if (filename) this.#handle(kind as "rename" | "change", rel, filename.toString());
      });
    } catch (err) {
      closeSync(fd);
      if (rel === "") throw err;
      return false;
    }
    w.on("error", () => this.#drop(rel));
    this.#dirs.set(rel, { fd, w });
    return true;
  }

  #drop(rel: string): void {
    for (const [r, d] of this.#dirs) {
      if (r === rel || r.startsWith(`${rel}/`)) {
        d.w?.close();
        closeSync(d.fd);
        this.#dirs.delete(r);
      }
    }
  }

  #handle(kind: "rename" | "change", rel: string, filename: string): void {
    const dir = this.#dirs.get(rel);
    if (this.#closed || !dir) return;
    // Synchronously, while the directory's fd is certainly this one (a closed fd's number is
    // soon another directory's, perhaps another sandbox's).
    let st: BigIntStats | undefined;
    try {
      st = lstatSync(`${fdPath(dir.fd)}/${filename}`, { bigint: true, throwIfNoEntry: false });
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
        child = openDirIn(fdPath(dir.fd), filename);
      } catch {
        return;
      }
      if (this.#add(child, name)) void this.#addTree(child, name);
    }
  }

  close(): void {
    this.#closed = true;
    for (const d of this.#dirs.values()) {
      d.w?.close();
      closeSync(d.fd);
    }
    this.#dirs.clear();
  }
}
