// PoolAutoscalers from the cluster (schema/protocol/crd-sync.ts `autoscalers`), applied through the
// admin API's operation (`setAutoscaler`): the autoscaler of the pool of SandboxSet `target` in
// team = namespace. As for SandboxSets, the newest generation per object uid wins (a late retry
// never rolls the spec back), a deletion of an object already re-created under the same name is
// stale, and a retargeted object (its scaleTargetRef changed) first removes itself from the old
// pool. Every answer carries the pool's autoscaler status, which the agent writes onto the
// object's status subresource.
// The row, generation and deletion rules are crd-objects.ts's.
import type { AutoscalerStatusReply, PoolAutoscalerItem } from "../../schema/protocol/index.ts";
import type { AutoscalerSpec } from "../../schema/api/autoscaler.ts";
import { ApiError } from "../../schema/errors.ts";
import type { Env } from "../env.ts";
import { setAutoscaler } from "../operations/autoscalers.ts";
import type { AutoscalerStatus } from "../pool/rpc.ts";
import { poolStub } from "../pool/stub.ts";
import { applySynced, pruneSynced, syncedTableSchema, type Reply, type SyncedKind, type Team } from "./crd-objects.ts";

export const CRD_AUTOSCALER_SCHEMA = syncedTableSchema("crd_autoscalers", "target");

/** The reply's copy of the status: only what the object's status shows, bounded by the schema. */
function statusReply(s: AutoscalerStatus): AutoscalerStatusReply {
  const { suspended, currentReplicas, desiredReplicas, lastScaleTime, currentCapacity, appliedCronPolicies, lastDecision, conditions, events } = s;
  return { suspended, currentReplicas, desiredReplicas, lastScaleTime, currentCapacity, appliedCronPolicies, lastDecision, conditions, events };
}

/** Removes the autoscaler from `target`'s pool; a template already gone has none. */
async function unset(env: Env, team: Team, target: string): Promise<void> {
  const res = await setAutoscaler(env, team.id, target, null);
  if (!res.ok && res.error.code !== "template_not_found") throw ApiError.from(res.error);
}

/** A PoolAutoscaler on the edge: the autoscaler of its target's pool (`own` is the target). */
const POOL_AUTOSCALERS: SyncedKind<{ target: string; spec: AutoscalerSpec }> = {
  kind: "PoolAutoscaler",
  table: "crd_autoscalers",
  own: "target",
  async status(env, team, _name, row) {
    const res = await poolStub(env, team.id, row.own).autoscalerStatus();
    if (!res.ok) throw ApiError.from(res.error);
    return { result: "applied", autoscaler: statusReply(res.status) };
  },
  remove: (env, team, _name, row) => unset(env, team, row.own),
  async upsert(env, team, item, live) {
    const res = await setAutoscaler(env, team.id, item.target, item.spec);
    if (!res.ok) return { reply: { result: "rejected", code: res.error.code, message: res.error.message } };
    // Retargeted (or the old object's last target under a new uid): the old pool is no longer sized.
    if (live && live.own !== item.target) await unset(env, team, live.own);
    return { reply: { result: "applied", autoscaler: statusReply(res.status) }, own: item.target };
  },
};

type Sql = Pick<SqlStorage, "exec">;
type ObjectItem = Exclude<PoolAutoscalerItem, { present: string[] }>;

export const applyPoolAutoscaler = (env: Env, sql: Sql, cluster: string, item: ObjectItem): Promise<Reply> => applySynced(env, sql, cluster, POOL_AUTOSCALERS, item);

export const prunePoolAutoscalers = (env: Env, sql: Sql, cluster: string, namespace: string, present: string[], serial: (name: string, work: () => Promise<Reply>) => Promise<Reply>): Promise<Reply> =>
  pruneSynced(env, sql, cluster, POOL_AUTOSCALERS, namespace, present, serial);
