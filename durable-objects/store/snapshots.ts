// Snapshot records in libSQL (schema/db `snapshots`): owned by a team, kept after the source
// sandbox is gone. The files are on the agent of the row's cluster.
import { and, desc, eq, lt, or, type SQL } from "drizzle-orm";
import { parseSnapshotRef } from "../../schema/api/snapshot.ts";
import { snapshots } from "../../schema/db/tables.ts";
import type { Db } from "./db.ts";

export type SnapshotRow = typeof snapshots.$inferSelect;

/** Where a page starts: after this row in (createdAt, id) descending order. */
export interface SnapshotCursor {
  createdAt: number;
  id: string;
}

export async function insertSnapshot(db: Db, row: SnapshotRow): Promise<void> {
  await db.insert(snapshots).values(row);
}

/** The team's snapshot with this id, else the one with this name. */
export async function findSnapshot(db: Db, teamId: string, idOrName: string): Promise<SnapshotRow | undefined> {
  const rows = await db
    .select()
    .from(snapshots)
    .where(and(eq(snapshots.teamId, teamId), or(eq(snapshots.id, idOrName), eq(snapshots.name, idOrName))));
  return rows.find((r) => r.id === idOrName) ?? rows[0];
}

/** The team's snapshot a client's reference names (`parseSnapshotRef`), if any. */
export async function resolveSnapshotRef(db: Db, team: { id: string; name: string }, ref: string): Promise<SnapshotRow | undefined> {
  const key = parseSnapshotRef(ref, team.name);
  return key === undefined ? undefined : findSnapshot(db, team.id, key);
}

/** The team's snapshots bearing `name` (a new one of that name replaces them). */
export async function snapshotsNamed(db: Db, teamId: string, name: string): Promise<SnapshotRow[]> {
  return db.select().from(snapshots).where(and(eq(snapshots.teamId, teamId), eq(snapshots.name, name)));
}

/** A page of the team's snapshots (every team's for null), newest first; one extra row tells there is more. */
export async function listSnapshotRows(
  db: Db,
  teamId: string | null,
  q: { sandboxId?: string; idOrName?: string; limit: number; after?: SnapshotCursor },
): Promise<SnapshotRow[]> {
  const where: SQL[] = [];
  if (teamId !== null) where.push(eq(snapshots.teamId, teamId));
  if (q.sandboxId) where.push(eq(snapshots.sandboxId, q.sandboxId));
  if (q.idOrName) where.push(or(eq(snapshots.id, q.idOrName), eq(snapshots.name, q.idOrName))!);
  if (q.after) where.push(or(lt(snapshots.createdAt, q.after.createdAt), and(eq(snapshots.createdAt, q.after.createdAt), lt(snapshots.id, q.after.id)))!);
  return db
    .select()
    .from(snapshots)
    .where(and(...where))
    .orderBy(desc(snapshots.createdAt), desc(snapshots.id))
    .limit(q.limit + 1);
}

/** Deletes rows by id; returns those that were there. */
export async function deleteSnapshotRows(db: Db, teamId: string, ids: string[]): Promise<string[]> {
  const gone: string[] = [];
  for (const id of ids) {
    const res = await db.delete(snapshots).where(and(eq(snapshots.teamId, teamId), eq(snapshots.id, id))).returning({ id: snapshots.id });
    gone.push(...res.map((r) => r.id));
  }
  return gone;
}
