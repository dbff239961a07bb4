// When a claim's relabel is written (claim-writes.ts): held while a burst's claims keep coming, all
// written once they pause, and never later than the bound after its own claim however many follow.
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { CLAIM_WRITE_LINGER_MS, CLAIM_WRITE_MAX_WAIT_MS, claimWriteDelay, ClaimWrites } from "../../../../../controllers/drivers/kubernetes/claim-writes.ts";

describe("claimWriteDelay", () => {
  it("waits for the pause after the latest claim", () => {
    expect(claimWriteDelay({ now: 1000, claimedAt: 1000, lastClaimAt: 1000, lingerMs: 100, maxWaitMs: 1000 })).toBe(100);
    expect(claimWriteDelay({ now: 1050, claimedAt: 1000, lastClaimAt: 1040, lingerMs: 100, maxWaitMs: 1000 })).toBe(90);
    expect(claimWriteDelay({ now: 1200, claimedAt: 1000, lastClaimAt: 1040, lingerMs: 100, maxWaitMs: 1000 })).toBe(0);
  });

  it("waits no longer than the bound after its own claim", () => {
    expect(claimWriteDelay({ now: 1950, claimedAt: 1000, lastClaimAt: 1940, lingerMs: 100, maxWaitMs: 1000 })).toBe(50);
    expect(claimWriteDelay({ now: 2000, claimedAt: 1000, lastClaimAt: 1990, lingerMs: 100, maxWaitMs: 1000 })).toBe(0);
  });
});

describe("ClaimWrites", () => {
  let written: [string, number][];
  let writes: ClaimWrites;
  beforeEach(() => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "Date"], now: 0 });
    written = [];
    writes = new ClaimWrites((id) => written.push([id, Date.now()]));
  });
  afterEach(() => {
    writes.stop();
    vi.useRealTimers();
  });

  it("writes a burst's claims together once claims pause", async () => {
    writes.claimed("a");
    await vi.advanceTimersByTimeAsync(50);
    writes.claimed("b");
    await vi.advanceTimersByTimeAsync(40);
    writes.claimed("c");
    await vi.advanceTimersByTimeAsync(CLAIM_WRITE_LINGER_MS - 1);
    expect(written).toEqual([]);
    await vi.advanceTimersByTimeAsync(1);
    const at = 90 + CLAIM_WRITE_LINGER_MS;
    expect(written).toEqual([["a", at], ["b", at], ["c", at]]);
    expect(writes.size).toBe(0);
  });

  it("writes each claim at its bound while claims never pause", async () => {
    for (let t = 0; t <= CLAIM_WRITE_MAX_WAIT_MS + 100; t += 50) {
      writes.claimed(`s${t}`);
      await vi.advanceTimersByTimeAsync(50);
    }
    // Claims came every 50 ms throughout: each written at its own claim time plus the bound.
    expect(written.slice(0, 3)).toEqual([["s0", CLAIM_WRITE_MAX_WAIT_MS], ["s50", CLAIM_WRITE_MAX_WAIT_MS + 50], ["s100", CLAIM_WRITE_MAX_WAIT_MS + 100]]);
    await vi.advanceTimersByTimeAsync(CLAIM_WRITE_LINGER_MS);
    expect(writes.size).toBe(0);
  });

  it("a claim again before its write keeps its first time; a forgotten one is not written", async () => {
    writes.claimed("a");
    writes.claimed("gone");
    writes.forget("gone");
    for (let t = 50; t <= CLAIM_WRITE_MAX_WAIT_MS; t += 50) {
      await vi.advanceTimersByTimeAsync(50);
      writes.claimed("a");
    }
    expect(written).toEqual([["a", CLAIM_WRITE_MAX_WAIT_MS]]);
  });
});
