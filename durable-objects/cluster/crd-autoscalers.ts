// PoolAutoscalers from the cluster (schema/protocol/crd-sync.ts `autoscalers`), applied through the
// admin API's operation (`setAutoscaler`): the autoscaler of the pool of SandboxSet `target` in
// team = namespace. As for SandboxSets, the newest generation per object uid wins (a late retry
// never rolls the spec back), a deletion of an object already re-created under the same name is
// stale, and a retargeted object (its scaleTargetRef changed) first removes itself from the old
// pool. Every answer carries the pool's autoscaler status, which the agent writes onto the
// object's status subresource.
import type { AutoscalerStatusReply, PoolAutoscalerItem, ReplyItem } from "../../schema/protocol/index.ts";
import { ApiError } from "../../schema/errors.ts";
import type { Env } from "../env.ts";
import { setAutoscaler } from "../operations/autoscalers.ts";
import type { AutoscalerStatus } from "../pool/rpc.ts";
import { poolStub } from "../pool/stub.ts";
import { getDb } from "../store/db.ts";
import { findTeamByName } from "../store/teams.ts";

type Sql = Pick<SqlStorage, "exec">;

export const CRD_AUTOSCALER_SCHEMA = `
CREATE TABLE IF NOT EXISTS crd_autoscalers (
  namespace TEXT NOT NULL, name TEXT NOT NULL, uid TEXT NOT NULL, generation INTEGER NOT NULL,
  target TEXT NOT NULL, deleted INTEGER NOT NULL, PRIMARY KEY (namespace, name)
);
`;

type Row = { uid: string; generation: number; target: string; deleted: number };

/** The reply's copy of the status: only what the object's status shows, bounded by the schema. */
function statusReply(s: AutoscalerStatus): AutoscalerStatusReply {
  const { suspended, currentReplicas, desiredReplicas, lastScaleTime, currentCapacity, appliedCronPolicies, lastDecision, conditions, events } = s;
  return { suspended, currentReplicas, desiredReplicas, lastScaleTime, currentCapacity, appliedCronPolicies, lastDecision, conditions, events };
}

type ObjectItem = Exclude<PoolAutoscalerItem, { present: string[] }>;

/** Removes what this cluster synced into the namespace and no longer has; `serial` runs each
 * removal in that object's own chain, so it cannot interleave with an upsert of the same name. */
export async function prunePoolAutoscalers(
  env: Env,
  sql: Sql,
  namespace: string,
  present: string[],
  serial: (name: string, work: () => Promise<Omit<ReplyItem, "id">>) => Promise<Omit<ReplyItem, "id">>,
): Promise<Omit<ReplyItem, "id">> {
  const keep = new Set(present);
  const gone = sql
    .exec<{ name: string; uid: string }>("SELECT name, uid FROM crd_autoscalers WHERE namespace = ? AND deleted = 0", namespace)
    .toArray()
    .filter((r) => !keep.has(r.name));
  for (const r of gone) await serial(r.name, () => applyPoolAutoscaler(env, sql, { id: "", namespace, name: r.name, uid: r.uid, deleted: true }));
  return { result: "applied", message: gone.length ? `removed ${gone.map((r) => r.name).join(", ")}` : "nothing to remove" };
}

export async function applyPoolAutoscaler(env: Env, sql: Sql, item: ObjectItem): Promise<Omit<ReplyItem, "id">> {
  const prev = sql
    .exec<Row>("SELECT uid, generation, target, deleted FROM crd_autoscalers WHERE namespace = ? AND name = ?", item.namespace, item.name)
    .toArray()[0];
  const team = await findTeamByName(getDb(env), item.namespace);
  const remember = (r: Omit<Row, "deleted"> & { deleted: boolean }) =>
    sql.exec("INSERT OR REPLACE INTO crd_autoscalers (namespace, name, uid, generation, target, deleted) VALUES (?, ?, ?, ?, ?, ?)", item.namespace, item.name, r.uid, r.generation, r.target, r.deleted ? 1 : 0);
  /** Removes the autoscaler from `target`'s pool; a template already gone has none. */
  const unset = async (target: string) => {
    if (!team) return;
    const res = await setAutoscaler(env, team.id, target, null);
    if (!res.ok && res.error.code !== "template_not_found") throw ApiError.from(res.error);
  };

  if ("status" in item) {
    if (!team || !prev || prev.deleted || prev.uid !== item.uid) return { result: "rejected", code: "not_found", message: `PoolAutoscaler ${item.namespace}/${item.name} is not applied on the edge` };
    const res = await poolStub(env, team.id, prev.target).autoscalerStatus();
    if (!res.ok) throw ApiError.from(res.error);
    return { result: "applied", autoscaler: statusReply(res.status) };
  }
  if ("deleted" in item) {
    if (prev && prev.uid !== item.uid && !prev.deleted) return { result: "stale", message: `PoolAutoscaler ${item.namespace}/${item.name} was re-created` };
    if (prev && !prev.deleted) await unset(prev.target);
    remember({ uid: item.uid, generation: prev?.generation ?? 0, target: prev?.target ?? "", deleted: true });
    return { result: "applied" };
  }
  if (prev && prev.uid === item.uid && (prev.deleted || item.generation < prev.generation)) {
    return { result: "stale", message: prev.deleted ? "PoolAutoscaler was deleted" : `generation ${item.generation} is older than ${prev.generation}` };
  }
  if (!team) return { result: "rejected", code: "template_not_found", message: `Template "${item.target}" not found (no team ${item.namespace})` };
  const res = await setAutoscaler(env, team.id, item.target, item.spec);
  if (!res.ok) return { result: "rejected", code: res.error.code, message: res.error.message };
  // Retargeted (or the old object's last target under a new uid): the old pool is no longer sized.
  if (prev && !prev.deleted && prev.target !== item.target) await unset(prev.target);
  remember({ uid: item.uid, generation: item.generation, target: item.target, deleted: false });
  return { result: "applied", autoscaler: statusReply(res.status) };
}
