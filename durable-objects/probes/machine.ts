// Auto-pause by probe, the pure part (openkruise-agents.md §1.1.3): each probe result updates a
// condition whose `since` moves only when its status or message changes (upstream's
// lastTransitionTime), the sandbox is idle once the message has matched the regex for the
// threshold, an error or timeout is Unknown and never idle (fail-closed), and the scheduled wake
// after a pause is `resume.at`, the next minute of `resume.schedule`, or the time a resume probe
// names (`probedWake`).
import type { AutoPausePolicy } from "../../schema/api/auto-pause.ts";
import { MAX_PROBE_MESSAGE } from "../../schema/api/auto-pause.ts";
import { inWindow, parseCron } from "../../lib/cron.ts";

export interface ProbeState {
  status: "True" | "Unknown" | null;
  message: string;
  since: number;
}

export type ProbeResult = { ok: true; output: string } | { ok: false; reason: "Timeout" | "Error"; message: string };

export const initialProbe = (now: number): ProbeState => ({ status: null, message: "", since: now });

export function observeProbe(s: ProbeState, r: ProbeResult, now: number): ProbeState {
  const status = r.ok ? "True" : "Unknown";
  const message = r.ok ? r.output.trim().slice(0, MAX_PROBE_MESSAGE) : `${r.reason}: ${r.message}`.slice(0, MAX_PROBE_MESSAGE);
  if (status === s.status && message === s.message) return s;
  return { status, message, since: now };
}

export function isIdle(s: ProbeState, regex: RegExp, thresholdMs: number, now: number): boolean {
  return s.status === "True" && regex.test(s.message) && now - s.since >= thresholdMs;
}

/**
 * `resume.probed`: when a sandbox about to pause at `now` wakes, from its resume probe's result (the
 * next task's time, `leadMs` ahead of it), or why it must not pause (fail-closed: a failed probe,
 * output that is not a time, or a wake not after `now`, whose task is due anyway).
 */
export function probedWake(r: ProbeResult, timeFormat: "unix" | "datetime", leadMs: number, now: number): { at: number } | { problem: string } {
  if (!r.ok) return { problem: `resume probe ${r.reason}: ${r.message}`.slice(0, MAX_PROBE_MESSAGE) };
  const text = r.output.trim();
  const task = timeFormat === "unix" ? (/^\d{1,12}$/.test(text) ? Number(text) * 1000 : NaN) : /^\d{4}-\d{2}-\d{2}T/.test(text) ? Date.parse(text) : NaN;
  if (!Number.isFinite(task)) return { problem: `resume probe output ${JSON.stringify(text.slice(0, 64))} is not a ${timeFormat === "unix" ? "unix time in seconds" : "datetime"}` };
  const at = task - leadMs;
  if (at <= now) return { problem: `the next task (${new Date(task).toISOString()}) is less than the lead time away` };
  return { at };
}

/** Minutes scanned for a schedule's next window (8 days: any weekly schedule). */
const SCAN_MINUTES = 8 * 24 * 60;

/** When a sandbox paused at `pausedAt` is woken; null with no resume rule or no window found. */
export function nextResume(resume: AutoPausePolicy["resume"], pausedAt: number): number | null {
  if (!resume || resume.probed) return null;
  if (resume.at) return Math.max(Date.parse(resume.at), pausedAt);
  const cron = parseCron(resume.schedule!);
  const first = Math.floor(pausedAt / 60_000) * 60_000 + 60_000;
  for (let i = 0; i < SCAN_MINUTES; i++) {
    const t = first + i * 60_000;
    if (inWindow(cron, t, resume.timeZone ?? "UTC")) return t;
  }
  return null;
}
