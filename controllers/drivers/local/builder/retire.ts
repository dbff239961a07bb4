// Built templates the edge deleted (DELETE /templates/{id} sends their rootfs names over the link):
// the record goes at once (no new sandbox can be made of a deleted template), and each of its
// layers goes once no template record in the store names it (another template, or another agent
// sharing the store, may have been built on the same cached steps) and no sandbox or snapshot of
// this agent mounts it, and no build running here holds it (a build's cached layers are in no
// record until it publishes its own). Layers still used wait and are looked at again on every sweep.
// The same rules bound each team's cache (`trim`): layers nothing uses are evicted, least recently
// used first, past the team's bound.
import { rmSync } from "node:fs";
import { join } from "node:path";
import type { RootfsStore } from "../rootfs/store.ts";

/** Only what a build published (`b-<buildID>`): base and imported templates are not the edge's. */
export const BUILT = /^b-[a-z0-9-]{1,64}$/;

/** How much of a team's layers that nothing uses (no template record, sandbox, snapshot or running
 * build: only a later build of the same steps could) the store keeps: one build's own bounds
 * (builder.ts BUILD_DISK_MB, BUILD_FILES). A build that failed at its last step can be run again
 * from its cached steps, and more than that buys a team no more than a faster retry of older
 * builds, paid for with the host's disk. Layers in use are neither counted nor evicted: their
 * templates and sandboxes need them. */
export interface CacheBound {
  bytes: number;
  files: number;
}

export interface CachedLayer {
  id: string;
  bytes: number;
  files: number;
  /** When a build last made or used it (ms). */
  usedAt: number;
}

/** The layers to evict, least recently used first, until the rest fit the bound. */
export function cacheEvictions(cached: CachedLayer[], bound: CacheBound): string[] {
  const oldest = [...cached].sort((a, b) => a.usedAt - b.usedAt || a.id.localeCompare(b.id));
  let bytes = oldest.reduce((n, l) => n + l.bytes, 0);
  let files = oldest.reduce((n, l) => n + l.files, 0);
  const out: string[] = [];
  for (const l of oldest) {
    if (bytes <= bound.bytes && files <= bound.files) break;
    out.push(l.id);
    bytes -= l.bytes;
    files -= l.files;
  }
  return out;
}

export class RetiredTemplates {
  readonly #store: RootfsStore;
  readonly #inUse: () => Promise<Set<string>>;
  /** Layers of deleted templates not removed yet. */
  readonly #waiting = new Set<string>();
  /** Layers a sweep is deleting now: a sweep that overlaps it leaves them to it. */
  readonly #removing = new Set<string>();
  #timer: NodeJS.Timeout | undefined;

  readonly #held: () => Iterable<string>;
  readonly #log: (msg: string) => void;

  /** `held`: layers running builds hold, read in the same synchronous block as the removal, so
   * a build cannot take a layer from the cache between the look and the removal. */
  constructor(store: RootfsStore, inUse: () => Promise<Set<string>>, held: () => Iterable<string> = () => [], log: (msg: string) => void = (m) => console.warn(m)) {
    this.#store = store;
    this.#inUse = inUse;
    this.#held = held;
    this.#log = log;
  }

  /** Retires the built templates of `names` (others are ignored) and sweeps; returns the layers removed. */
  async retire(names: string[]): Promise<string[]> {
    for (const name of names) {
      if (!BUILT.test(name)) continue;
      for (const l of this.#store.template(name)?.layers ?? []) this.#waiting.add(l);
      rmSync(join(this.#store.root, "templates", `${name}.json`), { force: true });
    }
    return this.sweep();
  }

  /** Removes every waiting layer nothing uses any more; the rest are tried again in a minute. */
  async sweep(): Promise<string[]> {
    if (!this.#waiting.size) return [];
    const removed = await this.#remove((used) => [...this.#waiting].filter((l) => !used.has(l)), "retired layer");
    for (const l of removed) this.#waiting.delete(l);
    clearTimeout(this.#timer);
    this.#timer = this.#waiting.size ? setTimeout(() => void this.sweep().catch(() => {}), 60_000).unref() : undefined;
    return removed;
  }

  /** Holds `team`'s cache to `bound` (CacheBound): evicts its least recently used layers among
   * those nothing uses, until the rest fit. Run when one of the team's builds ends. Layers of no
   * team (base, imported, an older agent's builds) are never evicted. Returns the layers removed. */
  async trim(team: string, bound: CacheBound): Promise<string[]> {
    return this.#remove((used) => cacheEvictions(this.#store.layers().filter((l) => l.team === team && !used.has(l.id)), bound), "evicted cached layer");
  }

  /** Removes the layers `pick` chooses among those nothing uses. What uses a layer (template
   * records, sandboxes and snapshots, running builds) is read, the choice made and every chosen
   * layer taken out of the store (removeLayer renames it before it returns) in one synchronous
   * block after the one await, so no build can take a layer from the cache in between. Then the
   * trees are deleted; one that could not go whole is logged (its leftovers go with the next
   * removal of the id) and never stops the others. Resolves with the layers removed. */
  async #remove(pick: (used: Set<string>) => string[], what: string): Promise<string[]> {
    const used = await this.#inUse();
    for (const t of this.#store.templates()) for (const l of t.layers) used.add(l);
    for (const l of this.#held()) used.add(l);
    // A layer another call is deleting now is left to it.
    const doomed = pick(used).filter((l) => !this.#removing.has(l));
    for (const l of doomed) this.#removing.add(l);
    // Settled together: a removal that fails while another is awaited is never an unhandled rejection.
    const settled = await Promise.allSettled(doomed.map((l) => this.#store.removeLayer(l)));
    const removed: string[] = [];
    settled.forEach((s, i) => {
      const l = doomed[i]!;
      this.#removing.delete(l);
      if (s.status === "rejected") return this.#log(`${what} ${l}: ${(s.reason as Error).message}`);
      removed.push(l);
    });
    return removed;
  }

  dispose(): void {
    clearTimeout(this.#timer);
  }
}
