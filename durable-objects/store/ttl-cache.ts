// A per-isolate cache with a time to live and single flight: concurrent misses of one key share
// one load, so a burst of requests after a cold start or an expiry costs one libSQL query instead
// of one per request (sqld answers 429 past 128 concurrent requests). Failed loads are not cached.
// Bounded in entries: an isolate serves every tenant, and each key used (or template read) would
// otherwise stay in memory until that same key is asked again.

/** Entries one cache keeps at most (the key cache: a team's keys are bounded, teams are not). */
export const TTL_CACHE_MAX_ENTRIES = 10_000;

export class TtlCache<V> {
  readonly #ttlMs: number;
  readonly #max: number;
  readonly #entries = new Map<string, { value: Promise<V>; until: number }>();

  constructor(ttlMs: number, maxEntries = TTL_CACHE_MAX_ENTRIES) {
    this.#ttlMs = ttlMs;
    this.#max = maxEntries;
  }

  get size(): number {
    return this.#entries.size;
  }

  get(key: string, load: () => Promise<V>, now = Date.now()): Promise<V> {
    const hit = this.#entries.get(key);
    if (hit && hit.until > now) return hit.value;
    const value = load();
    const entry = { value, until: now + this.#ttlMs };
    if (hit) this.#entries.delete(key); // re-inserted last: the map's order is the entries' age
    else if (this.#entries.size >= this.#max) this.#evict(now);
    this.#entries.set(key, entry);
    value.catch(() => {
      if (this.#entries.get(key) === entry) this.#entries.delete(key);
    });
    return value;
  }

  /** Full: the expired entries go; if none had, the oldest. The map keeps insertion order and every
   * entry lives the same ttl, so the expired ones are its first: the walk stops at the first live
   * one (a full cache of live entries is not walked whole on every miss). */
  #evict(now: number): void {
    for (const [k, e] of this.#entries) {
      if (e.until > now) break;
      this.#entries.delete(k);
    }
    if (this.#entries.size >= this.#max) this.#entries.delete(this.#entries.keys().next().value!);
  }

  delete(key: string): void {
    this.#entries.delete(key);
  }

  clear(): void {
    this.#entries.clear();
  }
}
