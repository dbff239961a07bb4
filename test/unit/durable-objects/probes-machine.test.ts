// Auto-pause by probe, the pure part: the idle threshold measured from the last change of the
// probe's status or message, fail-closed on errors, and the scheduled wake.
import { describe, expect, it } from "vitest";
import { initialProbe, isIdle, nextResume, observeProbe, probedWake } from "../../../durable-objects/probes/machine.ts";
import { AutoPausePolicy } from "../../../schema/api/auto-pause.ts";

const T = Date.parse("2026-06-10T12:00:00Z");
const s = (n: number) => T + n * 1000;
const idle = /^idle$/;

describe("probe threshold", () => {
  it("is idle once the trimmed output has matched for the threshold, counted from when it started matching", () => {
    let p = initialProbe(s(0));
    p = observeProbe(p, { ok: true, output: "busy\n" }, s(0));
    p = observeProbe(p, { ok: true, output: "idle\n" }, s(10));
    p = observeProbe(p, { ok: true, output: " idle " }, s(20)); // same message: since stays
    expect(p.since).toBe(s(10));
    expect(isIdle(p, idle, 30_000, s(39))).toBe(false);
    expect(isIdle(p, idle, 30_000, s(40))).toBe(true);
  });

  it("any change restarts the count; a probe error is Unknown and never idle (fail-closed)", () => {
    let p = observeProbe(initialProbe(s(0)), { ok: true, output: "idle" }, s(0));
    p = observeProbe(p, { ok: false, reason: "Timeout", message: "5 s" }, s(20));
    expect(p.status).toBe("Unknown");
    expect(isIdle(p, /.*/, 1_000, s(100))).toBe(false);
    p = observeProbe(p, { ok: true, output: "idle" }, s(30));
    expect(isIdle(p, idle, 30_000, s(59))).toBe(false);
    expect(isIdle(p, idle, 30_000, s(60))).toBe(true);
  });
});

describe("scheduled wake", () => {
  it("resume.at, not before the pause", () => {
    expect(nextResume({ at: "2026-06-10T13:00:00Z" }, s(0))).toBe(Date.parse("2026-06-10T13:00:00Z"));
    expect(nextResume({ at: "2026-06-10T11:00:00Z" }, s(0))).toBe(s(0));
    expect(nextResume(undefined, s(0))).toBeNull();
  });
  it("the next minute of a schedule in its time zone, across midnight", () => {
    expect(nextResume({ schedule: "0 9 * * *", timeZone: "Asia/Shanghai" }, s(0))).toBe(Date.parse("2026-06-11T01:00:00Z")); // 09:00 CST next day
    expect(nextResume({ schedule: "30 0 * * *" }, Date.parse("2026-06-10T23:59:30Z"))).toBe(Date.parse("2026-06-11T00:30:00Z"));
  });
});

describe("resume.probed (whenProbedScheduleTime)", () => {
  const now = Date.parse("2026-06-10T12:00:00Z");
  it("wakes leadTime before the time the resume probe names (unix seconds or a datetime)", () => {
    expect(probedWake({ ok: true, output: ` ${now / 1000 + 3600}\n` }, "unix", 300_000, now)).toEqual({ at: now + 3_300_000 });
    expect(probedWake({ ok: true, output: "2026-06-10T14:00:00+02:00" }, "datetime", 60_000, now)).toEqual({ problem: expect.stringContaining("less than the lead time") });
    expect(probedWake({ ok: true, output: "2026-06-10T13:00:00Z" }, "datetime", 60_000, now)).toEqual({ at: now + 3_540_000 });
  });
  it("a failed probe, output that is no such time, or a task due within the lead time keeps it running (fail-closed)", () => {
    expect(probedWake({ ok: false, reason: "Timeout", message: "no answer" }, "unix", 0, now)).toEqual({ problem: "resume probe Timeout: no answer" });
    expect(probedWake({ ok: true, output: "tomorrow" }, "unix", 0, now)).toEqual({ problem: expect.stringContaining("not a unix time") });
    expect(probedWake({ ok: true, output: "1781092800" }, "datetime", 0, now)).toEqual({ problem: expect.stringContaining("not a datetime") });
    expect(probedWake({ ok: true, output: String(now / 1000 + 100) }, "unix", 300_000, now)).toEqual({ problem: expect.stringContaining("lead time") });
    expect(nextResume(AutoPausePolicy.parse({ probe: { exec: { command: ["x"] } }, messageRegex: "x", thresholdDuration: "1s", resume: { probed: { probe: { exec: { command: ["y"] } } } } }).resume, now)).toBeNull();
  });
  it("resume takes exactly one of at, schedule and probed", () => {
    const base = { probe: { exec: { command: ["x"] } }, messageRegex: "x", thresholdDuration: "1s" };
    expect(AutoPausePolicy.safeParse({ ...base, resume: { at: "2026-06-10T13:00:00Z", probed: { probe: { exec: { command: ["y"] } } } } }).success).toBe(false);
    expect(AutoPausePolicy.safeParse({ ...base, resume: {} }).success).toBe(false);
  });
});
