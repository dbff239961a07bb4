// Multi-row statements for the Durable Objects' SQLite: a batch of rows is one statement per
// MAX_BOUND parameters rather than one per row.

/** Parameters one Durable Object SQLite statement may bind. */
export const MAX_BOUND = 100;

/** `f` over slices of `xs` of at most `size` items, in order. */
export function inChunks<T>(xs: readonly T[], size: number, f: (chunk: readonly T[]) => void): void {
  for (let i = 0; i < xs.length; i += size) f(xs.slice(i, i + size));
}

/**
 * The placeholder lists already built, by shape. A create's statements ask for a few shapes over
 * and over (one row, or the rows of the creates that share a commit); building the string each
 * time was ~0.5 % of the edge's CPU per create (bench/claim-profile.ts). Statements bind at most
 * MAX_BOUND parameters, so few shapes exist; the bound only guards against a caller that breaks that.
 */
const built = new Map<number, string>();
const MAX_SHAPES = 1_024;
/** Shapes of this many rows or columns or more are built each time (a key must stay one number). */
const KEY_BASE = 1 << 16;

/** `?, ?, …` for `n` parameters. */
export function marks(n: number): string {
  // Row count 0 keys the bare list (rowMarks of no rows is "" and never cached).
  return cached(0, n) ?? remember(0, n, Array.from({ length: n }, () => "?").join(", "));
}

/** `(?, ?), (?, ?), …`: a VALUES list of `rows` rows of `columns` parameters. */
export function rowMarks(rows: number, columns: number): string {
  if (rows === 0) return "";
  return cached(rows, columns) ?? remember(rows, columns, Array.from({ length: rows }, () => `(${marks(columns)})`).join(", "));
}

function cached(rows: number, columns: number): string | undefined {
  return rows < KEY_BASE && columns < KEY_BASE ? built.get(rows * KEY_BASE + columns) : undefined;
}

function remember(rows: number, columns: number, text: string): string {
  if (rows >= KEY_BASE || columns >= KEY_BASE) return text;
  if (built.size >= MAX_SHAPES) built.clear();
  built.set(rows * KEY_BASE + columns, text);
  return text;
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
