// Built templates the edge deleted (DELETE /templates/{id} sends their rootfs names over the link):
// the record goes at once (no new sandbox can be made of a deleted template), and each of its
// layers goes once no template record in the store names it (another template, or another agent
// sharing the store, may have been built on the same cached steps) and no sandbox or snapshot of
// this agent mounts it, and no build running here holds it (a build's cached layers are in no
// record until it publishes its own). Layers still used wait and are looked at again on every sweep.
import { rmSync } from "node:fs";
import { join } from "node:path";
import type { RootfsStore } from "../rootfs/store.ts";

/** Only what a build published (`b-<buildID>`): base and imported templates are not the edge's. */
export const BUILT = /^b-[a-z0-9-]{1,64}$/;

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
    const used = await this.#inUse();
    for (const t of this.#store.templates()) for (const l of t.layers) used.add(l);
    for (const l of this.#held()) used.add(l);
    // Every layer is taken out of the store in this synchronous block (removeLayer renames it
    // before it returns), then deleted; one whose tree could not go whole is logged and stays
    // waiting (its leftovers go with the next try), and never stops the others.
    const doomed = [...this.#waiting].filter((l) => !used.has(l) && !this.#removing.has(l));
    for (const l of doomed) this.#removing.add(l);
    // Settled together: a removal that fails while another is awaited is never an unhandled rejection.
    const settled = await Promise.allSettled(doomed.map((l) => this.#store.removeLayer(l)));
    const removed: string[] = [];
    settled.forEach((s, i) => {
      const l = doomed[i]!;
      this.#removing.delete(l);
      if (s.status === "rejected") return this.#log(`retired layer ${l}: ${(s.reason as Error).message}`);
      this.#waiting.delete(l);
      removed.push(l);
    });
    clearTimeout(this.#timer);
    this.#timer = this.#waiting.size ? setTimeout(() => void this.sweep().catch(() => {}), 60_000).unref() : undefined;
    return removed;
  }

  dispose(): void {
    clearTimeout(this.#timer);
  }
}
