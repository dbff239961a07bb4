// The isolate's flush of its counts into EdgeMetricsDO (durable-objects/metrics/edge-metrics.ts),
// when the flush in flight never settles: workerd ties the DO call to the request that started it,
// and an admin scrape whose client left mid-flush takes the call with it.
import { afterEach, expect, it, vi } from "vitest";
import type { Env } from "../../../../durable-objects/env.ts";
import { FLUSH_JOIN_MS, FLUSH_MS, countEvent, flushDue, flushNow } from "../../../../durable-objects/metrics/edge-metrics.ts";
import type { Counts } from "../../../../durable-objects/metrics/counts.ts";

afterEach(() => void vi.useRealTimers());

/** Fake timers from 0, and an env whose EdgeMetricsDO records each `add` and answers it with
 * what `answer` gives then. */
function objectAnswering(answer: { next: () => Promise<void> }): { env: Env; added: Counts[] } {
  vi.useFakeTimers();
  vi.setSystemTime(0);
  const added: Counts[] = [];
  const stub = { add: (delta: Counts) => (added.push(structuredClone(delta)), answer.next()) };
  return { env: { EDGE_METRICS: { idFromName: (name: string) => name, get: () => stub } } as unknown as Env, added };
}

it("waits for a flush whose call never answers FLUSH_JOIN_MS at most, then flushes again", async () => {
  const answer = { next: () => new Promise<void>(() => {}) }; // the cancelled starter's call
  const { env, added } = objectAnswering(answer);

  countEvent("edge_a_total");
  void flushNow(env);
  expect(added).toHaveLength(1);
  answer.next = async () => undefined;

  countEvent("edge_b_total");
  let scraped = false;
  const scrape = flushNow(env).then(() => (scraped = true));
  await vi.advanceTimersByTimeAsync(FLUSH_JOIN_MS - 1);
  expect(scraped).toBe(false);
  await vi.advanceTimersByTimeAsync(1);
  expect(scraped).toBe(true);
  await scrape;
  expect(added.map((d) => Object.keys(d.counters))).toEqual([["edge_a_total"], ["edge_b_total"]]);

  // The background flush goes on as before: due again FLUSH_MS after the last.
  countEvent("edge_c_total");
  await vi.advanceTimersByTimeAsync(FLUSH_MS);
  await flushDue(env);
  expect(added.map((d) => Object.keys(d.counters))).toEqual([["edge_a_total"], ["edge_b_total"], ["edge_c_total"]]);
});

it("keeps one flush in flight: one taken for abandoned that answers late does not free the next one's place", async () => {
  const answer = { next: () => new Promise<void>((r) => setTimeout(r, FLUSH_JOIN_MS + 1000)) }; // slow, live
  const { env, added } = objectAnswering(answer);
  countEvent("edge_a_total");
  void flushNow(env);
  await vi.advanceTimersByTimeAsync(FLUSH_JOIN_MS);
  countEvent("edge_b_total");
  void flushNow(env); // the first taken for abandoned: this one goes beside it
  expect(added).toHaveLength(2);
  await vi.advanceTimersByTimeAsync(1000); // the first answers
  countEvent("edge_c_total");
  const scrape = flushNow(env);
  await vi.advanceTimersByTimeAsync(100);
  expect(added).toHaveLength(2); // waiting for the second
  await vi.advanceTimersByTimeAsync(FLUSH_JOIN_MS);
  expect(added.map((d) => Object.keys(d.counters))).toEqual([["edge_a_total"], ["edge_b_total"], ["edge_c_total"]]);
  await vi.advanceTimersByTimeAsync(FLUSH_JOIN_MS + 1000);
  await scrape;
});
