// The PoolAutoscaler machine (openkruise-agents.md §1.9, §2.5): watermarks with tolerance, the
// scale-up guard and the per-direction cooldowns, the warm-up before a scale-down, cron windows
// that override the watermark, clamping and suspend; and when the pool's alarm finds an evaluation due.
import { describe, expect, it } from "vitest";
import { AutoscaleHost, type AutoscalerStore } from "../../../../durable-objects/pool/autoscale-host.ts";
import { evaluate, evaluationTime, initialAutoscaler, watermarks, type AutoscalerState } from "../../../../durable-objects/pool/autoscaler.ts";
import { AutoscalerSpec } from "../../../../schema/api/autoscaler.ts";

const opts = { intervalMs: 1_000, windowMs: 5_000 };
const T0 = Date.parse("2026-06-10T12:00:00Z");
const s = (n: number) => T0 + n * 1000;
const spec = (over: Record<string, unknown> = {}) =>
  AutoscalerSpec.parse({ maxReplicas: 20, capacityPolicy: { targetAvailable: 4, tolerance: 1, scaleUp: { stabilizationWindowSeconds: 10 }, scaleDown: { stabilizationWindowSeconds: 60 } }, ...over });
const run = (st: AutoscalerState, replicas: number, available: number, total: number, at: number) => evaluate(st, replicas, { available, total }, at, opts);

describe("watermarks", () => {
  it.each([
    { t: 4, tol: 1, base: 10, w: { target: 4, lower: 3, upper: 5 } },
    { t: 4, tol: "25%", base: 10, w: { target: 4, lower: 3, upper: 5 } }, // tolerance against the target
    { t: "40%", tol: 1, base: 10, w: { target: 4, lower: 3, upper: 5 } }, // target against the base
    { t: "40%", tol: "10%", base: 10, w: { target: 4, lower: 3, upper: 5 } }, // both percentages scale the base
    { t: "50%", tol: "10%", base: 7, w: { target: 4, lower: 3, upper: 5 } }, // each rounds up
    { t: 2, tol: 5, base: 10, w: { target: 2, lower: 0, upper: 7 } }, // lower never below 0
  ])("target $t tolerance $tol on $base", ({ t, tol, base, w }) => {
    expect(watermarks(t, tol, base)).toEqual(w);
  });
});

describe("watermark scaling", () => {
  it("holds within tolerance, scales up below it at once, and waits for its own members before scaling up again", () => {
    const st = initialAutoscaler(spec());
    expect(run(st, 4, 3, 4, s(0))).toBeNull();
    expect(st.decision).toMatchObject({ reason: "WithinTolerance", desiredReplicas: 4 });
    // A claim burst: 1 available, 3 creating (the pool refills what was claimed).
    expect(run(st, 4, 1, 4, s(1))).toBe(7);
    expect(st.decision).toMatchObject({ reason: "BelowTarget", currentReplicas: 4, desiredReplicas: 7 });
    expect(st.events.at(-1)).toMatchObject({ reason: "SuccessfulRescale" });
    expect(st.events.at(-1)!.message).toContain("New size: 7");
    // The 3 members it added are still creating: no second scale-up on the same deficit.
    expect(run(st, 7, 0, 7, s(2))).toBeNull();
    expect(st.decision!.reason).toBe("ScaleUpInProgress");
  });

  it("a scale-up after a scale-down waits the scaleUp window, with one ScaleBlocked event", () => {
    const st = initialAutoscaler(spec());
    for (let i = 0; i < 5; i++) run(st, 10, 10, 10, s(i));
    expect(st.decision).toMatchObject({ reason: "AboveTarget" }); // the first scale is immediate
    expect(st.lastScaleAt).toBe(s(4));
    expect(st.events.at(-1)!.message).toContain("New size: 4");
    expect(run(st, 4, 1, 4, s(6))).toBeNull();
    expect(run(st, 4, 1, 4, s(7))).toBeNull();
    expect(st.decision).toMatchObject({ reason: "ScaleBlocked", desiredReplicas: 7 });
    expect(st.conditions.find((c) => c.type === "AbleToScale")).toMatchObject({ status: "False", reason: "BackoffUp" });
    expect(st.events.filter((e) => e.reason === "ScaleBlocked")).toHaveLength(1);
    expect(run(st, 4, 1, 4, s(14))).toBe(7); // 10 s after the last scale
  });

  it("scales down only after a full window of samples above the band and the scaleDown window", () => {
    const st = initialAutoscaler(spec());
    expect(run(st, 4, 1, 4, s(0))).toBe(7);
    // The burst is over: all 7 become available.
    for (let i = 1; i <= 3; i++) expect(run(st, 7, 7, 7, s(i))).toBeNull();
    expect(st.decision!.reason).toBe("WarmingUp");
    // Five samples (s0..s4) fill the window: the scale-down is due, but waits its 60 s.
    expect(run(st, 7, 7, 7, s(4))).toBeNull();
    expect(st.decision).toMatchObject({ reason: "ScaleBlocked", desiredReplicas: 4 });
    for (let i = 5; i < 60; i++) expect(run(st, 7, 7, 7, s(i))).toBeNull();
    expect(run(st, 7, 7, 7, s(60))).toBe(4);
    expect(st.decision).toMatchObject({ reason: "AboveTarget", desiredReplicas: 4 });
  });

  it("clamps to minReplicas/maxReplicas and says so", () => {
    const st = initialAutoscaler(spec({ maxReplicas: 6 }));
    expect(run(st, 4, 0, 4, s(0))).toBe(6);
    expect(st.conditions.find((c) => c.type === "ScalingLimited")).toMatchObject({ status: "True", reason: "TooManyReplicas" });
    const low = initialAutoscaler(spec({ minReplicas: 3, capacityPolicy: undefined }));
    expect(run(low, 1, 1, 1, s(0))).toBe(3);
    expect(low.conditions.find((c) => c.type === "ScalingLimited")).toMatchObject({ status: "True", reason: "TooFewReplicas" });
  });

  it("does nothing while suspended", () => {
    const st = initialAutoscaler(spec({ suspend: true }));
    expect(run(st, 4, 0, 4, s(0))).toBeNull();
    expect(st.conditions).toEqual([expect.objectContaining({ type: "ScalingActive", status: "False", reason: "Suspended" })]);
  });
});

