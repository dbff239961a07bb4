// The per-isolate TtlCache (API keys, templates): single flight, time to live, and a bound on its
// entries, so keys used once do not stay in an isolate that serves every tenant.
import { describe, expect, it } from "vitest";
import { TtlCache } from "../../../../durable-objects/store/ttl-cache.ts";

describe("TtlCache", () => {
  it("shares one load per key until it expires", async () => {
    const c = new TtlCache<number>(1000);
    let loads = 0;
    const load = async () => ++loads;
    expect(await Promise.all([c.get("a", load, 0), c.get("a", load, 10)])).toEqual([1, 1]);
    expect(await c.get("a", load, 1000)).toBe(2);
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
