// Disks formatted and mounted ahead of need, so a create takes one with a rename instead of
// waiting for mkfs and mount (tens of ms on this machine, more under load). A spare is a
// directory `<dataDir>/spare-disks/<sizeMB>-<random>/` holding `disk.img` mounted at `disk/`:
// exactly what a sandbox directory holds, so taking one is `rename(spare, sandboxes/<id>)` (a
// mount below a renamed directory moves with it). Spares are made one at a time in the
// background after a size is asked for, through the spawner, and survive an agent restart like
// sandboxes do (the next driver takes over the ones still mounted).
import { randomBytes } from "node:crypto";
import { mkdirSync, readdirSync, renameSync } from "node:fs";
import { join } from "node:path";
import { isMounted, mountDisk, removeDiskDir } from "./disk.ts";
import type { Spawner } from "./spawner.ts";

/** Sizes kept in stock at once (the most recently asked for). */
const MAX_SIZES = 3;

export class SpareDisks {
  readonly #dir: string;
  readonly #spawner: Spawner;
  readonly #perSize: number;
  /** Ready spares by size, oldest first. */
  readonly #ready = new Map<number, string[]>();
  /** Sizes to keep in stock, least recently asked for first. */
  #sizes: number[] = [];
  /** The spare being made, if one is. */
  #filling: Promise<void> | undefined;
  #disposed = false;

  constructor(dataDir: string, spawner: Spawner, perSize: number) {
    this.#dir = join(dataDir, "spare-disks");
    this.#spawner = spawner;
    this.#perSize = perSize;
    mkdirSync(this.#dir, { recursive: true });
    for (const name of readdirSync(this.#dir)) {
      const path = join(this.#dir, name);
      const size = /^(\d+)-[0-9a-f]+$/.exec(name)?.[1];
      if (size && isMounted(join(path, "disk"))) this.#list(Number(size)).push(path);
      else void this.#discard(path);
    }
  }

  #list(sizeMB: number): string[] {
    let list = this.#ready.get(sizeMB);
    if (!list) this.#ready.set(sizeMB, (list = []));
    return list;
  }

  /** Moves a spare disk of `sizeMB` to `dir` (which must not exist), mounted, and starts making
   * the next one. False when none is ready: the caller formats one itself. */
  take(sizeMB: number, dir: string): boolean {
    this.#want(sizeMB);
    const list = this.#list(sizeMB);
    while (list.length) {
      const spare = list.shift()!;
      // One unmounted by hand (or after a reboot) is no spare.
      if (!isMounted(join(spare, "disk"))) {
        void this.#discard(spare);
        continue;
      }
      renameSync(spare, dir);
      this.#fill();
      return true;
    }
    this.#fill();
    return false;
  }

  #want(sizeMB: number): void {
    this.#sizes = [...this.#sizes.filter((s) => s !== sizeMB), sizeMB];
    for (const old of this.#sizes.splice(0, Math.max(0, this.#sizes.length - MAX_SIZES))) {
      for (const spare of this.#ready.get(old) ?? []) void this.#discard(spare);
      this.#ready.delete(old);
    }
  }

  /** Makes spares one at a time until every wanted size has its stock. */
  #fill(): void {
    if (this.#filling || this.#disposed) return;
    const size = [...this.#sizes].reverse().find((s) => this.#list(s).length < this.#perSize);
    if (size === undefined) return;
    const name = `${size}-${randomBytes(6).toString("hex")}`;
    const tmp = join(this.#dir, `${name}.new`);
    mkdirSync(tmp);
    this.#filling = mountDisk(this.#spawner, join(tmp, "disk.img"), join(tmp, "disk"), size)
      .then(() => {
        if (this.#disposed || !this.#sizes.includes(size)) return this.#discard(tmp);
        renameSync(tmp, join(this.#dir, name));
        this.#list(size).push(join(this.#dir, name));
      })
      .catch(async (err: Error) => {
        console.warn(`local driver: cannot make a spare disk of ${size} MB: ${err.message}`);
        await this.#discard(tmp);
        // No retry loop: the next take tries again.
        this.#sizes = this.#sizes.filter((s) => s !== size);
      })
      .finally(() => {
        this.#filling = undefined;
        this.#fill();
      });
  }

  /** Releases every spare (unmounted and deleted), the one being made included, for a driver
   * that removes its installation. */
  async dispose(): Promise<void> {
    this.#disposed = true;
    await this.#filling;
    const all = [...this.#ready.values()].flat();
    this.#ready.clear();
    await Promise.all(all.map((spare) => this.#discard(spare)));
  }

  /** Unmounts and deletes a spare; never deletes through a mount. */
  #discard(path: string): Promise<void> {
    return removeDiskDir(this.#spawner, path);
  }

  /** Ready spares (tests and benchmarks). */
  get count(): number {
    return [...this.#ready.values()].reduce((n, l) => n + l.length, 0);
  }
}
