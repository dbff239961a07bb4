// SandboxUpdateOps from the cluster (schema/protocol/crd-sync.ts `updateops`), applied through the
// admin API's operation (operations/update-ops.ts), so a run behaves the same whichever door it
// came in by: the run `name` of team = namespace. As for the other synced objects the newest
// generation per uid wins (a late retry never rolls `paused` back), a deletion of an object
// already re-created under the same name is stale, and an object re-created under a new uid
// replaces the old run. A new `retry` token on the same object retries the run's failed
// sandboxes once. Every answer carries the run's status, which the agent writes onto the object.
// The row, generation and deletion rules are crd-objects.ts's.
import type { UpdateOpsItem, UpdateOpsStatusReply } from "../../schema/protocol/index.ts";
import { MAX_UPDATE_OPS_LINES } from "../../schema/protocol/index.ts";
import { clipText, MAX_MESSAGE_LENGTH } from "../../schema/api/limits.ts";
import type { UpdateOpsSpec } from "../../schema/api/update-ops.ts";
import type { Env } from "../env.ts";
import type { OpsResult, OpsView } from "../ops/update-ops-do.ts";
import { removeUpdateOps, resumeUpdateOps, startUpdateOps, updateOpsStatus } from "../operations/update-ops.ts";
import { applySynced, pruneSynced, syncedTableSchema, type Reply, type SyncedKind } from "./crd-objects.ts";

export const CRD_UPDATE_OPS_SCHEMA = syncedTableSchema("crd_updateops", "retry");

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

/** A SandboxUpdateOps on the edge: the run `name` of its team (`own` is the last retry token). */
const UPDATE_OPS: SyncedKind<{ spec: UpdateOpsSpec; retry?: string }> = {
  kind: "SandboxUpdateOps",
  table: "crd_updateops",
  own: "retry",
  status: async (env, team, name) => answer(await updateOpsStatus(env, team, name)),
  remove: async (env, team, name) => void (await removeUpdateOps(env, team, name)), // not found: nothing to remove
  async upsert(env, team, item, live) {
    // Re-created under the same name: the old object's run goes, the new one starts afresh.
    if (live && live.uid !== item.uid) await removeUpdateOps(env, team, item.name);
    const started = await startUpdateOps(env, team, item.name, item.spec);
    if (!started.ok) return { reply: answer(started) };
    const retry = item.retry ?? "";
    const sameObject = live && live.uid === item.uid;
    const res = sameObject && retry !== live.own && retry !== "" ? await resumeUpdateOps(env, team, item.name) : started;
    return { reply: answer(res), own: retry };
  },
};

type Sql = Pick<SqlStorage, "exec">;
type ObjectItem = Exclude<UpdateOpsItem, { present: string[] }>;

export const applyUpdateOps = (env: Env, sql: Sql, cluster: string, item: ObjectItem): Promise<Reply> => applySynced(env, sql, cluster, UPDATE_OPS, item);

/** Removes the runs this cluster synced into the namespace that it no longer has. */
export const pruneUpdateOps = (env: Env, sql: Sql, cluster: string, namespace: string, present: string[], serial: (name: string, work: () => Promise<Reply>) => Promise<Reply>): Promise<Reply> =>
  pruneSynced(env, sql, cluster, UPDATE_OPS, namespace, present, serial);
