// Directory watching for WatchDir and the polling watchers. One inotify watch per directory
// (fs.watch, non-recursive), added for new subdirectories as they appear when recursive. Node
// reports only "rename" and "change"; classifyChange turns them back into envd's event types.
import { watch, type BigIntStats, type FSWatcher } from "node:fs";
import { lstat, readdir } from "node:fs/promises";
import { EventType } from "../../../schema/envd/gen/filesystem/filesystem_pb.js";
import type { Resolved } from "./resolve.ts";

export interface DirEvent {
  /** Relative to the watched directory ("sub/f.txt"). */
  name: string;
  type: EventType;
  hostPath: string;
}

/** "rename" means the name appeared or disappeared; "change" is a write unless only the inode
 * changed (a write sets ctime and mtime to the same instant, chmod/chown move ctime alone). */
export function classifyChange(kind: "rename" | "change", st: Pick<BigIntStats, "ctimeNs" | "mtimeNs"> | undefined): EventType {
  if (kind === "rename") return st ? EventType.CREATE : EventType.REMOVE;
  if (!st) return EventType.REMOVE;
  return st.ctimeNs === st.mtimeNs ? EventType.WRITE : EventType.CHMOD;
}

export class DirWatcher {
  readonly root: string;
  readonly recursive: boolean;
  /** Buffered events for the polling API (GetWatcherEvents drains it). */
  readonly pending: DirEvent[] = [];
  /** Set for polling watchers: where the watch is and whether events carry entries. */
  resolved?: Resolved;
  includeEntry?: boolean;
  #watchers = new Map<string, FSWatcher>();
  #onEvent: (ev: DirEvent) => void;
  #closed = false;

  constructor(root: string, recursive: boolean, onEvent?: (ev: DirEvent) => void) {
    this.root = root;
    this.recursive = recursive;
    this.#onEvent = onEvent ?? ((ev) => this.pending.push(ev));
  }

  async start(): Promise<void> {
    this.#add(this.root, "");
    if (this.recursive) await this.#addTree(this.root, "");
  }

  async #addTree(dir: string, rel: string): Promise<void> {
    const entries = await readdir(dir, { withFileTypes: true }).catch(() => []);
    for (const e of entries) {
      if (!e.isDirectory()) continue;
      const childRel = rel ? `${rel}/${e.name}` : e.name;
      this.#add(`${dir}/${e.name}`, childRel);
      await this.#addTree(`${dir}/${e.name}`, childRel);
    }
  }

  #add(dir: string, rel: string): void {
    if (this.#closed || this.#watchers.has(dir)) return;
    let w: FSWatcher;
    try {
      w = watch(dir, { persistent: false }, (kind, filename) => {
        if (filename) void this.#handle(kind as "rename" | "change", dir, rel, filename.toString());
      });
    } catch (err) {
      if (dir === this.root) throw err;
      return;
    }
    w.on("error", () => this.#drop(dir));
    this.#watchers.set(dir, w);
  }

  #drop(dir: string): void {
    for (const [d, w] of this.#watchers) {
      if (d === dir || d.startsWith(`${dir}/`)) {
        w.close();
        this.#watchers.delete(d);
      }
    }
  }

  async #handle(kind: "rename" | "change", dir: string, rel: string, filename: string): Promise<void> {
    const hostPath = `${dir}/${filename}`;
    const st = await lstat(hostPath, { bigint: true }).catch(() => undefined);
    if (this.#closed) return;
    const type = classifyChange(kind, st);
    const name = rel ? `${rel}/${filename}` : filename;
    if (type === EventType.REMOVE) this.#drop(hostPath);
    this.#onEvent({ name, type, hostPath });
    if (type === EventType.CREATE && this.recursive && st?.isDirectory()) {
      this.#add(hostPath, name);
      await this.#addTree(hostPath, name);
    }
  }

  close(): void {
    this.#closed = true;
    for (const w of this.#watchers.values()) w.close();
    this.#watchers.clear();
  }
}
