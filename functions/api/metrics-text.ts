// The Prometheus text exposition (format 0.0.4) of the edge's summed counts, rendered by
// prom-client. The edge's numbers are summed across isolates by EdgeMetricsDO (bucket counts,
// sums), which prom-client's Histogram cannot take (only observations); so each family is a
// metric of one Registry kept for the isolate's life, whose `get()` hands prom-client the values in
// the shape its own metrics do (a histogram's series labels as `sharedLabels`, `le` as the bucket's
// label, as prom-client's Histogram), and the Registry writes the text. Rebuilding that through
// `AggregatorRegistry.aggregate` at every scrape (a registry, a metric and a label hash per value)
// cost ~30 % more per scrape (notes s10-obs).
import { Registry } from "prom-client";
import { MS_BUCKETS, familyOf, type Counts } from "../../durable-objects/metrics/counts.ts";
import { FAMILIES } from "../../durable-objects/metrics/families.ts";

export const CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8";

type Value = { value: number; labels: Record<string, string>; sharedLabels?: Record<string, string>; metricName?: string };
type Family = { name: string; help: string; type: string; aggregator: "sum"; values: Value[] };

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

/** The families of the scrape being rendered: each registered metric's `get()` reads its own. */
let rendering = new Map<string, Family>();
const registry = new Registry();

/** Family `name` with no values yet, its help and type from FAMILIES (else untyped). */
function family(name: string): Family {
  return { name, help: FAMILIES[name]?.help ?? name, type: FAMILIES[name]?.type ?? "untyped", aggregator: "sum", values: [] };
}

function register(name: string): void {
  if (registry.getSingleMetric(name)) return;
  registry.registerMetric({ name, get: () => rendering.get(name) ?? family(name) } as unknown as Parameters<Registry["registerMetric"]>[0]);
}
// Every known family is listed, counted or not, so a scraper sees its type from the start.
for (const name of Object.keys(FAMILIES).sort()) register(name);

export async function renderPrometheus(c: Counts): Promise<string> {
  const byFamily = new Map<string, Family>();
  const values = (name: string) => {
    let f = byFamily.get(name);
    if (!f) byFamily.set(name, (f = family(name)));
    return f.values;
  };
  for (const [key, n] of Object.entries(c.counters).sort()) values(familyOf(key)).push({ value: n, labels: labelsOf(key) });
  for (const [key, h] of Object.entries(c.histograms).sort()) {
    const name = familyOf(key);
    const out = values(name);
    // One object for the series' lines: prom-client formats shared labels once per object.
    const labels = labelsOf(key);
    let cumulative = 0;
    MS_BUCKETS.forEach((le, i) => {
      cumulative += h.buckets[i] ?? 0;
      out.push({ metricName: `${name}_bucket`, labels: { le: String(le) }, sharedLabels: labels, value: cumulative });
    });
    out.push({ metricName: `${name}_bucket`, labels: { le: "+Inf" }, sharedLabels: labels, value: h.count });
    out.push({ metricName: `${name}_sum`, labels, value: h.sum });
    out.push({ metricName: `${name}_count`, labels, value: h.count });
  }
  // A family no FAMILIES entry names (a series of an older isolate) is still shown, typed untyped.
  for (const name of byFamily.keys()) register(name);
  rendering = byFamily;
  // Each metric's get() runs now, before the first await: a concurrent scrape cannot swap `rendering` under it.
  return registry.metrics();
}
