// A request target as the L7 rules judge it and as the upstream then receives it. Servers read
// one path in several ways: with or without each segment's `;` parameters (Tomcat, Spring and
// Jetty drop them: `/admin;x/secret` is `/admin/secret`), with `//` merged or not (nginx, Envoy's
// merge_slashes), with a trailing `/` or not (Express, older Spring), decoded once or twice (an
// app that decodes what its framework already decoded: `%2561` is `a`). The proxy does not guess
// which: a request passes only if every reading passes the rules (no block matches any; an
// allow-list must allow each; readings the rules would give other headers are refused, see
// request.ts), and a reading that cannot be made safely (a second decode giving `/`, `\`, NUL,
// bytes that are not UTF-8 or a dot segment, or escapes three deep) is refused. What is sent is
// the least-rewritten safe form (schema/egress/path.ts `normalPath`: dot segments removed,
// escapes normalised, a leading `//` made `/`, inner `//` and `;` parameters kept), so S3 keys
// and signed URLs survive. The query is kept as it came. Pure; at most 16 readings, each made in time linear
// in the target (Node bounds it with the request head). Judging them is not linear: each reading
// is matched against every rule of the host, a glob (policy.ts) costing up to |pattern|·|path|
// steps, so a request costs up to 16 times what one reading does.
import { decodeUnreserved, DOT_SEGMENT, normalPath } from "../../../schema/egress/path.ts";

/** `target`: what is sent (path and query); `path`: its path; `readings`: the paths the rules
 * judge, `path` first. */
export type ReadTarget = { target: string; path: string; readings: string[] } | { invalid: string };

/** `%25XX` (an escape of an escape), as a second decode reads it. */
const ESCAPED_ESCAPE = /%25([0-9A-Fa-f]{2})/g;
const HAS_ESCAPED_ESCAPE = /%25[0-9A-Fa-f]{2}/;

/** The readings of an origin-form target (`/path?query`), or why it is refused. `*` (OPTIONS) is
 * its own. */
export function readTarget(target: string): ReadTarget {
  if (target === "*") return { target, path: target, readings: [target] };
  const q = target.indexOf("?");
  const n = normalPath(q < 0 ? target : target.slice(0, q));
  if ("invalid" in n) return n;
  const path = n.path;
  const bases = [path];
  if (HAS_ESCAPED_ESCAPE.test(path)) {
    const twice = secondDecode(path);
    if ("invalid" in twice) return twice;
    bases.push(twice.path);
  }
  const readings = new Set<string>();
  for (const b of bases) {
    for (const p of [b, withoutParams(b)]) {
      for (const m of [p, p.replace(/\/{2,}/g, "/")]) {
        readings.add(m);
        if (m.length > 1 && m.endsWith("/")) readings.add(m.slice(0, -1));
      }
    }
  }
  return { target: path + (q < 0 ? "" : target.slice(q)), path, readings: [...readings] };
}

/** The path as a server that decodes it once more reads it (in the same normal form), or why that
 * reading cannot be made safely. */
function secondDecode(path: string): { path: string } | { invalid: string } {
  const once = path.replace(ESCAPED_ESCAPE, "%$1");
  if (HAS_ESCAPED_ESCAPE.test(once)) return { invalid: "the path holds an escape of an escape of an escape (%2525…), which no reading can judge" };
  const d = decodeUnreserved(once);
  if ("invalid" in d) return { invalid: `${d.invalid.replace(/^the path holds/, "the path decoded twice holds")} (an escape of an escape)` };
  if (d.path.split("/").some((s) => DOT_SEGMENT.test(s))) return { invalid: "the path decoded twice has a dot segment (an escape of an escape of .)" };
  return d;
}

/** Each segment without its `;` parameters. */
function withoutParams(path: string): string {
  return path.includes(";") ? path.split("/").map((s) => s.split(";", 1)[0]).join("/") : path;
}
