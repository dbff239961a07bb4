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
/** Decimal suffixes as powers of ten: the number and its exponent are read as one decimal, so
 * "0.07e2" is 7 (0.07 × 10² in floating point is 7.000000000000001, which a caller rounding up
 * counts as 8) and "9m" is 0.009. */
const DECIMAL: Record<string, number> = { n: -9, u: -6, m: -3, k: 3, M: 6, G: 9, T: 12, P: 15, E: 18 };
const BINARY: Record<string, number> = { Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40, Pi: 2 ** 50, Ei: 2 ** 60 };

/** A quantity ("500m", "1.5", "2Gi", "1e3", "1k", a JSON number) in base units; undefined when
 * it is not one (then nothing can be counted from it: callers refuse, never default). */
export function parseQuantity(q: unknown): number | undefined {
  if (typeof q === "number") return Number.isFinite(q) ? q : undefined;
  if (typeof q !== "string" || q.length > MAX_LENGTH) return undefined;
  const m = QUANTITY.exec(q);
  if (!m) return undefined;
  const [, number, exponent, suffix] = m;
  const n = suffix && BINARY[suffix] ? Number(number) * BINARY[suffix] : Number(`${number}e${exponent ?? DECIMAL[suffix ?? ""] ?? 0}`);
  return Number.isFinite(n) ? n : undefined;
}
