// The per-isolate TtlCache (API keys, templates): single flight, time to live, a bound on its
// entries, so keys used once do not stay in an isolate that serves every tenant, and a bound on
// how long a pending load is joined (workerd may cancel it with its request: it never settles).
import { afterEach, describe, expect, it, vi } from "vitest";
import { JOIN_MS, TtlCache } from "../../../../durable-objects/store/ttl-cache.ts";

describe("TtlCache", () => {
  it("shares one load per key until it expires", async () => {
    const c = new TtlCache<number>(1000);
    let loads = 0;
    const load = async () => ++loads;
    expect(await Promise.all([c.get("a", load, 0), c.get("a", load, 10)])).toEqual([1, 1]);
    expect(await c.get("a", load, 1000)).toBe(2);
  });

  it("answers a burst of concurrent misses of a key with one load, and not a failed one after", async () => {
    const c = new TtlCache<number>(1000);
    let loads = 0;
    const load = async () => ++loads;
    expect(await Promise.all(Array.from({ length: 50 }, (_, i) => c.get("a", load, i)))).toEqual(Array(50).fill(1));
    let fails = 0;
    const fail = async () => Promise.reject(new Error(`failed ${++fails}`));
    await expect(Promise.all([c.get("b", fail, 0), c.get("b", fail, 1)])).rejects.toThrow("failed 1");
    await expect(c.get("b", fail, 2)).rejects.toThrow("failed 2");
  });

  describe("a load whose request was cancelled (its promise never settles)", () => {
    afterEach(() => void vi.useRealTimers());

    it("is joined for JOIN_MS, then one waiter's load answers for all", async () => {
      const c = abandoned();
      let loads = 0;
      const load = async () => `load ${++loads}`;
      await vi.advanceTimersByTimeAsync(100);
      const waiters = Array.from({ length: 10 }, () => c.get("k", load));
      await vi.advanceTimersByTimeAsync(JOIN_MS - 101);
      expect(loads).toBe(0);
      await vi.advanceTimersByTimeAsync(1);
      expect(await Promise.all(waiters)).toEqual(Array(10).fill("load 1"));
      // A request after the abandoned load's join time is a hit: the waiter's load is kept for the TTL.
      await vi.advanceTimersByTimeAsync(1);
      expect(await c.get("k", load)).toBe("load 1");
      expect(loads).toBe(1);
    });

    it("dates a waiter's load when it starts, not when its timer was due (a busy isolate fires it late)", async () => {
      const c = abandoned();
      const { load, loads } = slowLoads(500);
      await vi.advanceTimersByTimeAsync(100);
      const waiter = c.get("k", load);
      // The isolate busy for 2 s: the clock moves on, the waiter's timer fires 2 s late (at 3000).
      vi.setSystemTime(2100);
      await vi.advanceTimersByTimeAsync(JOIN_MS - 100);
      expect(loads()).toBe(1);
      // 50 ms into the waiter's load, a new request joins it rather than taking it for abandoned.
      await vi.advanceTimersByTimeAsync(50);
      const later = c.get("k", load);
      await vi.advanceTimersByTimeAsync(500);
      expect(await Promise.all([waiter, later])).toEqual(["load 1", "load 1"]);
      expect(loads()).toBe(1);
    });

    it("does not stand for the key once its join time is past: the next request loads", async () => {
      const c = new TtlCache<string>(30_000);
      void c.get("k", () => new Promise<string>(() => {}), 0);
      expect(await c.get("k", async () => "own", JOIN_MS)).toBe("own");
      expect(await c.get("k", async () => "again", JOIN_MS + 1)).toBe("own");
    });
  });

  describe("a load slower than JOIN_MS that does answer", () => {
    afterEach(() => void vi.useRealTimers());

    it("answers every waiter when it does, with at most one more read beside it", async () => {
      vi.useFakeTimers();
      vi.setSystemTime(0);
      const c = new TtlCache<string>(30_000);
      const { load: slow, loads } = slowLoads(1500);
      const answeredAt: number[] = [];
      const gets = Array.from({ length: 8 }, () => c.get("k", slow).then((v) => (answeredAt.push(Date.now()), v)));
      await vi.advanceTimersByTimeAsync(1500);
      expect(answeredAt).toEqual(Array(8).fill(1500));
      expect(loads()).toBeLessThanOrEqual(2);
      expect(await Promise.all(gets)).toEqual(Array(8).fill("load 1"));
      // Its value is the entry's: the next request is a hit.
      await vi.advanceTimersByTimeAsync(5000);
      expect(await c.get("k", slow)).toBe("load 1");
      expect(loads()).toBeLessThanOrEqual(2);
    });
  });

  it("keeps at most its bound: the expired entries go first, else the oldest", async () => {
    const c = new TtlCache<string>(1000, 3);
    for (const k of ["a", "b", "c"]) await c.get(k, async () => k, 0);
    await c.get("d", async () => "d", 10);
    expect(c.size).toBe(3);
    // "a" was the oldest: loaded again.
    expect(await c.get("a", async () => "a2", 20)).toBe("a2");
    expect(c.size).toBe(3);
    // All expired by then: a new key sweeps them.
    await c.get("e", async () => "e", 5000);
    expect(c.size).toBe(1);
    for (let i = 0; i < 100; i++) await c.get(`k${i}`, async () => "x", 6000);
    expect(c.size).toBe(3);
  });
});

/** Fake timers, the clock at 0, and a cache whose key "k" has a load that never settles (the
 * request that started it was cancelled). */
function abandoned(): TtlCache<string> {
  vi.useFakeTimers();
  vi.setSystemTime(0);
  const c = new TtlCache<string>(30_000);
  void c.get("k", () => new Promise<string>(() => {}));
  return c;
}

/** A load that answers `load <n>` (its count) after `ms`, on the fake timers. */
function slowLoads(ms: number): { load: () => Promise<string>; loads: () => number } {
  let n = 0;
  const load = () => {
    const mine = ++n;
    return new Promise<string>((r) => setTimeout(() => r(`load ${mine}`), ms));
  };
  return { load, loads: () => n };
}
