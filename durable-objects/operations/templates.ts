// Putting and removing a team's template: the store first, then the template's PoolDO. The admin
// API and the CRD sync (a cluster's SandboxSets, applied by ClusterDO) both come here.
import type { TemplateRecord, TemplateSpec } from "../../schema/api/template.ts";
import { ApiError } from "../../schema/errors.ts";
import type { Env } from "../env.ts";
import { poolStub } from "../pool/stub.ts";
import type { Result } from "../sandbox/state.ts";
import { refusalsAsResult } from "./result.ts";
import { getDb } from "../store/db.ts";
import { evictTemplates } from "../store/template-cache.ts";
import { deleteTemplate, getTemplate, namesFreedImage, upsertTemplate } from "../store/templates.ts";
import { ensureTeam, listTeams } from "../store/teams.ts";
import { BUILT_IMAGE, nudgeImageGc } from "./image-gc.ts";
import { bindTeamCluster } from "./team-clusters.ts";

/** After a team's template left `cluster` (deleted, or moved to another): that cluster's agent
 * gets its SecurityProfile set again if it holds the team's, so a team it no longer serves (no
 * template and no sandbox there) is pruned now rather than at the next send (a profile may hold a
 * literal token). Best effort: the template change stands either way. */
async function templateLeft(env: Env, cluster: string, teamName: string): Promise<void> {
  await env.CLUSTER.get(env.CLUSTER.idFromName(cluster))
    .resendForTeam(teamName)
    .catch(() => {});
}

/** Pushes a template's current spec and revision to its pool; returns the pool's status. */
export async function configurePool(env: Env, t: TemplateRecord, teamName: string) {
  const res = await poolStub(env, t.teamId, t.templateId).configure({ teamId: t.teamId, teamName, templateId: t.templateId, revision: t.revision, spec: t.spec, cluster: t.spec.cluster });
  if (!res.ok) throw ApiError.from(res.error);
  return res.status;
}

export interface PutTemplateInput {
  teamName: string;
  templateId: string;
  public: boolean;
  spec: TemplateSpec;
  /** The writer is a cluster (its SandboxSet objects), not the operator: the fields only the admin
   * API sets keep their stored value whatever it sent (`nestedUserNamespaces`: whoever may write a
   * SandboxSet in a team's namespace must not loosen its sandboxes' seccomp filter). */
  byCluster?: boolean;
}

/** `spec` with the operator-only fields as `before` has them. */
function operatorFieldsKept(spec: TemplateSpec, before: TemplateSpec | undefined): TemplateSpec {
  const { nestedUserNamespaces: _asked, ...rest } = spec;
  return before?.nestedUserNamespaces ? { ...rest, nestedUserNamespaces: true } : rest;
}

/** Creates or replaces a team's template (the team is created when missing; an admin's write
 * binds it to the template's cluster) and configures its pool. */
export async function putTemplate(env: Env, input: PutTemplateInput): Promise<Result<{ template: TemplateRecord; pool: Awaited<ReturnType<typeof configurePool>>; existed: boolean }>> {
  return refusalsAsResult(async () => {
    const db = getDb(env);
    const team = await ensureTeam(db, input.teamName);
    const before = await getTemplate(db, team.id, input.templateId);
    const existed = before !== undefined;
    const spec = input.byCluster ? operatorFieldsKept(input.spec, before?.spec) : input.spec;
    const t = await upsertTemplate(db, { teamId: team.id, templateId: input.templateId, public: input.public, spec }).catch((err: unknown) => {
      if (namesFreedImage(err)) throw new ApiError("bad_request", `image "${spec.image}" was released (no template or tag referenced it) and is being freed; build the template again`);
      throw err;
    });
    evictTemplates();
    // A template's cluster serves its team (its pool's sandboxes there need the team's profiles):
    // the admin placing one binds them. A cluster's own write never binds (it got here bound
    // already, or as the install's only cluster). Before the pool, so its first members find it.
    if (!input.byCluster) await bindTeamCluster(db, team.id, t.spec.cluster);
    // The image it named before is freed by its cluster's collection once nothing holds it (a
    // create may have taken it just now); a failing nudge leaves that to the next pass. Before the
    // pool: a pool error must not skip it (the nudge only schedules the pass).
    if (before && before.spec.image !== t.spec.image && BUILT_IMAGE.test(before.spec.image)) await nudgeImageGc(env, before.spec.cluster);
    const pool = await configurePool(env, t, input.teamName);
    // A record's spec is parsed: its cluster is always named ("local" by default).
    if (before && before.spec.cluster !== t.spec.cluster) await templateLeft(env, before.spec.cluster, input.teamName);
    return { template: t, pool, existed };
  });
}

/** Deletes a team's template and drains its warm pool; `found` is false when there was none,
 * `template` the record as it was before the delete (none: none). */
export async function removeTemplate(env: Env, teamId: string, templateId: string): Promise<Result<{ found: boolean; template?: TemplateRecord }>> {
  return refusalsAsResult(async () => {
    const db = getDb(env);
    const before = await getTemplate(db, teamId, templateId);
    const found = await deleteTemplate(db, teamId, templateId);
    evictTemplates();
    // Drained even when the row was already gone: a pool may outlive a lost delete.
    const res = await poolStub(env, teamId, templateId).destroy();
    if (!res.ok) throw ApiError.from(res.error);
    const team = before && (await listTeams(db, teamId))[0];
    if (team) await templateLeft(env, before.spec.cluster, team.name);
    return { found, ...(before ? { template: before } : {}) };
  });
}
