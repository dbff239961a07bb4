// What this isolate counted since its last flush, and the flush into EdgeMetricsDO.
//
// Workers share no memory across isolates, and an isolate's own counters vanish with it, so a
// per-isolate registry would answer each scrape with whichever isolate served it. Instead every
// isolate (the Worker's and the Durable Objects') adds into a small module-level `Counts` (a map
// increment: the hot path's whole cost) and, at most once per FLUSH_MS and only with something to
// say, hands it to the one EdgeMetricsDO in the background. /admin/metrics flushes its own isolate
// first, then reads the sum. Cost: one DO call per active isolate per FLUSH_MS; what an isolate
// counted in its last FLUSH_MS before being evicted is lost (a scrape's numbers are a lower bound
// by at most that much), and a failed flush is merged back to go out with the next. A flush in
// flight is waited for FLUSH_JOIN_MS at most (its starter may be cancelled with it: below).
import { stubOf } from "../object-ids.ts";
import type { Env } from "../env.ts";
import { addCount, addObservation, emptyCounts, isEmpty, mergeCounts, seriesKey, type Counts, type Labels } from "./counts.ts";

export const FLUSH_MS = 5_000;

/** How long a flush in flight is waited for (the DO call answers in milliseconds). workerd ties the
 * call to the request or object that started it; if that is cancelled first (an admin scrape whose
 * client left mid-flush), the call never settles, and waited for for good, this isolate would never
 * flush again and its /admin/metrics would hang. Past this the flush is taken for abandoned: the
 * next one goes, and its counts are lost (whether they reached the DO is unknown; a scrape is a
 * lower bound already). One merely slow runs on beside the next, which the DO adds up the same. */
export const FLUSH_JOIN_MS = 5_000;

let pending: Counts = emptyCounts();
let lastFlush = 0;
let inflight: { flush: Promise<void>; started: number } | null = null;

export function metricsStub(env: Env) {
  return stubOf(env.EDGE_METRICS, "edge");
}

/** Counts one event (`edge_*_total`) of this isolate. */
export function countEvent(name: string, labels?: Labels, n = 1): void {
  addCount(pending, seriesKey(name, labels), n);
}

/** Records a duration in milliseconds into a histogram of this isolate. */
export function observeMs(name: string, labels: Labels | undefined, ms: number): void {
  addObservation(pending, seriesKey(name, labels), ms);
}

/** Times `work` into a histogram (failures too: a refused call's latency is latency). */
export async function timedMs<T>(name: string, labels: Labels, work: () => Promise<T>): Promise<T> {
  const started = Date.now();
  try {
    return await work();
  } finally {
    observeMs(name, labels, Date.now() - started);
  }
}

/**
 * Starts a flush when one is due (something counted, FLUSH_MS since the last). Returns the flush
 * in flight, if any, for a request's `waitUntil`.
 */
export function flushDue(env: Env, now = Date.now()): Promise<void> | undefined {
  const current = inFlight(now);
  if (current || isEmpty(pending) || now - lastFlush < FLUSH_MS) return current?.flush;
  return flushNow(env, now);
}

/** Flushes what this isolate holds now (after any flush in flight, FLUSH_JOIN_MS at most). */
export async function flushNow(env: Env, now = Date.now()): Promise<void> {
  let waited = false;
  for (let current = inFlight(now); current; current = inFlight(Date.now())) {
    await joined(current);
    waited = true;
  }
  if (isEmpty(pending)) return;
  // Dated when it starts: after a wait, `now` would make this flush look abandoned at once.
  if (waited) now = Date.now();
  const delta = pending;
  pending = emptyCounts();
  lastFlush = now;
  const flush: Promise<void> = metricsStub(env)
    .add(delta)
    .catch(() => mergeCounts(pending, delta))
    .finally(() => {
      if (inflight?.flush === flush) inflight = null;
    });
  inflight = { flush, started: now };
  await flush;
}

/** The flush in flight, unless it is FLUSH_JOIN_MS old: then it is forgotten. */
function inFlight(now: number): typeof inflight {
  if (inflight && now - inflight.started >= FLUSH_JOIN_MS) inflight = null;
  return inflight;
}

/** `current` settled, or its FLUSH_JOIN_MS up, on a timer of this caller's own (a timer in the
 * caller's context fires even if the flush's starter is gone). */
function joined(current: NonNullable<typeof inflight>): Promise<void> {
  return new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, Math.max(0, current.started + FLUSH_JOIN_MS - Date.now()));
    void current.flush.finally(() => (clearTimeout(timer), resolve()));
  });
}

/** Counts and schedules a flush from a Durable Object (it has no request's waitUntil: the flush
 * runs while the object lives, as its other background work does). */
export function countInObject(env: Env, name: string, labels?: Labels): void {
  countEvent(name, labels);
  void flushDue(env);
}
