// Per-sandbox request rate limits: a token bucket per sandbox, refilled continuously at
// `perMinute`/60 per second, holding at most `perMinute`.
export class RateLimiter {
  readonly #buckets = new Map<string, { tokens: number; at: number }>();

  take(sandbox: string, perMinute: number | undefined, now = Date.now()): boolean {
    if (perMinute === undefined) return true;
    const b = this.#buckets.get(sandbox) ?? { tokens: perMinute, at: now };
    b.tokens = Math.min(perMinute, b.tokens + ((now - b.at) / 60_000) * perMinute);
    b.at = now;
    this.#buckets.set(sandbox, b);
    if (b.tokens < 1) return false;
    b.tokens -= 1;
    return true;
  }

  forget(sandbox: string): void {
    this.#buckets.delete(sandbox);
  }
}
