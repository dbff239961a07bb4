// Snapshot records in libSQL (schema/db `snapshots`): owned by a team, kept after the source
// sandbox is gone. The files are on the agent of the row's cluster. A row is first a slot
// (`pending`, counted against the team's bound, never listed nor resolved) while the agent copies.
import { and, desc, eq, lt, or, type SQL } from "drizzle-orm";
import { parseSnapshotRef } from "../../schema/api/snapshot.ts";
import { snapshots } from "../../schema/db/tables.ts";
import type { Db } from "./db.ts";
import { boundedInsert } from "./team-bound.ts";

export type SnapshotRow = typeof snapshots.$inferSelect;

/** Where a page starts: after this row in (createdAt, id) descending order. */
export interface SnapshotCursor {
  createdAt: number;
  id: string;
}

/** A slot older than this has lost its taker (the copy is waited for 30 s): freed by the next reserve. */
export const PENDING_SNAPSHOT_TTL_MS = 10 * 60_000;

export type SnapshotSlot = Pick<SnapshotRow, "id" | "teamId" | "keyId" | "sandboxId" | "cluster" | "createdAt">;

/**
 * Holds a slot for a snapshot before the agent copies anything, unless the team already keeps
 * `max` snapshots (slots included): the count and the insert are one statement (a count read
 * before the insert let concurrent snapshots all pass it). The team's slots older than `ttlMs`
 * (their taker is gone) are dropped first in the same transaction and returned, to be freed on
 * their cluster. `max` null is no bound.
 */
export async function reserveSnapshot(db: Db, slot: SnapshotSlot, max: number | null, ttlMs = PENDING_SNAPSHOT_TTL_MS): Promise<{ reserved: boolean; abandoned: { id: string; cluster: string }[] }> {
  const res = await db.$client.batch(
    [
      { sql: "DELETE FROM snapshots WHERE team_id = ? AND pending = 1 AND created_at <= ? RETURNING id, cluster", args: [slot.teamId, slot.createdAt - ttlMs] },
      boundedInsert(
        snapshots,
        { id: slot.id, teamId: slot.teamId, keyId: slot.keyId, sandboxId: slot.sandboxId, names: [], createdAt: slot.createdAt, name: null, templateId: "", cluster: slot.cluster, pending: true },
        { teamId: slot.teamId, max },
      ),
    ],
    "write",
  );
  return { reserved: res[1]!.rowsAffected === 1, abandoned: res[0]!.rows.map((r) => ({ id: String(r.id), cluster: String(r.cluster) })) };
}

/** The copy is taken: the slot becomes the snapshot (listed, resolvable). False when the slot is gone. */
export async function fillSnapshot(db: Db, row: SnapshotRow): Promise<boolean> {
  const { id, ...set } = row;
  const res = await db
    .update(snapshots)
    .set({ ...set, pending: false })
    .where(and(eq(snapshots.id, id), eq(snapshots.pending, true)))
    .returning({ id: snapshots.id });
  return res.length > 0;
}

/** The team's snapshot with this id, else the one with this name. */
export async function findSnapshot(db: Db, teamId: string, idOrName: string): Promise<SnapshotRow | undefined> {
  const rows = await db
    .select()
    .from(snapshots)
    .where(and(eq(snapshots.teamId, teamId), eq(snapshots.pending, false), or(eq(snapshots.id, idOrName), eq(snapshots.name, idOrName))));
  return rows.find((r) => r.id === idOrName) ?? rows[0];
}

/** The team's snapshot a client's reference names (`parseSnapshotRef`), if any. */
export async function resolveSnapshotRef(db: Db, team: { id: string; name: string }, ref: string): Promise<SnapshotRow | undefined> {
  const key = parseSnapshotRef(ref, team.name);
  return key === undefined ? undefined : findSnapshot(db, team.id, key);
}

/** The team's snapshots bearing `name` (a new one of that name replaces them). */
export async function snapshotsNamed(db: Db, teamId: string, name: string): Promise<SnapshotRow[]> {
  return db.select().from(snapshots).where(and(eq(snapshots.teamId, teamId), eq(snapshots.pending, false), eq(snapshots.name, name)));
}

/** A page of the team's snapshots (every team's for null), newest first; one extra row tells there is more. */
export async function listSnapshotRows(
  db: Db,
  teamId: string | null,
  q: { sandboxId?: string; idOrName?: string; limit: number; after?: SnapshotCursor },
): Promise<SnapshotRow[]> {
  const where: SQL[] = [eq(snapshots.pending, false)];
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
