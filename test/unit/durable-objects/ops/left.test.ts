// The snapshots an ops run holds past its members' upgrades (ops/left.ts): one still needed is
// looked at again after a wait that doubles up to a cap (not every 2 s for as long as a member stays
// paused), a wake-up from its group makes it due at once, and a delete that keeps failing is given
// up on after MAX_FREE_ATTEMPTS tries.
import { describe, expect, it } from "vitest";
import { deleteFailed, LEFT_FIRST_CHECK_MS, LEFT_MAX_CHECK_MS, leftDue, nextLeftAt, stillNeeded, woken } from "../../../../durable-objects/ops/left.ts";
import { MAX_FREE_ATTEMPTS } from "../../../../durable-objects/ops/machine.ts";
import type { LeftSnapshot } from "../../../../durable-objects/ops/store.ts";

const NOW = 1_000_000;
const left = (): LeftSnapshot => ({ upgrade: { id: "s1", teamId: "t", template: { id: "t", revision: "r2", image: "i", user: "u", workdir: "/", resources: { cpuCount: 1, memoryMB: 512 } }, attempt: 1, restoreFs: "snap-1" }, attempts: 0 });

describe("snapshots held past a run's need", () => {
  it("a new one is due at once; one still needed waits twice as long each time, up to a cap", () => {
    let l = left();
    expect(leftDue(l, NOW)).toBe(true);
    expect(nextLeftAt([l])).toBeLessThanOrEqual(NOW);
    let t = NOW;
    const waits: number[] = [];
    for (let i = 0; i < 20; i++) {
      l = stillNeeded(l, t);
      expect(leftDue(l, t)).toBe(false);
      waits.push(l.nextAt! - t);
      t = l.nextAt!;
      expect(leftDue(l, t)).toBe(true);
    }
    expect(waits[0]).toBe(LEFT_FIRST_CHECK_MS);
    expect(waits[1]).toBe(2 * LEFT_FIRST_CHECK_MS);
    for (let i = 1; i < waits.length; i++) expect(waits[i]).toBeGreaterThanOrEqual(waits[i - 1]!);
    expect(Math.max(...waits)).toBe(LEFT_MAX_CHECK_MS);
    // Twenty looks over a paused member cover hours, not 40 s as a fixed 2 s poll would.
    expect(t - NOW).toBeGreaterThan(60 * 60_000);
  });

  it("a wake-up from its group makes it due at once, and the waits start over", () => {
    const l = stillNeeded(stillNeeded(left(), NOW), NOW);
    expect(leftDue(l, NOW + 1)).toBe(false);
    const w = woken(l);
    expect(leftDue(w, NOW + 1)).toBe(true);
    expect(stillNeeded(w, NOW).nextAt! - NOW).toBe(LEFT_FIRST_CHECK_MS);
  });

  it("a delete that keeps failing is retried backing off, then given up on", () => {
    let l: LeftSnapshot | null = left();
    let t = NOW;
    let last = 0;
    for (let i = 1; i < MAX_FREE_ATTEMPTS; i++) {
      l = deleteFailed(l!, t);
      expect(l).not.toBeNull();
      expect(l!.attempts).toBe(i);
      expect(leftDue(l!, t)).toBe(false);
      expect(l!.nextAt! - t).toBeGreaterThan(last);
      last = l!.nextAt! - t;
      t = l!.nextAt!;
    }
    expect(deleteFailed(l!, t)).toBeNull();
  });

  it("the next look is the earliest of those held; none held, none", () => {
    const a = stillNeeded(left(), NOW);
    const b = { ...stillNeeded(stillNeeded(left(), NOW), NOW), upgrade: { ...left().upgrade, restoreFs: "snap-2" } };
    expect(nextLeftAt([b, a])).toBe(a.nextAt);
    expect(nextLeftAt([])).toBeUndefined();
  });
});
