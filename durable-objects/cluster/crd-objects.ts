// The shape shared by the objects a cluster syncs into the edge that the edge then runs
// (PoolAutoscalers: crd-autoscalers.ts, SandboxUpdateOps: crd-updateops.ts): a row per
// (namespace, name) remembers the uid and newest generation applied, one column of the kind's
// own, and whether it was deleted. The newest generation per uid wins (a late retry never rolls a
// spec back), a deletion of an object already re-created under the same name is stale, a status
// query answers only for the live object of that uid, and the namespace's inventory removes the
// objects deleted while the agent was down. A kind says only what it does on the edge.
import type { ReplyItem } from "../../schema/protocol/index.ts";
import type { Env } from "../env.ts";
import { clusterTeamOrRefusal } from "../operations/team-clusters.ts";
import type { findTeamByName } from "../store/teams.ts";

type Sql = Pick<SqlStorage, "exec">;
export type Reply = Omit<ReplyItem, "id">;
export type Team = NonNullable<Awaited<ReturnType<typeof findTeamByName>>>;

/** What the edge remembers of an object; `own` is the kind's column (a target, a retry token). */
export interface SyncedRow {
  uid: string;
  generation: number;
  own: string;
  deleted: boolean;
}

type Ref = { namespace: string; name: string; uid: string };
export type SyncedItem<U> = (Ref & { status: true }) | (Ref & { deleted: true }) | (Ref & { generation: number } & U);

export interface SyncedKind<U> {
  /** The CRD's kind, for messages. */
  kind: string;
  /** The table (created by `syncedTableSchema`) and the name of its kind's column. */
  table: string;
  own: string;
  /** The status of the live object `row`. */
  status(env: Env, team: Team, name: string, row: SyncedRow): Promise<Reply>;
  /** Undoes the live object `row` (deleted, or pruned). */
  remove(env: Env, team: Team, name: string, row: SyncedRow): Promise<void>;
  /** Applies a generation newer than the one remembered; `own` is remembered when given (the item
   * was applied), nothing when the reply is a refusal. `prev` may be another uid's live row. */
  upsert(env: Env, team: Team, item: Ref & { generation: number } & U, prev: SyncedRow | undefined): Promise<{ reply: Reply; own?: string }>;
}

export function syncedTableSchema(table: string, own: string): string {
  return `
CREATE TABLE IF NOT EXISTS ${table} (
  namespace TEXT NOT NULL, name TEXT NOT NULL, uid TEXT NOT NULL, generation INTEGER NOT NULL,
  ${own} TEXT NOT NULL, deleted INTEGER NOT NULL, PRIMARY KEY (namespace, name)
);
`;
}

export async function applySynced<U>(env: Env, sql: Sql, cluster: string, k: SyncedKind<U>, item: SyncedItem<U>): Promise<Reply> {
  const row = sql
    .exec<{ uid: string; generation: number; own: string; deleted: number }>(`SELECT uid, generation, ${k.own} AS own, deleted FROM ${k.table} WHERE namespace = ? AND name = ?`, item.namespace, item.name)
    .toArray()[0];
  const prev = row && { ...row, deleted: row.deleted !== 0 };
  const live = prev && !prev.deleted ? prev : undefined;
  const remember = (r: SyncedRow) =>
    sql.exec(`INSERT OR REPLACE INTO ${k.table} (namespace, name, uid, generation, ${k.own}, deleted) VALUES (?, ?, ?, ?, ?, ?)`, item.namespace, item.name, r.uid, r.generation, r.own, r.deleted ? 1 : 0);
  // Only a cluster bound to the team may size its pools, run updates over its sandboxes or read
  // their status (team-clusters.ts). A delete from an unbound one changes nothing of the team and
  // is answered done, so the agent does not retry it for ever; its own row of that object is
  // marked deleted, so its next start does not prune it again.
  const may = await clusterTeamOrRefusal(env, cluster, item.namespace, `the team's ${k.kind} objects`);
  if (!("team" in may)) {
    if (!("deleted" in item)) return may;
    if (live && live.uid === item.uid) remember({ ...live, deleted: true });
    return { result: "applied", message: may.message };
  }
  const team = may.team;

  if ("status" in item) {
    if (!live || live.uid !== item.uid) return { result: "rejected", code: "not_found", message: `${k.kind} ${item.namespace}/${item.name} is not applied on the edge` };
    return k.status(env, team, item.name, live);
  }
  if ("deleted" in item) {
    if (live && live.uid !== item.uid) return { result: "stale", message: `${k.kind} ${item.namespace}/${item.name} was re-created` };
    if (live) await k.remove(env, team, item.name, live);
    remember({ uid: item.uid, generation: prev?.generation ?? 0, own: prev?.own ?? "", deleted: true });
    return { result: "applied" };
  }
  if (prev && prev.uid === item.uid && (prev.deleted || item.generation < prev.generation)) {
    return { result: "stale", message: prev.deleted ? `${k.kind} was deleted` : `generation ${item.generation} is older than ${prev.generation}` };
  }
  const { reply, own } = await k.upsert(env, team, item, live);
  if (own !== undefined) remember({ uid: item.uid, generation: item.generation, own, deleted: false });
  return reply;
}

/** Removes what this cluster synced into the namespace and no longer has; `serial` runs each
 * removal in that object's own chain, so it cannot interleave with an upsert of the same name. */
export async function pruneSynced<U>(env: Env, sql: Sql, cluster: string, k: SyncedKind<U>, namespace: string, present: string[], serial: (name: string, work: () => Promise<Reply>) => Promise<Reply>): Promise<Reply> {
  const keep = new Set(present);
  const gone = sql
    .exec<{ name: string; uid: string }>(`SELECT name, uid FROM ${k.table} WHERE namespace = ? AND deleted = 0`, namespace)
    .toArray()
    .filter((r) => !keep.has(r.name));
  for (const r of gone) await serial(r.name, () => applySynced(env, sql, cluster, k, { namespace, name: r.name, uid: r.uid, deleted: true }));
  return { result: "applied", message: gone.length ? `removed ${gone.map((r) => r.name).join(", ")}` : "nothing to remove" };
}
