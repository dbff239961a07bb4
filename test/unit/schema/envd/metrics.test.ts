// envd's GET /metrics as the edge accepts it from a runtime (a pod's is the tenant's): anything but
// the shape is no sample, not a 500 (review24 edge F8).
import { describe, expect, it } from "vitest";
import { parseEnvdMetrics } from "../../../../schema/envd/http.ts";

const good = { ts: 1_780_000_000, cpu_count: 2, cpu_used_pct: 12.5, mem_used: 1e8, mem_total: 5e8, mem_cache: 0, disk_used: 1e9, disk_total: 2e9 };

describe("parseEnvdMetrics", () => {
  it("takes envd's shape (mem_cache optional), dropping unknown fields", () => {
    expect(parseEnvdMetrics({ ...good, extra: "x" })).toEqual(good);
    const { mem_cache: _, ...noCache } = good;
    expect(parseEnvdMetrics(noCache)).toEqual(noCache);
  });

  it("refuses what would break the answer: a ts that is not whole seconds of a renderable date, a figure that is not a finite number ≥ 0, not an object", () => {
    for (const bad of [
      { ...good, ts: "now" },
      { ...good, ts: 1.5 },
      { ...good, ts: -1 },
      { ...good, ts: 1e300 },
      { ...good, cpu_used_pct: "12" },
      { ...good, mem_used: null },
      { ...good, mem_total: -5 },
      { ...good, mem_cache: "0" },
      { ...good, disk_total: undefined },
      [good],
      null,
      "metrics",
      undefined,
    ]) {
      expect(parseEnvdMetrics(bad)).toBeUndefined();
    }
  });
});
