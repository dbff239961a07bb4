// Auto-pause by probe, the pure part: the idle threshold measured from the last change of the
// probe's status or message, fail-closed on errors, and the scheduled wake.
import { describe, expect, it } from "vitest";
import { initialProbe, isIdle, nextResume, observeProbe } from "../../../durable-objects/probes/machine.ts";

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
