// The isolate's flush of its counts into EdgeMetricsDO (durable-objects/metrics/edge-metrics.ts),
// when the flush in flight never settles: workerd ties the DO call to the request that started it,
// and an admin scrape whose client left mid-flush takes the call with it.
import { afterEach, expect, it, vi } from "vitest";
import type { Env } from "../../../../durable-objects/env.ts";
import { FLUSH_JOIN_MS, FLUSH_MS, countEvent, flushDue, flushNow } from "../../../../durable-objects/metrics/edge-metrics.ts";
import type { Counts } from "../../../../durable-objects/metrics/counts.ts";

afterEach(() => void vi.useRealTimers());

it("waits for a flush whose call never answers FLUSH_JOIN_MS at most, then flushes again", async () => {
  vi.useFakeTimers();
  vi.setSystemTime(0);
  const added: Counts[] = [];
  let answer = () => new Promise<void>(() => {}); // the cancelled starter's call
  const stub = { add: (delta: Counts) => (added.push(structuredClone(delta)), answer()) };
  const env = { EDGE_METRICS: { idFromName: (name: string) => name, get: () => stub } } as unknown as Env;

  countEvent("edge_a_total");
  void flushNow(env);
  expect(added).toHaveLength(1);
  answer = async () => undefined;

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
