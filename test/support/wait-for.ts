// The one polling helper of the test tiers: wait until something a user could observe is true.
// Works in Node and inside workerd (timers only, no Node APIs).

export interface WaitOptions {
  /** What is awaited, for the error (default: "condition"). */
  what?: string;
  /** Give up after this long (default 10 s). */
  timeoutMs?: number;
  /** Pause between checks (default 20 ms). */
  intervalMs?: number;
}

/**
 * Calls `check` until it returns something other than `undefined` or `false`, and returns that
 * (`true` for a plain predicate). A check that throws counts as not yet; when the time is up the
 * error names `what` and the last thrown message.
 */
export async function waitFor<T>(check: () => T | undefined | false | Promise<T | undefined | false>, opts: WaitOptions | number = {}): Promise<T> {
  const { what = "condition", timeoutMs = 10_000, intervalMs = 20 } = typeof opts === "number" ? { timeoutMs: opts } : opts;
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await check();
      if (v !== undefined && v !== false) return v;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${last ? `: ${(last as Error).message ?? String(last)}` : ""}`);
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}
