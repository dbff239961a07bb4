// Kubernetes resource quantities (k8s.io/apimachinery/pkg/api/resource, `Quantity`), read as a
// number of base units (cores, bytes). The whole grammar the API server accepts, because a reader
// that knows less under-counts: "64e0" cores or "64e9" bytes read as "unknown" used to fall back
// to a default of 1 core / 512 MiB (review 25, M2).
//   <quantity> ::= <sign><number>[<suffix>]   <number> ::= digits | digits. | digits.digits | .digits
//   <suffix>   ::= Ki | Mi | Gi | Ti | Pi | Ei | n | u | m | k | M | G | T | P | E | (e|E)<sign>digits
// Not rounded the way the API server canonicalises (it rounds up to the nano unit): callers that
// count round up themselves.

/** Longer strings are no quantity the API server would store (its canonical forms are short). */
const MAX_LENGTH = 64;
const QUANTITY = /^([+-]?(?:\d+\.?\d*|\.\d+))(?:[eE]([+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E))?$/;
const SUFFIX: Record<string, number> = {
  Ki: 2 ** 10,
  Mi: 2 ** 20,
  Gi: 2 ** 30,
  Ti: 2 ** 40,
  Pi: 2 ** 50,
  Ei: 2 ** 60,
  n: 1e-9,
  u: 1e-6,
  m: 1e-3,
  k: 1e3,
  M: 1e6,
  G: 1e9,
  T: 1e12,
  P: 1e15,
  E: 1e18,
};

/** A quantity ("500m", "1.5", "2Gi", "1e3", "1k", a JSON number) in base units; undefined when
 * it is not one (then nothing can be counted from it: callers refuse, never default). */
export function parseQuantity(q: unknown): number | undefined {
  if (typeof q === "number") return Number.isFinite(q) ? q : undefined;
  if (typeof q !== "string" || q.length > MAX_LENGTH) return undefined;
  const m = QUANTITY.exec(q);
  if (!m) return undefined;
  const n = Number(m[1]) * (m[2] !== undefined ? 10 ** Number(m[2]) : m[3] ? SUFFIX[m[3]]! : 1);
  return Number.isFinite(n) ? n : undefined;
}
