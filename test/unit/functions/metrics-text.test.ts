// The edge's Prometheus renderer over summed counts, read back by an independent text parser:
// counters, cumulative millisecond buckets, escaped label values, and merged isolate flushes.
import { describe, expect, it } from "vitest";
import { addCount, addObservation, emptyCounts, mergeCounts, seriesKey } from "../../../durable-objects/metrics/counts.ts";
import { renderPrometheus } from "../../../functions/api/metrics-text.ts";
import { parsePrometheus, value } from "../../support/prometheus-text.ts";

describe("edge metrics text", () => {
  it("renders summed isolate counts as Prometheus text a parser reads back", async () => {
    const a = emptyCounts();
    const b = emptyCounts();
    addCount(a, seriesKey("edge_errors_total", { code: "not_found" }), 2);
    addCount(b, seriesKey("edge_errors_total", { code: "not_found" }));
    addCount(b, seriesKey("edge_http_requests_total", { route: '/odd"\\route\n', method: "GET", status: "200" }));
    for (const ms of [0.5, 3, 3, 40, 60_000]) addObservation(a, seriesKey("edge_create_stage_duration_ms", { stage: "claim" }), ms);
    addObservation(b, seriesKey("edge_create_stage_duration_ms", { stage: "start" }), 7);
    const total = emptyCounts();
    mergeCounts(total, a);
    mergeCounts(total, b);
    const m = parsePrometheus(await renderPrometheus(total));
    expect(m.types.get("edge_errors_total")).toBe("COUNTER");
    expect(m.types.get("edge_create_stage_duration_ms")).toBe("HISTOGRAM");
    expect(m.types.get("edge_sandbox_creates_total")).toBe("COUNTER"); // listed before anything counted
    expect(value(m, "edge_errors_total", { code: "not_found" })).toBe(3);
    expect(value(m, "edge_http_requests_total", { route: '/odd"\\route\n' })).toBe(1);
    const bucket = (le: string, stage = "claim") => value(m, "edge_create_stage_duration_ms_bucket", { stage, le });
    expect([bucket("1"), bucket("2"), bucket("5"), bucket("50"), bucket("30000"), bucket("+Inf")]).toEqual([1, 1, 3, 4, 4, 5]);
    expect(value(m, "edge_create_stage_duration_ms_count", { stage: "claim" })).toBe(5);
    expect(value(m, "edge_create_stage_duration_ms_sum", { stage: "claim" })).toBe(60_046.5);
    expect(bucket("5", "start")).toBe(0);
    expect(bucket("10", "start")).toBe(1);
  });
});
