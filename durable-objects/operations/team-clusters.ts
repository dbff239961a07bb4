// Which clusters may act for a team: the one home of the team↔cluster binding. The admin API
// (`/admin/teams/{team}/clusters`) binds and unbinds; the CRD sync (SandboxSets, SandboxClaims,
// quota annotations, TrafficPolicies, SecurityProfiles of a namespace) and ClusterDO's policy,
// profile and secret fan-out ask `clusterMayServe` / `clusterTeams`. Any cluster the edge trusts
// can name any namespace, so a namespace's name alone must never let a cluster receive a team's
// policies, profiles and secret values, set its quota or policies, or make sandboxes billed to it.
//
// `SINGLE_CLUSTER` (a var) names an install's only cluster (k8s/README.md): it acts for
// every team without a binding, as before bindings existed, and its SandboxSets may create teams.
// Unset (the default of a deployment), only bindings count.
//
// The global objects (GlobalTrafficPolicy, GlobalSecurityProfile) govern every team on every
// cluster, so no binding can vouch for their writer: only the clusters `GLOBAL_POLICY_CLUSTERS`
// names (and the `SINGLE_CLUSTER` one) may write them over the agent link (`globalWriterRefusal`).
import type { Refusal } from "../../schema/errors.ts";
import { ApiError } from "../../schema/errors.ts";
import type { Env } from "../env.ts";
import type { Result } from "../sandbox/state.ts";
import { refusalsAsResult } from "./result.ts";
import { getDb, type Db } from "../store/db.ts";
import { teamsWithTemplatesOn } from "../store/security-profiles.ts";
import { deleteBindingUnlessPlaced, insertBinding, isBound, listBindings, teamAndBinding, teamsBoundTo } from "../store/team-clusters.ts";
import { listTemplates } from "../store/templates.ts";
import { findTeamByName, type TeamRow } from "../store/teams.ts";
import { edgeLogger } from "../tracing/edge-log.ts";

const LOG = edgeLogger("team-clusters");

/** Whether `cluster` is the install's only cluster (serves every team, `SINGLE_CLUSTER`). */
function soleCluster(env: Pick<Env, "SINGLE_CLUSTER">, cluster: string): boolean {
  // Read lower-cased, as GLOBAL_POLICY_CLUSTERS: `Default` names the cluster `default`.
  return !!env.SINGLE_CLUSTER && env.SINGLE_CLUSTER.trim().toLowerCase() === cluster;
}

/**
 * Whether `cluster` may act for team `teamName`: the team (undefined only for the sole cluster,
 * whose SandboxSet creates a missing team), or a `forbidden` refusal naming the admin call that
 * binds them.
 */
export async function clusterMayServe(env: Env, cluster: string, teamName: string): Promise<{ ok: true; team: TeamRow | undefined } | { ok: false; error: Refusal }> {
  const db = getDb(env);
  if (soleCluster(env, cluster)) return { ok: true, team: await findTeamByName(db, teamName) };
  const found = await teamAndBinding(db, teamName, cluster);
  if (found?.bound) return { ok: true, team: found.team };
  return { ok: false, error: unboundRefusal(teamName, cluster, !!found) };
}

/** The refusal of a cluster not bound to team `teamName` (`exists`: whether there is such a team),
 * naming the admin call that binds them. */
export function unboundRefusal(teamName: string, cluster: string, exists: boolean): Refusal {
  const why = exists ? `team ${teamName} is not bound to cluster ${cluster}` : `there is no team ${teamName}, so cluster ${cluster} is not bound to it`;
  return { code: "forbidden", message: `${why}; an admin binds them with PUT /admin/teams/${teamName}/clusters/${cluster}` };
}

/** An existing team `cluster` may act for (to set its quota, policies or profiles), or why not as a
 * crd-sync reply (`what`: what the cluster may therefore not do). */
