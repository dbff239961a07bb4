// The sandbox index `list` pages through. SandboxGroupDOs write rows through SandboxIndexDO, which
// batches them (applyIndexBatch); routes read pages here.
import { and, asc, desc, eq, ne, getTableColumns, gte, inArray, lt, gt, or, sql, type Column, type SQL } from "drizzle-orm";
import type { SQLiteSelect } from "drizzle-orm/sqlite-core";
import { sandboxes } from "../../schema/db/tables.ts";
import { executeOne, getDb, type Db, type OneStatement } from "./db.ts";

type LibsqlEnv = Parameters<typeof getDb>[0];

export type IndexRow = typeof sandboxes.$inferSelect;

/** A row without its metadata (up to 128 KiB of tenant strings a row: the annotations' bound), for
 * the lists that never show it (the console's, a claim's census): a page of 100 would otherwise
 * carry ~12 MB from sqld, on every live poll. */
export type IndexSummary = Omit<IndexRow, "metadata">;
const { metadata: _metadata, ...SUMMARY_COLUMNS } = getTableColumns(sandboxes);

/**
 * A change to the index; SandboxIndexDO applies many in one request. Every op is a whole row with
 * its revision, and a sandbox that is gone is a tombstone row (`tombstone()`), never a DELETE: a
 * late write of an older revision (a retry, a batch that lost its answer) then finds a newer row
 * and changes nothing, where after a DELETE it would bring the sandbox back into the list.
 */
export type IndexOp = { kind: "upsert"; row: IndexRow };

/** `phase` of a tombstone: the sandbox is gone. Such rows have state killed, so no list shows them. */
export const TOMBSTONE_PHASE = "Deleted";
/** Tombstones are removed this long after the sandbox went (far longer than any write is late). */
export const TOMBSTONE_KEEP_MS = 10 * 60_000;

/** `row` as the sandbox's tombstone, its revision kept; `endAt` is when it went (a kill's own row). */
export function asTombstone(row: IndexRow, at: number): IndexRow {
  return { ...row, state: "killed", phase: TOMBSTONE_PHASE, endAt: at };
}

/** The row of a sandbox that is gone, one revision past its last row; `endAt` is when it went. */
export function tombstone(last: IndexRow, at: number): IndexRow {
  return { ...asTombstone(last, at), rev: last.rev + 1 };
}

/**
 * Applies ops in one libSQL request: one multi-row upsert (a row lands only if its `rev` is newer
 * than the stored one, so writes may race or arrive out of order safely), then, with
 * `sweepBefore`, the removal of tombstones older than that. The SQL is written out once from the
 * table's columns rather than built by drizzle per batch: the query builder was ~2 % of the
 * edge's CPU per create.
 */
export async function applyIndexBatch(env: LibsqlEnv, ops: readonly IndexOp[], sweepBefore?: number): Promise<void> {
  const newest = new Map<string, IndexRow>();
  for (const op of ops) {
    if ((newest.get(op.row.id)?.rev ?? -1) < op.row.rev) newest.set(op.row.id, op.row);
  }
  const statements: OneStatement[] = [];
  if (newest.size > 0) statements.push(upsert([...newest.values()]));
  if (sweepBefore !== undefined) statements.push({ sql: `DELETE FROM sandboxes WHERE phase = ? AND end_at < ?`, args: [TOMBSTONE_PHASE, sweepBefore] });
  // One statement is atomic on its own: sent alone (executeOne), without the BEGIN, COMMIT and
  // ROLLBACK steps a batch wraps it in (their encoding here, their execution in sqld).
  if (statements.length === 1) await executeOne(env, statements[0]!);
  else if (statements.length > 1) await getDb(env).$client.batch(statements, "write");
}

const COLUMNS = Object.entries(getTableColumns(sandboxes)) as [keyof IndexRow, Column][];
const quoted = (c: Column) => `"${c.name}"`;
const UPSERT_HEAD = `INSERT INTO sandboxes (${COLUMNS.map(([, c]) => quoted(c)).join(", ")}) VALUES `;
const UPSERT_TAIL =
  ` ON CONFLICT ("id") DO UPDATE SET ${COLUMNS.filter(([k]) => k !== "id").map(([, c]) => `${quoted(c)} = excluded.${quoted(c)}`).join(", ")}` +
  ` WHERE sandboxes."rev" < excluded."rev"`;
const ROW_PLACEHOLDERS = `(${COLUMNS.map(() => "?").join(", ")})`;

function upsert(rows: IndexRow[]): OneStatement {
  return {
    sql: UPSERT_HEAD + rows.map(() => ROW_PLACEHOLDERS).join(", ") + UPSERT_TAIL,
    args: rows.flatMap((r) => COLUMNS.map(([k, c]) => c.mapToDriverValue(r[k]) as OneStatement["args"][number])),
  };
}

