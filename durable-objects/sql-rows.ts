// Multi-row statements for the Durable Objects' SQLite: a batch of rows is one statement per
// MAX_BOUND parameters rather than one per row.

/** Parameters one Durable Object SQLite statement may bind. */
export const MAX_BOUND = 100;

/** `f` over slices of `xs` of at most `size` items, in order. */
export function inChunks<T>(xs: readonly T[], size: number, f: (chunk: readonly T[]) => void): void {
  for (let i = 0; i < xs.length; i += size) f(xs.slice(i, i + size));
}

/** `?, ?, …` for `n` parameters. */
export function marks(n: number): string {
  return Array.from({ length: n }, () => "?").join(", ");
}

/** `(?, ?), (?, ?), …`: a VALUES list of `rows` rows of `columns` parameters. */
export function rowMarks(rows: number, columns: number): string {
  return Array.from({ length: rows }, () => `(${marks(columns)})`).join(", ");
}

/** `writes` cut into runs of the same op, in order: each run can be one statement (or a few). */
export function runs<T extends { op: string }>(writes: readonly T[]): T[][] {
  const out: T[][] = [];
  for (const w of writes) {
    const last = out[out.length - 1];
    if (last && last[0]!.op === w.op) last.push(w);
    else out.push([w]);
  }
  return out;
}
