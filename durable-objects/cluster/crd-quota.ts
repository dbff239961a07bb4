// A team quota from the cluster (the `quota.agents.kruise.io/*` annotations of the team's
// Namespace, schema/protocol/crd-sync.ts `quotas`), applied through the admin API's operation.
//
// Which cluster may set a team's quota: one bound to the team (operations/team-clusters.ts: the
// admin's binding, or a template the admin placed there). A quota is team-wide (it counts the
// team's sandboxes on every cluster), so a cluster that merely has a namespace of that name must
// not be able to raise or lower it. Two clusters bound to one team: the last edit wins.
//
// A Namespace without quota annotations (`limits: {}`) returns the team to the defaults only if
// this cluster set its quota before (remembered here): an agent that starts and finds no
// annotations must not wipe limits the admin API set.
import type { ReplyItem, TeamQuotaItem } from "../../schema/protocol/index.ts";
import type { Env } from "../env.ts";
import { setTeamQuota } from "../operations/quotas.ts";
import { clusterTeamOrRefusal } from "../operations/team-clusters.ts";

type Sql = Pick<SqlStorage, "exec">;

export const CRD_QUOTA_SCHEMA = "CREATE TABLE IF NOT EXISTS crd_quotas (namespace TEXT PRIMARY KEY);";

export async function applyTeamQuota(env: Env, sql: Sql, cluster: string, item: TeamQuotaItem): Promise<Omit<ReplyItem, "id">> {
  const may = await clusterTeamOrRefusal(env, cluster, item.namespace, "the team's quota");
  if ("result" in may) return may;
  const team = may.team;
  const clearing = Object.values(item.limits).every((v) => v === undefined);
  const ours = sql.exec("SELECT 1 FROM crd_quotas WHERE namespace = ?", item.namespace).toArray().length > 0;
  if (clearing && !ours) return { result: "applied", message: "no quota annotations; the team's quota was not set from this cluster" };
  const res = await setTeamQuota(env, team.id, item.limits);
  if (!res.ok) return { result: "rejected", code: res.error.code, message: res.error.message };
  if (clearing) sql.exec("DELETE FROM crd_quotas WHERE namespace = ?", item.namespace);
  else sql.exec("INSERT OR REPLACE INTO crd_quotas (namespace) VALUES (?)", item.namespace);
  return { result: "applied" };
}
