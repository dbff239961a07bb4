// Which clusters may act for a team: the one home of the team↔cluster binding. The admin API
// (`/admin/teams/{team}/clusters`) binds and unbinds; the CRD sync (SandboxSets, SandboxClaims,
// quota annotations, TrafficPolicies, SecurityProfiles of a namespace) and ClusterDO's profile and
// secret fan-out ask `clusterMayServe` / `servedTeams`. Any cluster the edge trusts can name any
// namespace, so a namespace's name alone must never let a cluster receive a team's profiles and
// secret values, set its quota or policies, or make sandboxes billed to it.
//
// `SINGLE_CLUSTER` (a var) names an install's only cluster (k8s/README.md): it acts for
// every team without a binding, as before bindings existed, and its SandboxSets may create teams.
// Unset (the default of a deployment), only bindings count.
import type { Refusal } from "../../schema/errors.ts";
import { ApiError } from "../../schema/errors.ts";
import type { Env } from "../env.ts";
import type { Result } from "../sandbox/state.ts";
import { refusalsAsResult } from "./result.ts";
import { getDb, type Db } from "../store/db.ts";
import { deleteBindingUnlessPlaced, insertBinding, isBound, listBindings, teamsBoundTo } from "../store/team-clusters.ts";
import { listTemplates } from "../store/templates.ts";
import { findTeamByName, type TeamRow } from "../store/teams.ts";

/** Whether `cluster` is the install's only cluster (serves every team, `SINGLE_CLUSTER`). */
function soleCluster(env: Pick<Env, "SINGLE_CLUSTER">, cluster: string): boolean {
  return !!env.SINGLE_CLUSTER && env.SINGLE_CLUSTER === cluster;
}

/**
 * Whether `cluster` may act for team `teamName`: the team (undefined only for the sole cluster,
 * whose SandboxSet creates a missing team), or a `forbidden` refusal naming the admin call that
 * binds them.
 */
export async function clusterMayServe(env: Env, cluster: string, teamName: string): Promise<{ ok: true; team: TeamRow | undefined } | { ok: false; error: Refusal }> {
  const db = getDb(env);
  const team = await findTeamByName(db, teamName);
  if (soleCluster(env, cluster)) return { ok: true, team };
  if (team && (await isBound(db, team.id, cluster))) return { ok: true, team };
  const why = team ? `team ${teamName} is not bound to cluster ${cluster}` : `there is no team ${teamName}, so cluster ${cluster} is not bound to it`;
  return { ok: false, error: { code: "forbidden", message: `${why}; an admin binds them with PUT /admin/teams/${teamName}/clusters/${cluster}` } };
}

/** An existing team `cluster` may act for (to set its quota, policies or profiles), or why not as a
 * crd-sync reply (`what`: what the cluster may therefore not do). */
export async function clusterTeamOrRefusal(env: Env, cluster: string, teamName: string, what: string): Promise<{ team: TeamRow } | { result: "rejected"; code: string; message: string }> {
  const may = await clusterMayServe(env, cluster, teamName);
  if (!may.ok) return { result: "rejected", code: may.error.code, message: `${may.error.message} (so it may not set ${what})` };
  if (!may.team) return { result: "rejected", code: "not_found", message: `no team ${teamName}` };
  return { team: may.team };
}

/** Of `teams` (names), those `cluster` may act for. */
export async function servedTeams(env: Env, cluster: string, teams: Set<string>): Promise<Set<string>> {
  if (soleCluster(env, cluster) || teams.size === 0) return teams;
  const bound = await teamsBoundTo(getDb(env), cluster);
  return new Set([...teams].filter((t) => bound.has(t)));
}

/** Binds `cluster` to the team (idempotent): a template placed there, or the admin's PUT. */
export async function bindTeamCluster(db: Db, teamId: string, cluster: string): Promise<{ created: boolean }> {
  return { created: await insertBinding(db, teamId, cluster) };
}

/**
 * Unbinds; refused (`conflict`) while a template of the team runs on the cluster: its pool would
 * keep making sandboxes there that need the team's profiles. Delete or move those templates first.
 */
export async function unbindTeamCluster(env: Env, team: TeamRow, cluster: string): Promise<Result<{ found: boolean }>> {
  return refusalsAsResult(async () => {
    const db = getDb(env);
    // The check and the delete are one statement, so a template the cluster writes meanwhile
    // cannot slip between them; nothing deleted is then either "not bound" or "a template there".
    if (await deleteBindingUnlessPlaced(db, team.id, cluster)) return { found: true };
    const there = (await listTemplates(db, team.id)).filter((t) => t.teamId === team.id && t.spec.cluster === cluster).map((t) => t.templateId);
    if (there.length) throw new ApiError("conflict", `templates of team ${team.name} run on cluster ${cluster} (${there.slice(0, 10).join(", ")}${there.length > 10 ? ", …" : ""}); delete or move them first`);
    return { found: false };
  });
}

export async function listTeamClusters(db: Db, teamId: string): Promise<{ cluster: string; createdAt: number }[]> {
  return listBindings(db, teamId);
}
