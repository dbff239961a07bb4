// The sandbox index `list` pages through. SandboxDOs write rows through SandboxIndexDO, which
// batches them (applyIndexBatch); routes read pages here.
import { and, asc, desc, eq, gte, inArray, lt, gt, or, sql, type SQL } from "drizzle-orm";
import { sandboxes } from "../../schema/db/tables.ts";
import type { Db } from "./db.ts";

export type IndexRow = typeof sandboxes.$inferSelect;

/** A change to the index; SandboxIndexDO applies many in one request. */
export type IndexOp = { kind: "upsert"; row: IndexRow } | { kind: "delete"; id: string };

/**
 * Applies ops in one libSQL request: one multi-row upsert (a row lands only if its `rev` is newer
 * than the stored one, so writes may race or arrive out of order safely), then the deletes.
 */
export async function applyIndexBatch(db: Db, ops: readonly IndexOp[]): Promise<void> {
  const newest = new Map<string, IndexRow>();
  const deleted: string[] = [];
  for (const op of ops) {
    if (op.kind === "delete") deleted.push(op.id);
    else if ((newest.get(op.row.id)?.rev ?? -1) < op.row.rev) newest.set(op.row.id, op.row);
  }
  const statements = [];
  if (newest.size > 0) statements.push(upsert(db, [...newest.values()]));
  if (deleted.length > 0) statements.push(db.delete(sandboxes).where(inArray(sandboxes.id, deleted)));
  const [first, ...rest] = statements;
  if (first) await db.batch([first, ...rest]);
}

function upsert(db: Db, rows: IndexRow[]) {
  const { id: _id, ...rest } = rows[0]!;
  const set = Object.fromEntries(Object.keys(rest).map((k) => [k, sql.raw(`excluded.${colName(k)}`)]));
  return db.insert(sandboxes).values(rows).onConflictDoUpdate({ target: sandboxes.id, set, setWhere: sql`${sandboxes.rev} < excluded.rev` });
}

function colName(field: string): string {
  const col = (sandboxes as unknown as Record<string, { name: string }>)[field];
  if (!col) throw new Error(`unknown sandboxes column ${field}`);
  return `"${col.name}"`;
}

export interface Cursor {
  startedAt: number;
  id: string;
}

export interface ListFilter {
  /** Owner key; null lists every key's (admin). */
  keyId: string | null;
  states: readonly string[];
  metadata: ReadonlyArray<readonly [string, string]>;
  template?: string;
  startedAfter?: number;
  order: "asc" | "desc";
  limit: number;
  after?: Cursor;
}

/** One page, plus the cursor of the next one when more rows match. */
export async function listIndex(db: Db, f: ListFilter): Promise<{ rows: IndexRow[]; next?: Cursor }> {
  const where: SQL[] = [inArray(sandboxes.state, [...f.states])];
  if (f.keyId !== null) where.push(eq(sandboxes.keyId, f.keyId));
  if (f.template !== undefined) where.push(eq(sandboxes.templateId, f.template));
  if (f.startedAfter !== undefined) where.push(gte(sandboxes.startedAt, f.startedAfter));
  for (const [k, v] of f.metadata) {
    where.push(sql`exists (select 1 from json_each(${sandboxes.metadata}) where json_each.key = ${k} and json_each.value = ${v})`);
  }
  if (f.after) {
    const past = f.order === "desc" ? lt : gt;
    where.push(or(past(sandboxes.startedAt, f.after.startedAt), and(eq(sandboxes.startedAt, f.after.startedAt), past(sandboxes.id, f.after.id)))!);
  }
  const dir = f.order === "desc" ? desc : asc;
  const rows = await db
    .select()
    .from(sandboxes)
    .where(and(...where))
    .orderBy(dir(sandboxes.startedAt), dir(sandboxes.id))
    .limit(f.limit + 1);
  if (rows.length <= f.limit) return { rows };
  const page = rows.slice(0, f.limit);
  const last = page[page.length - 1]!;
  return { rows: page, next: { startedAt: last.startedAt, id: last.id } };
}

export async function getIndexRow(db: Db, id: string): Promise<IndexRow | undefined> {
  const rows = await db.select().from(sandboxes).where(eq(sandboxes.id, id)).limit(1);
  return rows[0];
}