export async function clusterTeamOrRefusal(env: Env, cluster: string, teamName: string, what: string): Promise<{ team: TeamRow } | { result: "rejected"; code: string; message: string }> {
  const may = await clusterMayServe(env, cluster, teamName);
  if (!may.ok) return { result: "rejected", code: may.error.code, message: `${may.error.message} (so it may not set ${what})` };
  if (!may.team) return { result: "rejected", code: "not_found", message: `no team ${teamName}` };
  return { team: may.team };
}

/** Whether `cluster` still may act for the team of id `teamId` (known already): one read, for a
 * re-check after a write the check before it allowed. */
export async function clusterStillServes(env: Env, cluster: string, teamId: string): Promise<boolean> {
  return soleCluster(env, cluster) || (await isBound(getDb(env), teamId, cluster));
}

/** The teams `cluster` serves, for what ClusterDO sends its agent: `every` for the sole cluster,
 * else those bound to it (`bound`), and of them (or of every team, for the sole cluster) those with
 * a template placed there (`withTemplates`). One read. */
export async function clusterTeams(env: Env, cluster: string): Promise<{ every: boolean; bound: Set<string>; withTemplates: Set<string> }> {
  const db = getDb(env);
  if (soleCluster(env, cluster)) return { every: true, bound: new Set(), withTemplates: await teamsWithTemplatesOn(db, cluster) };
  return { every: false, ...(await teamsBoundTo(db, cluster)) };
}

/** Why `cluster` may not write (nor delete, nor read the status of) a global object of `kind`, or
 * null when it may: the clusters the operator names in `GLOBAL_POLICY_CLUSTERS` (comma-separated
 * ids) and the `SINGLE_CLUSTER` one. A binding does not qualify: a global object governs teams the
 * cluster is not bound to. `adminPath`: where the admin API writes that kind instead. */
export function globalWriterRefusal(env: Pick<Env, "SINGLE_CLUSTER" | "GLOBAL_POLICY_CLUSTERS">, cluster: string, kind: string, adminPath: string): Refusal | null {
  if (soleCluster(env, cluster) || globalPolicyClusters(env).has(cluster)) return null;
  return { code: "forbidden", message: `cluster ${cluster} may not set a ${kind}: it governs every team on every cluster, so only the clusters the edge's GLOBAL_POLICY_CLUSTERS var names may; an admin sets one with PUT ${adminPath}/{name}` };
}

function globalPolicyClusters(env: Pick<Env, "GLOBAL_POLICY_CLUSTERS">): Set<string> {
  // Cluster ids are lower case (CLUSTER_ID): `Platform-A` names the cluster `platform-a`.
  return new Set((env.GLOBAL_POLICY_CLUSTERS ?? "").split(",").map((c) => c.trim().toLowerCase()).filter(Boolean));
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
    if (await deleteBindingUnlessPlaced(db, team.id, cluster)) {
      // The cluster's agent loses the team's secret values and policies now, not at its next
      // hello. The unbind stands either way: a send that fails, the cluster object retries while
      // its agent stays connected (ClusterDO.resendSoon); if the object cannot be reached, the
      // values leave at its next send of the sets (a hello, a create or delete there, a change).
      await env.CLUSTER.get(env.CLUSTER.idFromName(cluster))
        .teamUnbound(team.name)
        .catch((err: unknown) => LOG.warn("an unbind's sets not resent now", { cluster, team: team.name, error: err }));
      return { found: true };
    }
    const there = (await listTemplates(db, team.id)).filter((t) => t.teamId === team.id && t.spec.cluster === cluster).map((t) => t.templateId);
    if (there.length) throw new ApiError("conflict", `templates of team ${team.name} run on cluster ${cluster} (${there.slice(0, 10).join(", ")}${there.length > 10 ? ", …" : ""}); delete or move them first`);
    return { found: false };
  });
}

export async function listTeamClusters(db: Db, teamId: string): Promise<{ cluster: string; createdAt: number }[]> {
  return listBindings(db, teamId);
}
