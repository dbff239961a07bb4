// The Prometheus text exposition (format 0.0.4) of the edge's summed counts, rendered by
// prom-client. The edge's numbers are summed across isolates by EdgeMetricsDO (bucket counts,
// sums), which prom-client's Histogram cannot take (only observations); so they are handed to
// prom-client in the shape its own registries export (`getMetricsAsJSON`) and rendered through
// `AggregatorRegistry.aggregate`, the call that sums a Node cluster's workers' registries.
import { AggregatorRegistry } from "prom-client";
import { MS_BUCKETS, familyOf, type Counts } from "../../durable-objects/metrics/counts.ts";
import { FAMILIES } from "../../durable-objects/metrics/families.ts";

export const CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8";

type Value = { value: number; labels: Record<string, string>; metricName?: string };

const LABEL = /(\w+)="((?:[^"\\]|\\.)*)"/g;
const UNESCAPE: Record<string, string> = { "\\\\": "\\", '\\"': '"', "\\n": "\n" };

/** The labels of a series key (`name{k="v",...}`, escaped as counts.ts writes them). */
function labelsOf(key: string): Record<string, string> {
  const labels: Record<string, string> = {};
  const i = key.indexOf("{");
  if (i < 0) return labels;
  for (const m of key.slice(i + 1, -1).matchAll(LABEL)) labels[m[1]!] = m[2]!.replace(/\\[\\"n]/g, (e) => UNESCAPE[e]!);
  return labels;
}

export async function renderPrometheus(c: Counts): Promise<string> {
  const byFamily = new Map<string, Value[]>();
  const values = (family: string) => {
    let v = byFamily.get(family);
    if (!v) byFamily.set(family, (v = []));
    return v;
  };
  for (const [key, n] of Object.entries(c.counters).sort()) values(familyOf(key)).push({ value: n, labels: labelsOf(key) });
  for (const [key, h] of Object.entries(c.histograms).sort()) {
    const name = familyOf(key);
    const out = values(name);
    const labels = labelsOf(key);
    let cumulative = 0;
    MS_BUCKETS.forEach((le, i) => {
      cumulative += h.buckets[i] ?? 0;
      out.push({ metricName: `${name}_bucket`, labels: { ...labels, le: String(le) }, value: cumulative });
    });
    out.push({ metricName: `${name}_bucket`, labels: { ...labels, le: "+Inf" }, value: h.count });
    out.push({ metricName: `${name}_sum`, labels, value: h.sum });
    out.push({ metricName: `${name}_count`, labels, value: h.count });
  }
  // Every known family is listed, counted or not, so a scraper sees its type from the start.
  const names = [...new Set([...Object.keys(FAMILIES), ...byFamily.keys()])].sort();
  const metrics = names.map((name) => ({ name, help: FAMILIES[name]?.help ?? name, type: FAMILIES[name]?.type ?? "untyped", aggregator: "sum", values: byFamily.get(name) ?? [] }));
  return AggregatorRegistry.aggregate([metrics]).metrics();
}
