/** @jsxImportSource hono/jsx */
// The create's per-stage latency as an inline SVG bar chart (p50 and p95 per stage, read from the
// edge's millisecond histograms), with the same numbers in a table for screen readers and for
// anyone who prefers text.
import { MS_BUCKETS, type HistogramCounts } from "../../durable-objects/metrics/counts.ts";
import type { StageLatency } from "./data.ts";

/** The upper bound (ms) of the bucket holding the q-quantile; null for an empty histogram, Infinity past the last bound. */
export function quantileMs(h: HistogramCounts, q: number): number | null {
  if (h.count === 0) return null;
  const rank = Math.ceil(q * h.count);
  let seen = 0;
  for (let i = 0; i < h.buckets.length; i++) {
    seen += h.buckets[i] ?? 0;
    if (seen >= rank) return i < MS_BUCKETS.length ? MS_BUCKETS[i]! : Infinity;
  }
  return Infinity;
}

const fmt = (ms: number | null) => (ms === null ? "–" : ms === Infinity ? `> ${MS_BUCKETS.at(-1)} ms` : `≤ ${ms} ms`);

export function LatencyChart({ stages }: { stages: StageLatency[] }) {
  if (stages.length === 0) return <p>No creates measured yet.</p>;
  const rows = stages.map((s) => ({ stage: s.stage, count: s.histogram.count, p50: quantileMs(s.histogram, 0.5), p95: quantileMs(s.histogram, 0.95) }));
  const finite = (ms: number | null) => (ms === null ? 0 : ms === Infinity ? MS_BUCKETS.at(-1)! * 2 : ms);
  // Log scale: stages differ by orders of magnitude.
  const max = Math.max(...rows.map((r) => finite(r.p95)), 1);
  const scale = (ms: number) => (ms <= 0 ? 0 : (Math.log10(ms + 1) / Math.log10(max + 1)) * 150);
  const rowH = 44;
  return (
    <figure>
      <svg role="img" aria-labelledby="latency-title" viewBox={`0 0 420 ${rows.length * rowH + 10}`} width="100%" style="max-width:40rem">
        <title id="latency-title">Create latency per stage: p50 and p95 in milliseconds</title>
        {rows.map((r, i) => (
          <g transform={`translate(0 ${i * rowH + 5})`}>
            <text x="0" y="15" class="chart-label">{r.stage}</text>
            <rect x="90" y="4" height="14" width={scale(finite(r.p50))} class="bar-p50" />
            <rect x="90" y="22" height="14" width={scale(finite(r.p95))} class="bar-p95" />
            <text x={94 + scale(finite(r.p50))} y="15" class="chart-value">p50 {fmt(r.p50)}</text>
            <text x={94 + scale(finite(r.p95))} y="33" class="chart-value">p95 {fmt(r.p95)}</text>
          </g>
        ))}
      </svg>
      <figcaption>
        <table>
          <caption>Create latency per stage (bucket upper bounds)</caption>
          <thead><tr><th scope="col">Stage</th><th scope="col">Creates</th><th scope="col">p50</th><th scope="col">p95</th></tr></thead>
          <tbody>
            {rows.map((r) => (
              <tr data-stage={r.stage}><td>{r.stage}</td><td>{r.count}</td><td>{fmt(r.p50)}</td><td>{fmt(r.p95)}</td></tr>
            ))}
          </tbody>
        </table>
      </figcaption>
    </figure>
  );
}
