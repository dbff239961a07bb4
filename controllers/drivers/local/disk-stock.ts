// A stock of mounted disks made ahead of need, by key: the shape spare disks (spare-disks.ts, by
// size) and snapshot copies (snapshot-copies.ts, by snapshot) share. Each entry is a directory
// `<dir>/<name(key)>-<random>/` holding `disk.img` mounted at `disk/`: exactly what a sandbox
// directory holds, so taking one is a rename (a mount below a renamed directory moves with it).
// Entries are made one at a time in the background, for the keys asked for most recently; one
// unmounted by hand (or after a reboot) is no entry; every discard unmounts first and never
// deletes through a mount.
import { randomBytes } from "node:crypto";
import { mkdirSync, readdirSync, renameSync } from "node:fs";
import { join } from "node:path";
import { isMounted, removeDiskDir } from "./disk.ts";
import type { Spawner } from "./spawner.ts";

export interface DiskStockOptions<K> {
  dir: string;
  spawner: Spawner;
  /** Entries kept per key. */
  perKey: number;
  /** Keys kept in stock at once (the most recently asked for). */
  maxKeys: number;
  /** Makes an entry for `key`: its image at `image`, mounted at `at`. */
  make(key: K, image: string, at: string): Promise<void>;
  /** The directory-name prefix of `key`'s entries (no `-` at the end, no `/`). */
  name(key: K): string;
  /** What an entry of `key` is, for the warning when making one fails. */
  what(key: K): string;
  /** At start: the key of an entry left by an earlier driver to take over (it is still mounted),
   * or undefined to discard it. Without: every earlier entry is discarded. */
  adopt?(name: string): K | undefined;
}

export class DiskStock<K> {
  readonly #o: DiskStockOptions<K>;
  /** Ready entries by key, oldest first. */
  readonly #ready = new Map<K, string[]>();
  /** Keys to keep in stock, least recently asked for first. */
  #keys: K[] = [];
  /** The entry being made, if one is. */
  #filling: Promise<void> | undefined;
  #disposed = false;

  constructor(opts: DiskStockOptions<K>) {
    this.#o = opts;
    mkdirSync(opts.dir, { recursive: true });
    for (const name of readdirSync(opts.dir)) {
      const path = join(opts.dir, name);
      const key = name.endsWith(".new") ? undefined : opts.adopt?.(name.replace(/-[0-9a-f]+$/, ""));
      if (key !== undefined && isMounted(join(path, "disk"))) this.#list(key).push(path);
      else void this.#discard(path);
    }
  }

  #list(key: K): string[] {
    let list = this.#ready.get(key);
    if (!list) this.#ready.set(key, (list = []));
    return list;
  }

  /** Moves a ready entry of `key` to `dir` (which must not exist), mounted, and starts making the
   * next one. False when none is ready: the caller makes its own. */
  take(key: K, dir: string): boolean {
    this.#want(key);
    const list = this.#list(key);
    let took = false;
    while (list.length && !took) {
      const entry = list.shift()!;
      if (!isMounted(join(entry, "disk"))) {
        void this.#discard(entry);
        continue;
      }
      renameSync(entry, dir);
      took = true;
    }
    this.#fill();
    return took;
  }

  /** Forgets `key` (its snapshot was deleted): its entries are unmounted and removed. */
  drop(key: K): void {
    this.#keys = this.#keys.filter((k) => k !== key);
    for (const entry of this.#ready.get(key) ?? []) void this.#discard(entry);
    this.#ready.delete(key);
  }

  #want(key: K): void {
    this.#keys = [...this.#keys.filter((k) => k !== key), key];
    for (const old of this.#keys.slice(0, Math.max(0, this.#keys.length - this.#o.maxKeys))) this.drop(old);
  }

  /** Makes entries one at a time until every wanted key has its stock. */
  #fill(): void {
    if (this.#filling || this.#disposed) return;
    const key = [...this.#keys].reverse().find((k) => this.#list(k).length < this.#o.perKey);
    if (key === undefined) return;
    const name = `${this.#o.name(key)}-${randomBytes(6).toString("hex")}`;
    const tmp = join(this.#o.dir, `${name}.new`);
    mkdirSync(tmp);
    this.#filling = this.#o
      .make(key, join(tmp, "disk.img"), join(tmp, "disk"))
      .then(() => {
        if (this.#disposed || !this.#keys.includes(key)) return this.#discard(tmp);
        renameSync(tmp, join(this.#o.dir, name));
        this.#list(key).push(join(this.#o.dir, name));
      })
      .catch(async (err: Error) => {
        console.warn(`local driver: cannot make ${this.#o.what(key)} ahead: ${err.message}`);
        await this.#discard(tmp);
        // No retry loop: the next take tries again.
        this.#keys = this.#keys.filter((k) => k !== key);
      })
      .finally(() => {
        this.#filling = undefined;
        this.#fill();
      });
  }

  /** Releases every entry (unmounted and deleted), the one being made included. */
  async dispose(): Promise<void> {
    this.#disposed = true;
    await this.#filling;
    const all = [...this.#ready.values()].flat();
    this.#ready.clear();
    await Promise.all(all.map((entry) => this.#discard(entry)));
  }

  #discard(path: string): Promise<void> {
    return removeDiskDir(this.#o.spawner, path);
  }

  /** Ready entries (tests and benchmarks). */
  get count(): number {
    return [...this.#ready.values()].reduce((n, l) => n + l.length, 0);
  }
}
