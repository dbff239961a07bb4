// Five-field cron schedules read as windows of wall-clock time: a schedule is "in effect" during
// every minute whose local time (in its IANA time zone) matches it, so `* 22-23,0-5 * * *` is the
// night from 22:00 to 05:59, across midnight. Local time comes from Intl, so DST is the zone's:
// a spring-forward day has no 02:xx minutes (a window of only those does not occur that day) and
// a fall-back day has its 01:xx twice (the window holds for both).
//
// Fields: minute 0-59, hour 0-23, day of month 1-31, month 1-12 (JAN-DEC), day of week 0-7
// (SUN-SAT, 7 is Sunday); each a list of `*`, `n`, `a-b`, with an optional `/step`. As in Vixie
// cron, when both day fields are restricted a day matches either of them.

export interface Cron {
  minute: Set<number>;
  hour: Set<number>;
  dom: Set<number>;
  month: Set<number>;
  dow: Set<number>;
  domStar: boolean;
  dowStar: boolean;
}

const MONTHS = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"];
const DAYS = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

/** Parses a schedule; throws an Error whose message names the bad field. */
export function parseCron(schedule: string): Cron {
  const parts = schedule.trim().split(/\s+/);
  if (parts.length !== 5) throw new Error(`"${schedule}" has ${parts.length} fields, a cron schedule has 5`);
  const [mi, h, dom, mo, dow] = parts as [string, string, string, string, string];
  const dowSet = field(dow, 0, 7, DAYS, "day of week");
  if (dowSet.delete(7)) dowSet.add(0);
  return {
    minute: field(mi, 0, 59, [], "minute"),
    hour: field(h, 0, 23, [], "hour"),
    dom: field(dom, 1, 31, [], "day of month"),
    month: field(mo, 1, 12, MONTHS, "month", 1),
    dow: dowSet,
    domStar: dom === "*" || dom === "?",
    dowStar: dow === "*" || dow === "?",
  };
}

function field(text: string, min: number, max: number, names: string[], what: string, nameBase = 0): Set<number> {
  const out = new Set<number>();
  const value = (s: string): number => {
    const named = names.indexOf(s.toLowerCase());
    const n = named >= 0 ? named + nameBase : /^\d{1,2}$/.test(s) ? Number(s) : NaN;
    if (!(n >= min && n <= max)) throw new Error(`${what} "${s}" is not within ${min}-${max}`);
    return n;
  };
  for (const item of text.split(",")) {
    const [range, stepText, extra] = item.split("/");
    if (extra !== undefined || range === undefined || range === "") throw new Error(`${what} "${item}" is not a cron field`);
    const step = stepText === undefined ? 1 : /^\d{1,2}$/.test(stepText) && Number(stepText) > 0 ? Number(stepText) : NaN;
    if (Number.isNaN(step)) throw new Error(`${what} step "${stepText}" is not a positive number`);
    let lo: number;
    let hi: number;
    if (range === "*" || range === "?") [lo, hi] = [min, max];
    else if (range.includes("-")) {
      const [a, b] = range.split("-");
      [lo, hi] = [value(a ?? ""), value(b ?? "")];
      if (lo > hi) throw new Error(`${what} range "${range}" runs backwards (use a list for a range that wraps)`);
    } else {
      lo = value(range);
      hi = stepText === undefined ? lo : max;
    }
    for (let n = lo; n <= hi; n += step) out.add(n);
  }
  return out;
}

/** Whether `timeZone` is an IANA zone this runtime knows. */
export function isTimeZone(timeZone: string): boolean {
  try {
    formatter(timeZone);
    return true;
  } catch {
    return false;
  }
}

const formatters = new Map<string, Intl.DateTimeFormat>();
function formatter(timeZone: string): Intl.DateTimeFormat {
  let f = formatters.get(timeZone);
  if (!f) {
    f = new Intl.DateTimeFormat("en-US", { timeZone, hourCycle: "h23", year: "numeric", month: "numeric", day: "numeric", hour: "numeric", minute: "numeric", weekday: "short" });
    formatters.set(timeZone, f);
  }
  return f;
}

export interface WallClock {
  minute: number;
  hour: number;
  day: number;
  month: number;
  weekday: number;
}

/** The wall-clock fields of an instant in a time zone. */
export function wallClock(at: number, timeZone = "UTC"): WallClock {
  const p: Record<string, string> = {};
  for (const part of formatter(timeZone).formatToParts(at)) p[part.type] = part.value;
  return { minute: Number(p.minute), hour: Number(p.hour) % 24, day: Number(p.day), month: Number(p.month), weekday: DAYS.indexOf((p.weekday ?? "").toLowerCase()) };
}

/** Whether the minute holding `at` is inside the schedule's window, in `timeZone`. */
export function inWindow(cron: Cron, at: number, timeZone = "UTC"): boolean {
  const t = wallClock(at, timeZone);
  if (!cron.minute.has(t.minute) || !cron.hour.has(t.hour) || !cron.month.has(t.month)) return false;
  const dom = cron.dom.has(t.day);
  const dow = cron.dow.has(t.weekday);
  if (cron.domStar || cron.dowStar) return dom && dow;
  return dom || dow;
}
