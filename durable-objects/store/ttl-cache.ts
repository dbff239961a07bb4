// A per-isolate cache with a time to live and single flight: concurrent misses of one key share
// one load, so a burst of requests after a cold start or an expiry costs one libSQL query instead
// of one per request (sqld answers 429 past 128 concurrent requests). Failed loads are not cached.
// Bounded in entries: an isolate serves every tenant, and each key used (or template read) would
// otherwise stay in memory until that same key is asked again.
//
// Why a shared load is joined only for JOIN_MS: workerd ties a load's I/O to the request that
// started it. When that request is cancelled (its client disconnects), the load's promise never
// settles, and a request awaiting it waits for good (test/workerd/api/edge-caches.test.ts); kept as
// the entry, it would hang every request of that key for the whole TTL. So a request that joins a
// load still pending also keeps a timer of its own, and when the load is JOIN_MS old and still
// pending it starts its own load, which the others then join. The old load may only be slow (sqld
// runs one connection, so reads queue under a burst), so the entry races the two: whichever settles
// first answers everyone (a burst whose first read answers within 1 s costs that read; within 2 s,
// two reads, all its requests answered when the first does; only while no read answers, one more
// per JOIN_MS). Waiting on a live load from another request works
// (test/workerd/api/edge-caches.test.ts, 20 first requests of a key at once): workerd runs the
// waiter's continuation in the waiter's own context.

/** Entries one cache keeps at most (the key cache: a team's keys are bounded, teams are not). */
export const TTL_CACHE_MAX_ENTRIES = 10_000;

/** How long a pending load is joined alone before a waiter's own load is raced against it (a
 * libSQL read answers in milliseconds; a read slow past this costs one more read per JOIN_MS while
 * none has settled, and none of its waiters waits past the first that settles). */
export const JOIN_MS = 1000;

interface Entry<V> {
  load: Promise<V>;
  started: number;
  until: number;
  settled: { value: V } | null;
}

export class TtlCache<V> {
  readonly #ttlMs: number;
  readonly #max: number;
  readonly #entries = new Map<string, Entry<V>>();

  constructor(ttlMs: number, maxEntries = TTL_CACHE_MAX_ENTRIES) {
    this.#ttlMs = ttlMs;
    this.#max = maxEntries;
  }

  get size(): number {
    return this.#entries.size;
  }

  get(key: string, load: () => Promise<V>, now = Date.now()): Promise<V> {
    const hit = this.#entries.get(key);
    if (hit && hit.until > now) {
      if (hit.settled) return Promise.resolve(hit.settled.value);
      const left = hit.started + JOIN_MS - now;
      if (left > 0) return this.#join(key, hit, load, left);
    }
    return this.#start(key, hit, load, now);
  }

  /** The pending load's outcome, or, if it has not settled in `left` ms, what `get` gives then
   * (this request's own load raced with it, unless another waiter's already is). */
  #join(key: string, entry: Entry<V>, load: () => Promise<V>, left: number): Promise<V> {
    return new Promise<V>((resolve, reject) => {
      const timer = setTimeout(() => {
        try {
          resolve(this.get(key, load)); // the real clock: a timer that fires late must not date a load early
        } catch (err) {
          reject(err); // a load that throws before its promise: the waiter must not hang on it
        }
      }, left);
      entry.load.then(
        (v) => (clearTimeout(timer), resolve(v)),
        (err: unknown) => (clearTimeout(timer), reject(err)),
      );
    });
  }

  /** A new load for `key`. In place of one still pending (`hit` unsettled, unexpired), the two are
   * raced: that one may be slow, not abandoned, and its value is as fresh, so the entry keeps its
   * expiry and its place in the map (the map's order stays the entries' age). */
  #start(key: string, hit: Entry<V> | undefined, load: () => Promise<V>, now: number): Promise<V> {
    const own = load();
    const pending = hit !== undefined && !hit.settled && hit.until > now;
    const value = pending ? Promise.race([hit.load, own]) : own;
    const entry: Entry<V> = { load: value, started: now, until: pending ? hit.until : now + this.#ttlMs, settled: null };
    if (!pending) {
      if (hit) this.#entries.delete(key); // re-inserted last: the map's order is the entries' age
      else if (this.#entries.size >= this.#max) this.#evict(now);
    }
    this.#entries.set(key, entry);
    value.then(
      (v) => void (entry.settled = { value: v }),
      () => {
        if (this.#entries.get(key) === entry) this.#entries.delete(key);
      },
    );
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
