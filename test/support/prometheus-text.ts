// Parses the Prometheus text format with an independent parser (parse-prometheus-text-format, a
// port of the Prometheus Python client's), so tests check what a real scraper reads rather than
// round-tripping prom-client's own registry.
//
// That parser folds a histogram's series into one, dropping their labels (it handles unlabelled
// histograms only), so values are read from a second parse of the same text without its TYPE
// lines: every series (`x_bucket{le=...}`, `x_count{stage=...}`) is then a plain sample with its
// labels. The first parse still checks the whole exposition and gives each family's type.
// @ts-expect-error: the package ships no type declarations
import parsePrometheusTextFormat from "parse-prometheus-text-format";

interface ParsedFamily {
  name: string;
  type: string;
  metrics: { labels?: Record<string, string>; value?: string }[];
}
const parse = parsePrometheusTextFormat as (text: string) => ParsedFamily[];

export interface Scrape {
  /** Family name → its type (COUNTER, GAUGE, HISTOGRAM, ...). */
  types: Map<string, string>;
  /** Every series: name (with its _bucket/_count/_sum suffix), labels, value. */
  samples: { name: string; labels: Record<string, string>; value: number }[];
}

export function parsePrometheus(text: string): Scrape {
  const types = new Map(parse(text).map((f) => [f.name, f.type]));
  const untyped = text
    .split("\n")
    .filter((l) => !l.startsWith("# TYPE "))
    .join("\n");
  const samples = parse(untyped).flatMap((f) => f.metrics.map((m) => ({ name: f.name, labels: m.labels ?? {}, value: Number(m.value) })));
  return { types, samples };
}

/** The sum of the series of `name` whose labels include `labels` (0 when none: not yet counted). */
export function value(scrape: Scrape, name: string, labels: Record<string, string> = {}): number {
  return scrape.samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v)).reduce((n, s) => n + s.value, 0);
}

export async function scrape(url: string, init?: RequestInit): Promise<Scrape> {
  const res = await fetch(url, init);
  if (!res.ok) throw new Error(`scrape ${url}: HTTP ${res.status} ${await res.text()}`);
  return parsePrometheus(await res.text());
}
