// Accept-Encoding and Range for GET /files (what Go's http.ServeContent plus envd's gzip
// support do for a single file).

/** "gzip" when the client accepts it, "identity" otherwise, undefined when it accepts neither
 * (406). No header means identity. */
export function chooseEncoding(header: string | undefined): "gzip" | "identity" | undefined {
  if (!header) return "identity";
  const accepts = acceptor(header);
  if (accepts("gzip")) return "gzip";
  if (accepts("identity")) return "identity";
  return undefined;
}

/** Whether an identity-encoded answer is acceptable (it is unless `identity;q=0`, or `*;q=0`
 * without an identity entry). */
export function acceptsIdentity(header: string | undefined): boolean {
  return !header || acceptor(header)("identity");
}

function acceptor(header: string): (name: string) => boolean {
  const q = new Map<string, number>();
  for (const part of header.split(",")) {
    const [name, ...params] = part.trim().toLowerCase().split(";");
    if (!name) continue;
    const qp = params.map((p) => p.trim()).find((p) => p.startsWith("q="));
    q.set(name, qp ? Number(qp.slice(2)) : 1);
  }
  return (name: string) => (q.get(name) ?? q.get("*") ?? (name === "identity" ? 1 : 0)) > 0;
}

export type ByteRange = { start: number; end: number };

/** One `bytes=` range (first of a list), inclusive end. undefined: no usable Range header, serve
 * everything; "unsatisfiable": answer 416. */
export function parseRange(header: string | undefined, size: number): ByteRange | "unsatisfiable" | undefined {
  if (!header) return undefined;
  const m = /^bytes=\s*(\d*)\s*-\s*(\d*)\s*(,|$)/.exec(header.trim());
  if (!m) return undefined;
  const [, a, b] = m;
  if (a === "" && b === "") return undefined;
  if (a === "") {
    const n = Number(b);
    if (n === 0) return "unsatisfiable";
    return { start: Math.max(0, size - n), end: size - 1 };
  }
  const start = Number(a);
  if (start >= size) return "unsatisfiable";
  const end = b === "" ? size - 1 : Math.min(Number(b), size - 1);
  if (end < start) return undefined;
  return { start, end };
}
