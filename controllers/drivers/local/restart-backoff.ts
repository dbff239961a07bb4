/**
 * When a sandbox whose init process (pid 1) ended is started again (local-driver.ts ensure). Root
 * inside ends pid 1 with an everyday command (`pkill sleep`, `kill -9 -1`: bwrap's init exits once
 * its first child has and no other is left), so the sandbox is rebooted, as Kubernetes restarts a
 * dead container: files kept, processes gone. One ended soon after its last start waits first, so a
 * tenant killing it in a loop costs the host a start per RESTART_MAX_MS rather than a busy loop.
 * Until it runs again it reports `restarting` (below) while the restart waits (the backoff) and
 * when observed before it (the agent's hello inventory); a restart at once reports nothing in
 * between.
 */
import type { SandboxObservation } from "../driver.ts";
import type { ObservedCondition } from "../../../schema/protocol/observation.ts";
import { ReadyReason, SandboxConditionType } from "../../../schema/crd/conditions.ts";

/** A restart within this long of the last start, when that start was itself a restart, waits
 * (RESTART_FIRST_MS, then doubling). Any other start (a create, a Stop pause's resume, a recreate)
 * ended this soon is restarted at once, however often the sandbox was restarted before: quick
 * is measured from the last start, not (as session 32's brief put it) from the previous restart,
 * so a resume between two kills gets a prompt restart (README "A pid 1 that ends" says why). */
export const RESTART_QUICK_MS = 10_000;
export const RESTART_FIRST_MS = 1_000;
export const RESTART_MAX_MS = 60_000;
/** Up this long: the next restart starts the backoff over. */
export const RESTART_RESET_MS = 600_000;

export interface RestartState {
  /** When its holder last started (ms). */
  startedAt: number;
  /** The last wait (ms); 0: none yet. */
  delay: number;
  /** Restarts after pid 1 ended, for the log. */
  count: number;
  /** A wait under way: no restart before this (ms). */
  notBefore?: number;
  /** restartWait let a restart go ahead: the next start is that restart. */
  restarting?: boolean;
  /** The last start was a restart (what makes an end soon after it quick). */
  afterRestart?: boolean;
}

/** A holder started at `now` (a create, a resume, a restart). */
export function started(s: RestartState | undefined, now: number): RestartState {
  return { startedAt: now, delay: s?.delay ?? 0, count: s?.count ?? 0, afterRestart: s?.restarting === true };
}

/** Whether a sandbox whose pid 1 ended may start again at `now`: `wait` ms first (0: now), and
 * its state after this answer (`count` is the restart's number when `wait` is 0). */
export function restartWait(s: RestartState | undefined, now: number): { wait: number; next: RestartState } {
  if (!s) return { wait: 0, next: { startedAt: now, delay: 0, count: 1, restarting: true } };
  if (s.notBefore !== undefined) {
    return s.notBefore > now ? { wait: s.notBefore - now, next: s } : { wait: 0, next: { startedAt: now, delay: s.delay, count: s.count + 1, restarting: true } };
  }
  const up = now - s.startedAt;
  const delay = up >= RESTART_RESET_MS ? 0 : s.delay;
  // A restart is prompt (one kill is an accident); a quick end of a restart's pid 1 waits.
  if (up < RESTART_QUICK_MS && s.afterRestart) {
    const wait = delay ? Math.min(2 * delay, RESTART_MAX_MS) : RESTART_FIRST_MS;
    return { wait, next: { ...s, delay: wait, notBefore: now + wait } };
  }
  return { wait: 0, next: { startedAt: now, delay, count: s.count + 1, restarting: true } };
}

/**
 * What a sandbox whose pid 1 ended reports until it runs again: Pending, not ready, with a Ready
 * condition False of reason `Pid1Restarting` (the reconciler passes a host-view driver's
 * conditions on, not its `reason`). The edge keeps its phase and shows it not ready by that
 * reason, and its gateway holds the sandbox's requests until a report says it is ready again:
 * the runtime has no sandbox by that id meanwhile, and its 502 reads to the SDK as a sandbox that
 * was killed (docs/ARCHITECTURE.md, the root-in-a-sandbox row).
 */
export function restarting(obs: SandboxObservation, message: string, retryAfterMs?: number): SandboxObservation {
  const ready: ObservedCondition = { type: SandboxConditionType.Ready, status: "False", reason: ReadyReason.Pid1Restarting, message };
  return { ...obs, phase: "Pending", message, conditions: [ready, ...(obs.conditions ?? [])], ...(retryAfterMs ? { retryAfterMs } : {}) };
}
