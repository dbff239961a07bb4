// The Prometheus text exposition (format 0.0.4) of the edge's summed counts. Hand-rolled on
// purpose: prom-client does bundle and run on workerd with nodejs_compat (~185 KiB for a bare
// counter), but the edge's numbers are already aggregated in EdgeMetricsDO (bucket counts, sums),
// which prom-client's Histogram cannot take, only observations; rendering them is a loop.
import { MS_BUCKETS, familyOf, type Counts } from "../../durable-objects/metrics/counts.ts";
import { FAMILIES } from "../../durable-objects/metrics/families.ts";

export const CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8";

/** `name{labels}` + suffix, with `extra` (the `le` label) appended to the labels. */
function series(key: string, suffix: string, extra?: string): string {
  const i = key.indexOf("{");
  const name = i < 0 ? key : key.slice(0, i);
  const labels = i < 0 ? "" : key.slice(i + 1, -1);
  const all = [labels, extra].filter(Boolean).join(",");
  return `${name}${suffix}${all ? `{${all}}` : ""}`;
}

export function renderPrometheus(c: Counts): string {
  const byFamily = new Map<string, string[]>();
  const lines = (family: string) => {
    let l = byFamily.get(family);
    if (!l) byFamily.set(family, (l = []));
    return l;
  };
  for (const [key, n] of Object.entries(c.counters).sort()) lines(familyOf(key)).push(`${series(key, "")} ${n}`);
  for (const [key, h] of Object.entries(c.histograms).sort()) {
    const out = lines(familyOf(key));
    let cumulative = 0;
    MS_BUCKETS.forEach((le, i) => {
      cumulative += h.buckets[i] ?? 0;
      out.push(`${series(key, "_bucket", `le="${le}"`)} ${cumulative}`);
    });
    out.push(`${series(key, "_bucket", 'le="+Inf"')} ${h.count}`);
    out.push(`${series(key, "_sum")} ${h.sum}`);
    out.push(`${series(key, "_count")} ${h.count}`);
  }
  let text = "";
  // Every known family is listed, counted or not, so a scraper sees its type from the start.
  const names = new Set([...Object.keys(FAMILIES), ...byFamily.keys()]);
  for (const name of [...names].sort()) {
    const f = FAMILIES[name];
    if (f) text += `# HELP ${name} ${f.help}\n# TYPE ${name} ${f.type}\n`;
    for (const l of byFamily.get(name) ?? []) text += `${l}\n`;
  }
  return text;
}
