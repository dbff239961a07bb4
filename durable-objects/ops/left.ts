// The snapshots an ops run holds past its members' upgrades (store.ts `left_snapshots`: a run
// deleted mid-upgrade, a paused member whose restore waits for its resume): when each is looked at
// again, and what a failed delete does. Pure, beside the shell (update-ops-do.ts `freeLeft`).
//
// A snapshot still needed is asked about again after a wait that doubles each time, from
// LEFT_FIRST_CHECK_MS up to LEFT_MAX_CHECK_MS: a member can stay paused for days, and a fixed 2 s
// poll of its group for every kept snapshot is work for nothing. The sandbox's group also wakes the
// holder when the restore stops being owed (`wake`), so the wait bounds only a lost wake-up.
import type { LeftSnapshot } from "./store.ts";
import { MAX_FREE_ATTEMPTS } from "./machine.ts";

export const LEFT_FIRST_CHECK_MS = 2_000;
export const LEFT_MAX_CHECK_MS = 10 * 60_000;
const DELETE_BACKOFF_MS = 1_000;

/** Whether `l` is to be looked at now. */
export function leftDue(l: LeftSnapshot, now: number): boolean {
  return (l.nextAt ?? 0) <= now;
}

/** Its sandbox still needs it: looked at again after twice the last wait, capped. */
export function stillNeeded(l: LeftSnapshot, now: number): LeftSnapshot {
  const checks = (l.checks ?? 0) + 1;
  return { ...l, checks, nextAt: now + Math.min(LEFT_MAX_CHECK_MS, LEFT_FIRST_CHECK_MS * 2 ** (checks - 1)) };
}

/** Its delete failed: tried again later (backing off), or, after MAX_FREE_ATTEMPTS, given up on
 * (`null`: forgotten, left to the team). */
export function deleteFailed(l: LeftSnapshot, now: number): LeftSnapshot | null {
  const attempts = l.attempts + 1;
  if (attempts >= MAX_FREE_ATTEMPTS) return null;
  return { ...l, attempts, nextAt: now + DELETE_BACKOFF_MS * 2 ** (attempts - 1) };
}

/** Its sandbox said the restore may no longer be owed: looked at now, the wait starts over. */
export function woken(l: LeftSnapshot): LeftSnapshot {
  const { nextAt: _n, checks: _c, ...rest } = l;
  return rest;
}

/** When the shell should next look at its left snapshots (none: nothing left). */
export function nextLeftAt(left: LeftSnapshot[]): number | undefined {
  return left.length ? Math.min(...left.map((l) => l.nextAt ?? 0)) : undefined;
}
