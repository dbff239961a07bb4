// A per-isolate cache with a time to live and single flight: concurrent misses of one key share
// one load, so a burst of requests after a cold start or an expiry costs one libSQL query instead
// of one per request (sqld answers 429 past 128 concurrent requests). Failed loads are not cached.

export class TtlCache<V> {
  readonly #ttlMs: number;
  readonly #entries = new Map<string, { value: Promise<V>; until: number }>();

  constructor(ttlMs: number) {
    this.#ttlMs = ttlMs;
  }

  get(key: string, load: () => Promise<V>, now = Date.now()): Promise<V> {
    const hit = this.#entries.get(key);
    if (hit && hit.until > now) return hit.value;
    const value = load();
    const entry = { value, until: now + this.#ttlMs };
    this.#entries.set(key, entry);
    value.catch(() => {
      if (this.#entries.get(key) === entry) this.#entries.delete(key);
    });
    return value;
  }

  delete(key: string): void {
    this.#entries.delete(key);
  }

  clear(): void {
    this.#entries.clear();
  }
}
