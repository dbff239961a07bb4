// SandboxUpdateOps from the cluster (schema/protocol/crd-sync.ts `updateops`), applied through the
// admin API's operation (operations/update-ops.ts), so a run behaves the same whichever door it
// came in by: the run `name` of team = namespace. As for the other synced objects the newest
// generation per uid wins (a late retry never rolls `paused` back), a deletion of an object
// already re-created under the same name is stale, and an object re-created under a new uid
// replaces the old run. A new `retry` token on the same object retries the run's failed
// sandboxes once. Every answer carries the run's status, which the agent writes onto the object.
import type { ReplyItem, UpdateOpsItem, UpdateOpsStatusReply } from "../../schema/protocol/index.ts";
import { MAX_UPDATE_OPS_LINES } from "../../schema/protocol/index.ts";
import { clipText, MAX_MESSAGE_LENGTH } from "../../schema/api/limits.ts";
import type { Env } from "../env.ts";
import type { OpsResult, OpsView } from "../ops/update-ops-do.ts";
import { removeUpdateOps, resumeUpdateOps, startUpdateOps, updateOpsStatus } from "../operations/update-ops.ts";
import { getDb } from "../store/db.ts";
import { findTeamByName } from "../store/teams.ts";

type Sql = Pick<SqlStorage, "exec">;
type Reply = Omit<ReplyItem, "id">;

export const CRD_UPDATE_OPS_SCHEMA = `
CREATE TABLE IF NOT EXISTS crd_updateops (
  namespace TEXT NOT NULL, name TEXT NOT NULL, uid TEXT NOT NULL, generation INTEGER NOT NULL,
  retry TEXT NOT NULL, deleted INTEGER NOT NULL, PRIMARY KEY (namespace, name)
);
`;

type Row = { uid: string; generation: number; retry: string; deleted: number };

/** The reply's copy of a run: what the object's status shows, bounded by the schema. */
export function opsReply(v: OpsView): UpdateOpsStatusReply {
  const text = (m: string | undefined) => (m === undefined ? undefined : clipText(m, MAX_MESSAGE_LENGTH));
  return {
    phase: v.phase,
    replicas: v.replicas,
    updatedReplicas: v.updatedReplicas,
    failedReplicas: v.failedReplicas,
    updatingReplicas: v.updatingReplicas,
    conditions: v.conditions.map((c) => ({ ...c, message: text(c.message) })),
    sandboxes: v.sandboxes.slice(0, MAX_UPDATE_OPS_LINES).map((l) => ({ ...l, id: l.id as never, message: text(l.message) })),
    events: v.events.map((e) => ({ ...e, sandboxId: e.sandboxId as never, message: text(e.message)! })),
  };
}

function answer(res: OpsResult): Reply {
  return res.ok ? { result: "applied", updateOps: opsReply(res.ops) } : { result: "rejected", code: res.error.code, message: res.error.message };
}

type ObjectItem = Exclude<UpdateOpsItem, { present: string[] }>;

/** Removes the runs this cluster synced into the namespace that it no longer has; `serial` runs
 * each in that object's own chain. */
export async function pruneUpdateOps(env: Env, sql: Sql, namespace: string, present: string[], serial: (name: string, work: () => Promise<Reply>) => Promise<Reply>): Promise<Reply> {
  const keep = new Set(present);
  const gone = sql
    .exec<{ name: string; uid: string }>("SELECT name, uid FROM crd_updateops WHERE namespace = ? AND deleted = 0", namespace)
    .toArray()
    .filter((r) => !keep.has(r.name));
  for (const r of gone) await serial(r.name, () => applyUpdateOps(env, sql, { id: "", namespace, name: r.name, uid: r.uid, deleted: true }));
  return { result: "applied", message: gone.length ? `removed ${gone.map((r) => r.name).join(", ")}` : "nothing to remove" };
}

export async function applyUpdateOps(env: Env, sql: Sql, item: ObjectItem): Promise<Reply> {
  const prev = sql.exec<Row>("SELECT uid, generation, retry, deleted FROM crd_updateops WHERE namespace = ? AND name = ?", item.namespace, item.name).toArray()[0];
  const team = await findTeamByName(getDb(env), item.namespace);
  const remember = (r: Omit<Row, "deleted"> & { deleted: boolean }) =>
    sql.exec("INSERT OR REPLACE INTO crd_updateops (namespace, name, uid, generation, retry, deleted) VALUES (?, ?, ?, ?, ?, ?)", item.namespace, item.name, r.uid, r.generation, r.retry, r.deleted ? 1 : 0);
  const live = prev && !prev.deleted;

  if ("status" in item) {
    if (!team || !live || prev.uid !== item.uid) return { result: "rejected", code: "not_found", message: `SandboxUpdateOps ${item.namespace}/${item.name} is not applied on the edge` };
    return answer(await updateOpsStatus(env, team, item.name));
  }
  if ("deleted" in item) {
    if (live && prev.uid !== item.uid) return { result: "stale", message: `SandboxUpdateOps ${item.namespace}/${item.name} was re-created` };
    if (team && live) await removeUpdateOps(env, team, item.name); // not found: nothing to remove
    remember({ uid: item.uid, generation: prev?.generation ?? 0, retry: prev?.retry ?? "", deleted: true });
    return { result: "applied" };
  }
  if (prev && prev.uid === item.uid && (prev.deleted || item.generation < prev.generation)) {
    return { result: "stale", message: prev.deleted ? "SandboxUpdateOps was deleted" : `generation ${item.generation} is older than ${prev.generation}` };
  }
  if (!team) return { result: "rejected", code: "not_found", message: `no team ${item.namespace}` };
  // Re-created under the same name: the old object's run goes, the new one starts afresh.
  if (live && prev.uid !== item.uid) await removeUpdateOps(env, team, item.name);
  const started = await startUpdateOps(env, team, item.name, item.spec);
  if (!started.ok) return answer(started);
  const retry = item.retry ?? "";
  const sameObject = live && prev.uid === item.uid;
  const res = sameObject && retry !== prev.retry && retry !== "" ? await resumeUpdateOps(env, team, item.name) : started;
  remember({ uid: item.uid, generation: item.generation, retry, deleted: false });
  return answer(res);
}
