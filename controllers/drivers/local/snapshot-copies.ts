// Copies of a snapshot's disk made ahead, so the next sandbox from it takes one with a rename
// instead of waiting for the copy and the mount (the bulk of a create from a snapshot: the copy is
// the bytes the sandbox wrote, the mount a loop device and an ext4 journal to read). A copy is a
// directory `<dataDir>/snapshot-copies/<snapshot>-<random>/` holding `disk.img` mounted at
// `disk/`: what a sandbox directory holds, as spare disks are (spare-disks.ts). One copy per
// snapshot used recently, made in the background after a create from it; dropped when the
// snapshot is deleted, when the driver stops, and at start (a copy is cheap to make again).
import { randomBytes } from "node:crypto";
import { mkdirSync, readdirSync, renameSync } from "node:fs";
import { rm } from "node:fs/promises";
import { join } from "node:path";
import { isMounted, removeDiskDir, unmountDiskSync } from "./disk.ts";
import type { Spawner } from "./spawner.ts";

/** Snapshots with a copy kept at once (the most recently used). */
const MAX_SNAPSHOTS = 4;

export class SnapshotCopies {
  readonly #dir: string;
  readonly #spawner: Spawner;
  /** Makes a copy of snapshot `id` at `image`, mounted at `at`. */
  readonly #make: (id: string, image: string, at: string) => Promise<void>;
  readonly #ready = new Map<string, string>();
  #wanted: string[] = [];
  #filling: Promise<void> | undefined;
  #disposed = false;

  constructor(dataDir: string, spawner: Spawner, make: (id: string, image: string, at: string) => Promise<void>) {
    this.#dir = join(dataDir, "snapshot-copies");
    this.#spawner = spawner;
    this.#make = make;
    mkdirSync(this.#dir, { recursive: true });
    for (const name of readdirSync(this.#dir)) {
      unmountDiskSync(join(this.#dir, name, "disk"));
      void rm(join(this.#dir, name), { recursive: true, force: true }).catch(() => {});
    }
  }

  /** Moves a ready copy of snapshot `id` to `dir` (which must not exist), mounted; false when
   * none is ready. Either way the next copy is made in the background. */
  take(id: string, dir: string): boolean {
    this.#wanted = [...this.#wanted.filter((s) => s !== id), id];
    for (const old of this.#wanted.splice(0, Math.max(0, this.#wanted.length - MAX_SNAPSHOTS))) this.drop(old);
    const copy = this.#ready.get(id);
    this.#ready.delete(id);
    const took = copy !== undefined && isMounted(join(copy, "disk"));
    if (took) renameSync(copy, dir);
    else if (copy) void this.#discard(copy);
    this.#fill();
    return took;
  }

  /** Forgets snapshot `id` (deleted): its copy is unmounted and removed. */
  drop(id: string): void {
    this.#wanted = this.#wanted.filter((s) => s !== id);
    const copy = this.#ready.get(id);
    this.#ready.delete(id);
    if (copy) void this.#discard(copy);
  }

  #fill(): void {
    if (this.#filling || this.#disposed) return;
    const id = [...this.#wanted].reverse().find((s) => !this.#ready.has(s));
    if (id === undefined) return;
    const tmp = join(this.#dir, `${id}-${randomBytes(6).toString("hex")}`);
    mkdirSync(tmp);
    this.#filling = this.#make(id, join(tmp, "disk.img"), join(tmp, "disk"))
      .then(() => {
        if (this.#disposed || !this.#wanted.includes(id)) return this.#discard(tmp);
        this.#ready.set(id, tmp);
      })
      .catch(async (err: Error) => {
        console.warn(`local driver: cannot copy snapshot ${id} ahead: ${err.message}`);
        this.#wanted = this.#wanted.filter((s) => s !== id);
        await this.#discard(tmp);
      })
      .finally(() => {
        this.#filling = undefined;
        this.#fill();
      });
  }

  /** Releases every copy (unmounted and deleted), the one being made included. */
  async dispose(): Promise<void> {
    this.#disposed = true;
    await this.#filling;
    const all = [...this.#ready.values()];
    this.#ready.clear();
    await Promise.all(all.map((c) => this.#discard(c)));
  }

  #discard(path: string): Promise<void> {
    return removeDiskDir(this.#spawner, path);
  }
}
