// Cron schedules as windows of wall-clock time in a time zone: across midnight, on DST days (a
// spring-forward hour that does not exist, a fall-back hour that happens twice), the day-field rule.
import { describe, expect, it } from "vitest";
import { inWindow, isTimeZone, parseCron } from "../../../lib/cron.ts";

const at = (iso: string) => Date.parse(iso);
const holds = (schedule: string, iso: string, tz?: string) => inWindow(parseCron(schedule), at(iso), tz);

describe("cron windows", () => {
  it.each([
    ["2026-06-10T23:30:00Z", true],
    ["2026-06-11T00:10:00Z", true], // after midnight: the same night's window
    ["2026-06-11T05:59:00Z", true],
    ["2026-06-11T06:00:00Z", false],
    ["2026-06-10T21:59:00Z", false],
  ])("a night window 22:00-05:59 across midnight at %s: %s", (iso, expected) => {
    expect(holds("* 22-23,0-5 * * *", iso)).toBe(expected);
  });

  it("a window across midnight at the end of a week: Saturday night into Sunday", () => {
    const sched = ["* 22-23 * * SAT", "* 0-5 * * SUN"];
    const any = (iso: string) => sched.some((s) => holds(s, iso));
    expect(any("2026-06-13T23:00:00Z")).toBe(true); // Saturday
    expect(any("2026-06-14T03:00:00Z")).toBe(true); // Sunday
    expect(any("2026-06-15T03:00:00Z")).toBe(false); // Monday
  });

  it("reads the fields in the policy's time zone, following its DST", () => {
    const office = "* 9-16 * * MON-FRI";
    // 13:30 UTC is 09:30 in New York in summer time, 08:30 in winter time.
    expect(holds(office, "2026-03-09T13:30:00Z", "America/New_York")).toBe(true); // Monday after spring-forward
    expect(holds(office, "2026-03-02T13:30:00Z", "America/New_York")).toBe(false); // Monday before it
    expect(holds(office, "2026-03-02T14:30:00Z", "America/New_York")).toBe(true);
    expect(holds(office, "2026-03-09T13:30:00Z")).toBe(true); // UTC by default
  });

  it("a spring-forward day has no 02:xx: a window of only that hour does not occur", () => {
    const two = "* 2 * * *";
    expect(holds(two, "2026-03-07T07:30:00Z", "America/New_York")).toBe(true); // 02:30 EST the day before
    // 2026-03-08: 01:59 EST is followed by 03:00 EDT.
    for (const iso of ["2026-03-08T06:59:00Z", "2026-03-08T07:00:00Z", "2026-03-08T07:30:00Z", "2026-03-08T08:00:00Z"]) {
      expect(holds(two, iso, "America/New_York")).toBe(false);
    }
  });

  it("a fall-back day has its 01:xx twice: the window holds for both", () => {
    const one = "* 1 * * *";
    expect(holds(one, "2026-11-01T05:30:00Z", "America/New_York")).toBe(true); // 01:30 EDT
    expect(holds(one, "2026-11-01T06:30:00Z", "America/New_York")).toBe(true); // 01:30 EST
    expect(holds(one, "2026-11-01T07:30:00Z", "America/New_York")).toBe(false); // 02:30 EST
    expect(holds(one, "2026-10-25T00:30:00Z", "Europe/Berlin")).toBe(false); // 02:30 CEST
    expect(holds("* 2 * * *", "2026-10-25T00:30:00Z", "Europe/Berlin")).toBe(true);
    expect(holds("* 2 * * *", "2026-10-25T01:30:00Z", "Europe/Berlin")).toBe(true); // 02:30 CET, the second time
  });

  it("steps, lists, names, and both day fields restricted match either", () => {
    expect(holds("*/15 * * * *", "2026-06-10T10:45:00Z")).toBe(true);
    expect(holds("*/15 * * * *", "2026-06-10T10:46:00Z")).toBe(false);
    expect(holds("5-50/15 * * * *", "2026-06-10T10:35:00Z")).toBe(true);
    expect(holds("* * * JAN-MAR *", "2026-02-10T10:00:00Z")).toBe(true);
    expect(holds("* * * JAN-MAR *", "2026-04-10T10:00:00Z")).toBe(false);
    expect(holds("* * 1 * 1", "2026-06-01T10:00:00Z")).toBe(true); // the 1st
    expect(holds("* * 1 * 1", "2026-06-08T10:00:00Z")).toBe(true); // a Monday
    expect(holds("* * 1 * 1", "2026-06-09T10:00:00Z")).toBe(false);
    expect(holds("* * * * 7", "2026-06-14T10:00:00Z")).toBe(true); // 7 is Sunday
  });

  it.each(["61 * * * *", "* * * *", "5-1 * * * *", "*/0 * * * *", "* * 0 * *", "* * * FOO *", "1/2/3 * * * *", "a * * * *"])("refuses %j", (s) => {
    expect(() => parseCron(s)).toThrow();
  });

  it("knows IANA zones", () => {
    expect(isTimeZone("Asia/Shanghai")).toBe(true);
    expect(isTimeZone("Mars/Olympus")).toBe(false);
  });
});
