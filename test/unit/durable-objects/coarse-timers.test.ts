import { describe, expect, it, vi } from "vitest";
import { CoarseTimers } from "../../../durable-objects/coarse-timers.ts";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("CoarseTimers", () => {
  it("fires each wait once, no earlier than asked and within one grain after", async () => {
    const timers = new CoarseTimers(20);
    const started = Date.now();
    const fired: number[] = [];
    timers.after(30, () => fired.push(Date.now() - started));
    timers.after(35, () => fired.push(Date.now() - started));
    await sleep(120);
    expect(fired).toHaveLength(2);
    for (const t of fired) {
      expect(t).toBeGreaterThanOrEqual(29);
      expect(t).toBeLessThan(100);
    }
  });

  it("a cancelled wait never fires, and the others in its grain still do", async () => {
    const timers = new CoarseTimers(20);
    let cancelled = 0;
    let kept = 0;
    const cancel = timers.after(10, () => cancelled++);
    timers.after(10, () => kept++);
    cancel();
    const alone = timers.after(10, () => cancelled++);
    alone();
    await sleep(80);
    expect(cancelled).toBe(0);
    expect(kept).toBe(1);
  });

  it("a grain emptied by cancels can be used again", async () => {
    const timers = new CoarseTimers(20);
    let n = 0;
    timers.after(10, () => n++)();
    timers.after(10, () => n++);
    await sleep(80);
    expect(n).toBe(1);
  });
});

describe("CoarseTimers keeping emptied grains", () => {
  it("fires nothing cancelled, fires what is not, and arms one runtime timer per grain", () => {
    vi.useFakeTimers({ now: 1_000 });
    const armed = vi.spyOn(globalThis, "setTimeout");
    try {
      const timers = new CoarseTimers(40, true);
      let cancelled = 0;
      let kept = 0;
      // Waits due in one grain that come one after the other, each cancelled before the next.
      for (let i = 0; i < 5; i++) {
        timers.after(10, () => cancelled++)();
        vi.advanceTimersByTime(1);
      }
      timers.after(10, () => kept++);
      expect(armed).toHaveBeenCalledTimes(1);
      vi.advanceTimersByTime(100);
      expect(cancelled).toBe(0);
      expect(kept).toBe(1);
      // The grain fired: a later wait gets a timer of its own and fires.
      timers.after(10, () => kept++);
      expect(armed).toHaveBeenCalledTimes(2);
      vi.advanceTimersByTime(100);
      expect(kept).toBe(2);
    } finally {
      armed.mockRestore();
      vi.useRealTimers();
    }
  });
});
