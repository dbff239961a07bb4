import { describe, expect, it } from "vitest";
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
