// Auto-pause by probe, the pure part (openkruise-agents.md §1.1.3): each probe result updates a
// condition whose `since` moves only when its status or message changes (upstream's
// lastTransitionTime), the sandbox is idle once the message has matched the regex for the
// threshold, an error or timeout is Unknown and never idle (fail-closed), and the scheduled wake
// after a pause is `resume.at` or the next minute of `resume.schedule`.
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

/** Minutes scanned for a schedule's next window (8 days: any weekly schedule). */
const SCAN_MINUTES = 8 * 24 * 60;

/** When a sandbox paused at `pausedAt` is woken; null with no resume rule or no window found. */
export function nextResume(resume: AutoPausePolicy["resume"], pausedAt: number): number | null {
  if (!resume) return null;
  if (resume.at) return Math.max(Date.parse(resume.at), pausedAt);
  const cron = parseCron(resume.schedule!);
  const first = Math.floor(pausedAt / 60_000) * 60_000 + 60_000;
  for (let i = 0; i < SCAN_MINUTES; i++) {
    const t = first + i * 60_000;
    if (inWindow(cron, t, resume.timeZone ?? "UTC")) return t;
  }
  return null;
}
