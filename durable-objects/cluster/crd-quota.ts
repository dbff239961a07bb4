// A team quota from the cluster (the `quota.agents.kruise.io/*` annotations of the team's
// Namespace, schema/protocol/crd-sync.ts `quotas`), applied through the admin API's operation.
//
// Which cluster may set a team's quota: one that serves the team, i.e. runs at least one of the
// team's templates (a SandboxSet it synced, or a template the admin placed on it), the scope
// SandboxSets already have (a cluster acts on the templates it runs). A quota is team-wide (it
// counts the team's sandboxes on every cluster), so a cluster that merely has a namespace of that
// name must not be able to raise or lower it. Two clusters serving one team: the last edit wins.
//
// A Namespace without quota annotations (`limits: {}`) returns the team to the defaults only if
// this cluster set its quota before (remembered here): an agent that starts and finds no
// annotations must not wipe limits the admin API set.
import type { ReplyItem, TeamQuotaItem } from "../../schema/protocol/index.ts";
import type { Env } from "../env.ts";
import { setTeamQuota } from "../operations/quotas.ts";
import { getDb } from "../store/db.ts";
import { listTemplates } from "../store/templates.ts";
import { findTeamByName } from "../store/teams.ts";

type Sql = Pick<SqlStorage, "exec">;

export const CRD_QUOTA_SCHEMA = "CREATE TABLE IF NOT EXISTS crd_quotas (namespace TEXT PRIMARY KEY);";

export async function applyTeamQuota(env: Env, sql: Sql, cluster: string, item: TeamQuotaItem): Promise<Omit<ReplyItem, "id">> {
  const db = getDb(env);
  const team = await findTeamByName(db, item.namespace);
  const served = team && (await listTemplates(db, team.id)).some((t) => t.teamId === team.id && t.spec.cluster === cluster);
  if (!team || !served) {
    return { result: "rejected", code: "forbidden", message: `cluster ${cluster} runs no template of team ${item.namespace}, so it may not set the team's quota (apply a SandboxSet in the namespace first)` };
  }
  const clearing = Object.values(item.limits).every((v) => v === undefined);
  const ours = sql.exec("SELECT 1 FROM crd_quotas WHERE namespace = ?", item.namespace).toArray().length > 0;
  if (clearing && !ours) return { result: "applied", message: "no quota annotations; the team's quota was not set from this cluster" };
  const res = await setTeamQuota(env, team.id, item.limits);
  if (!res.ok) return { result: "rejected", code: res.error.code, message: res.error.message };
  if (clearing) sql.exec("DELETE FROM crd_quotas WHERE namespace = ?", item.namespace);
  else sql.exec("INSERT OR REPLACE INTO crd_quotas (namespace) VALUES (?)", item.namespace);
  return { result: "applied" };
}
