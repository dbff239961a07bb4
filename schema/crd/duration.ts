/** A Go duration (`1m`, `90s`, `1h30m`, as CRD fields spell them; negative = never) in ms, or
 * `fallback` when absent. The CRD schemas' patterns keep anything else out. */
export function durationMs(d: string | undefined, fallback: number): number {
  if (!d) return fallback;
  const sign = d.startsWith("-") ? -1 : 1;
  let ms = 0;
  for (const [, n, unit] of d.replace(/^-/, "").matchAll(/([0-9.]+)(ns|us|µs|ms|s|m|h)/g)) {
    ms += Number(n) * { ns: 1e-6, us: 1e-3, µs: 1e-3, ms: 1, s: 1e3, m: 6e4, h: 3.6e6 }[unit as "s"];
  }
  return sign * ms;
}
