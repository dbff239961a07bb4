// The edge's metric counts as plain data: what an isolate accumulates between flushes and what
// EdgeMetricsDO sums. A series is keyed by its family name and labels (`name{k="v",...}`), so
// merging is adding numbers by key. Pure: no clock, no bindings.

/** Histogram bucket bounds in milliseconds (the +Inf bucket is implicit). */
export const MS_BUCKETS = [1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000] as const;

export interface HistogramCounts {
  /** Per bucket, not cumulative: index i counts observations ≤ MS_BUCKETS[i] and > the previous
   * bound; the last index (MS_BUCKETS.length) counts the rest (+Inf). */
  buckets: number[];
  sum: number;
  count: number;
}

export interface Counts {
  counters: Record<string, number>;
  histograms: Record<string, HistogramCounts>;
}

export const emptyCounts = (): Counts => ({ counters: {}, histograms: {} });

export type Labels = Record<string, string>;

/** Keys already built, by name and labels in the caller's order. Label sets are bounded (never an
 * id), so this stays small; the bound only guards against a caller that breaks that rule. */
const built = new Map<string, string>();
const MAX_BUILT = 4_096;

/** `name{k="v",...}` with the labels in a fixed order, so one series has one key. Every count on
 * the hot path asks for one: built once per series, then a lookup. */
export function seriesKey(name: string, labels: Labels = {}): string {
  let memo = name;
  for (const k in labels) memo += `\u0000${k}\u0001${labels[k]}`;
  let key = built.get(memo);
  if (key === undefined) {
    key = buildKey(name, labels);
    if (built.size >= MAX_BUILT) built.clear();
    built.set(memo, key);
  }
  return key;
}

function buildKey(name: string, labels: Labels): string {
  const keys = Object.keys(labels).sort();
  if (!keys.length) return name;
  return `${name}{${keys.map((k) => `${k}="${escapeLabel(labels[k]!)}"`).join(",")}}`;
}

export function escapeLabel(v: string): string {
  return v.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n");
}

/** The family name of a series key. */
export function familyOf(key: string): string {
  const i = key.indexOf("{");
  return i < 0 ? key : key.slice(0, i);
}

export function addCount(into: Counts, key: string, n = 1): void {
  into.counters[key] = (into.counters[key] ?? 0) + n;
}

export function addObservation(into: Counts, key: string, ms: number): void {
  let h = into.histograms[key];
  if (!h) h = into.histograms[key] = { buckets: new Array<number>(MS_BUCKETS.length + 1).fill(0), sum: 0, count: 0 };
  let i = 0;
  while (i < MS_BUCKETS.length && ms > MS_BUCKETS[i]!) i++;
  h.buckets[i]!++;
  h.sum += ms;
  h.count++;
}

/** Adds `delta` into `into` (a flush into the aggregate). */
export function mergeCounts(into: Counts, delta: Counts): void {
  for (const [k, n] of Object.entries(delta.counters)) addCount(into, k, n);
  for (const [k, d] of Object.entries(delta.histograms)) {
    let h = into.histograms[k];
    if (!h) h = into.histograms[k] = { buckets: new Array<number>(MS_BUCKETS.length + 1).fill(0), sum: 0, count: 0 };
    d.buckets.forEach((n, i) => (h.buckets[i] = (h.buckets[i] ?? 0) + n));
    h.sum += d.sum;
    h.count += d.count;
  }
}

export function isEmpty(c: Counts): boolean {
  for (const _ in c.counters) return false;
  for (const _ in c.histograms) return false;
  return true;
}