describe("cron policies", () => {
  const cron = spec({
    cronPolicies: [
      { name: "night", schedule: "* 22-23,0-5 * * *", targetReplicas: 1 },
      { name: "batch", schedule: "* 0-1 * * *", targetReplicas: 8 },
    ],
  });

  it("sets the size in its window, the highest of overlapping windows wins, bypassing the cooldown", () => {
    const st = initialAutoscaler(cron);
    const at = (iso: string) => Date.parse(iso);
    expect(evaluate(st, 4, { available: 4, total: 4 }, at("2026-06-10T23:00:00Z"), opts)).toBe(1);
    expect(st.decision).toMatchObject({ reason: "CronPolicy" });
    expect(st.decision!.message).toContain('"night"');
    // Across midnight both windows hold: the higher target wins, seconds after the last scale.
    expect(evaluate(st, 1, { available: 1, total: 1 }, at("2026-06-11T00:00:10Z"), opts)).toBe(8);
    expect(st.decision!.message).toContain('"batch"');
    expect(Object.keys(st.cronSince).sort()).toEqual(["batch", "night"]);
    expect(evaluate(st, 8, { available: 8, total: 8 }, at("2026-06-11T02:00:00Z"), opts)).toBe(1);
    expect(Object.keys(st.cronSince)).toEqual(["night"]);
    // Outside every window the watermark decides again.
    expect(evaluate(st, 1, { available: 1, total: 1 }, at("2026-06-11T12:00:00Z"), opts)).toBe(4);
    expect(st.decision!.reason).toBe("BelowTarget");
    expect(st.cronSince).toEqual({});
  });

  it("refuses a bad schedule or time zone at the edge", () => {
    expect(AutoscalerSpec.safeParse({ maxReplicas: 2, cronPolicies: [{ name: "x", schedule: "* 25 * * *", targetReplicas: 1 }] }).success).toBe(false);
    expect(AutoscalerSpec.safeParse({ maxReplicas: 2, cronPolicies: [{ name: "x", schedule: "* * * * *", timeZone: "Nowhere/City", targetReplicas: 1 }] }).success).toBe(false);
    expect(AutoscalerSpec.safeParse({ minReplicas: 3, maxReplicas: 2 }).success).toBe(false);
  });
});

describe("the evaluation alarm", () => {
  function memoryStore(): AutoscalerStore {
    let saved: Omit<AutoscalerState, "samples"> | null = null;
    return { loadAutoscaler: () => saved, saveAutoscaler: (st) => void (saved = st) };
  }

  it.each([
    { label: "past due", due: s(10), now: s(11), at: s(11) },
    { label: "due now", due: s(10), now: s(10), at: s(10) },
    { label: "an alarm run 3 ms short of its time", due: s(10), now: s(10) - 3, at: s(10) },
    { label: "999 ms short", due: s(10), now: s(10) - 999, at: s(10) },
    { label: "more than a second short", due: s(10), now: s(10) - 1_001, at: null },
    { label: "none set", due: null, now: s(10), at: null },
  ])("$label: judged as of $at", ({ due, now, at }) => {
    expect(evaluationTime(due, now)).toBe(at);
  });

  it("an alarm that runs with the pool's clock just short of the evaluation's time still evaluates it, and the next one is an interval after that time", () => {
    const host = new AutoscaleHost(memoryStore());
    host.set(spec(), s(0));
    expect(host.run({ replicas: 4, available: 4, total: 4 }, s(0))).toBeNull();
    const due = host.due!;
    expect(due).toBe(s(5)); // the default sampling interval
    // The pool's alarm, set for `due`, runs while the object's clock is still 3 ms short of it: a
    // claim burst has left 1 available. Judged as of now, nothing was due and the re-arm for the
    // same time was dropped by the runtime: the autoscaler never evaluated again.
    expect(host.isDue(due - 3)).toBe(true);
    expect(host.run({ replicas: 4, available: 1, total: 4 }, due - 3)).toBe(7);
    expect(host.state!.decision).toMatchObject({ at: due, reason: "BelowTarget", desiredReplicas: 7 });
    expect(host.due).toBe(due + 5_000);
    // Well before its time an alarm (another of the pool's deadlines) finds nothing due.
    expect(host.isDue(host.due! - 2_000)).toBe(false);
    expect(host.run({ replicas: 7, available: 0, total: 7 }, host.due! - 2_000)).toBeNull();
    expect(host.due).toBe(due + 5_000);
  });
});