export interface Cursor {
  startedAt: number;
  id: string;
}

export interface ListFilter {
  /** Owner team; null lists every team's (admin). */
  teamId: string | null;
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
  return pageOf(await pageQuery(db.select().from(sandboxes).$dynamic(), f), f.limit);
}

/** listIndex without the rows' metadata (IndexSummary). */
export async function listSummaries(db: Db, f: ListFilter): Promise<{ rows: IndexSummary[]; next?: Cursor }> {
  return pageOf(await pageQuery(db.select(SUMMARY_COLUMNS).from(sandboxes).$dynamic(), f), f.limit);
}

/**
 * A page and, in the same libSQL request, how many running sandboxes the caller has in the same
 * scope as the rows (the team's, or every one for the admin key), whatever the filters: E2B's
 * optional `X-Total-Running`. The count walks the `(team_id, started_at)` index for a team.
 */
export async function listIndexWithRunning(db: Db, f: ListFilter): Promise<{ rows: IndexRow[]; next?: Cursor; running: number }> {
  const [rows, count] = await db.batch([pageQuery(db.select().from(sandboxes).$dynamic(), f), runningQuery(db, f.teamId)]);
  return { ...pageOf(rows, f.limit), running: Number(count[0]?.n ?? 0) };
}

/** listIndexWithRunning without the rows' metadata (IndexSummary). */
export async function listSummariesWithRunning(db: Db, f: ListFilter): Promise<{ rows: IndexSummary[]; next?: Cursor; running: number }> {
  const [rows, count] = await db.batch([pageQuery(db.select(SUMMARY_COLUMNS).from(sandboxes).$dynamic(), f), runningQuery(db, f.teamId)]);
  return { ...pageOf(rows, f.limit), running: Number(count[0]?.n ?? 0) };
}

function runningQuery(db: Db, teamId: string | null) {
  return db.select({ n: sql<number>`count(*)` }).from(sandboxes).where(and(eq(sandboxes.state, "running"), ...teamScope(teamId)));
}

function teamScope(teamId: string | null): SQL[] {
  return teamId === null ? [] : [eq(sandboxes.teamId, teamId)];
}

function pageOf<R extends Cursor>(rows: R[], limit: number): { rows: R[]; next?: Cursor } {
  if (rows.length <= limit) return { rows };
  const page = rows.slice(0, limit);
  const last = page[page.length - 1]!;
  return { rows: page, next: { startedAt: last.startedAt, id: last.id } };
}

function pageQuery<Q extends SQLiteSelect>(query: Q, f: ListFilter) {
  const where: SQL[] = [inArray(sandboxes.state, [...f.states]), ...teamScope(f.teamId)];
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
  return query
    .where(and(...where))
    .orderBy(dir(sandboxes.startedAt), dir(sandboxes.id))
    .limit(f.limit + 1);
}

/** A team's running and paused sandboxes as the index lists them (TeamQuotaDO's census of what
 * predates it; the index does not say how a paused one was paused). */
export async function listLiveOfTeam(db: Db, teamId: string): Promise<{ id: string; cpuCount: number; memoryMB: number; state: string }[]> {
  return db
    .select({ id: sandboxes.id, cpuCount: sandboxes.cpuCount, memoryMB: sandboxes.memoryMB, state: sandboxes.state })
    .from(sandboxes)
    .where(liveOfTeam(teamId));
}

/** A team's listed sandboxes: running or paused. */
function liveOfTeam(teamId: string): SQL | undefined {
  return and(eq(sandboxes.teamId, teamId), inArray(sandboxes.state, ["running", "paused"]));
}

/** The index row of a sandbox; undefined when there is none or only its tombstone. */
export async function getIndexRow(db: Db, id: string): Promise<IndexRow | undefined> {
  const rows = await db.select().from(sandboxes).where(and(eq(sandboxes.id, id), ne(sandboxes.phase, TOMBSTONE_PHASE))).limit(1);
  return rows[0];
}

/** The row of a killed sandbox: being deleted, or its tombstone for TOMBSTONE_KEEP_MS after (its logs are still served). */
export async function getKilledRow(db: Db, id: string): Promise<IndexRow | undefined> {
  const rows = await db.select().from(sandboxes).where(and(eq(sandboxes.id, id), eq(sandboxes.state, "killed"))).limit(1);
  return rows[0];
}

/** A team's listed sandboxes (running or paused) by id: an update ops run's candidates. */
export async function listLiveIdsOfTeam(db: Db, teamId: string): Promise<string[]> {
  const rows = await db.select({ id: sandboxes.id }).from(sandboxes).where(liveOfTeam(teamId));
  return rows.map((r) => r.id);
}
