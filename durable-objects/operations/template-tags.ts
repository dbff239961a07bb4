// Names of built templates: aliases (a template's id is its name within the team), tags (each
// names one build) and deleting a template with its builds.
import { ApiError } from "../../schema/errors.ts";
import type { Caller, Env } from "../env.ts";
import { getDb } from "../store/db.ts";
import { buildsOf, deleteBuildsOf, deleteTags, putTags, tagsOf } from "../store/template-builds.ts";
import { resolveTemplate } from "../store/templates.ts";
import { BUILT_IMAGE, nudgeImageGc } from "./image-gc.ts";
import { removeTemplate } from "./templates.ts";

/** `GET /templates/aliases/{alias}`: the caller's template (or a build of it), or a public one. */
export async function aliasOf(env: Env, caller: Caller, alias: string): Promise<{ templateID: string; public: boolean }> {
  const db = getDb(env);
  const t = await resolveTemplate(db, caller.teamId, alias);
  if (t) return { templateID: t.templateId, public: t.public };
  if ((await buildsOf(db, caller.teamId, alias)).length) return { templateID: alias, public: false };
  throw new ApiError("template_not_found", `Template alias "${alias}" not found`);
}

/** `POST /templates/tags`: `target` is `name` (its newest ready build) or `name:tag`. */
export async function assignTags(env: Env, caller: Caller, target: { name: string; tag?: string }, tags: string[]): Promise<{ buildID: string; tags: string[] }> {
  const db = getDb(env);
  const buildId = target.tag
    ? (await tagsOf(db, caller.teamId, target.name)).find((t) => t.tag === target.tag)?.buildId
    : (await buildsOf(db, caller.teamId, target.name)).find((b) => b.status === "ready")?.id;
  if (!buildId) throw new ApiError("template_not_found", `Template "${target.name}${target.tag ? `:${target.tag}` : ""}" has no such build`);
  await putTags(db, caller.teamId, target.name, tags, buildId);
  // A tag that moved may have been the last reference to the build it named.
  await nudgeClustersOf(env, caller.teamId, target.name);
  return { buildID: buildId, tags };
}

export async function removeTags(env: Env, caller: Caller, name: string, tags: string[]): Promise<void> {
  if (!(await deleteTags(getDb(env), caller.teamId, name, tags))) throw new ApiError("template_not_found", `Template "${name}" has none of these tags`);
  await nudgeClustersOf(env, caller.teamId, name);
}

/** A pass on each cluster the template's builds ran on: a tag is a reference to one of them. */
async function nudgeClustersOf(env: Env, teamId: string, templateId: string): Promise<void> {
  const clusters = new Set((await buildsOf(getDb(env), teamId, templateId)).map((b) => b.cluster));
  for (const cluster of clusters) await nudgeImageGc(env, cluster);
}

export async function listTags(env: Env, caller: Caller, templateId: string) {
  const db = getDb(env);
  if (!(await buildsOf(db, caller.teamId, templateId)).length) throw new ApiError("template_not_found", `Template "${templateId}" not found`);
  return (await tagsOf(db, caller.teamId, templateId)).map((t) => ({ tag: t.tag, buildID: t.buildId, createdAt: new Date(t.createdAt).toISOString() }));
}

/** `DELETE /templates/{id}`: the caller's template, its pool and its builds. Each cluster's agent
 * is asked to free the root filesystems of its builds (and the one its spec named) that no other
 * template names and no remaining build published: two templates may share one build's image
 * (`code-interpreter-v1` and `code-interpreter`), and deleting either leaves the other working;
 * the last one's delete frees it. The check and the claim are one statement, in one batch with
 * the builds' delete (`deleteBuildsOf`: a failure leaves the rows, so nothing is leaked), and a
 * template write naming a claimed image is refused: a concurrent PUT cannot take an image this
 * frees. The cluster's collection tells the agent (operations/image-gc.ts: after a grace
 * period, once no sandbox there names it); the agent keeps layers a sandbox still mounts. */
export async function deleteTemplateAndBuilds(env: Env, caller: Caller, templateId: string): Promise<void> {
  const db = getDb(env);
  const removed = await removeTemplate(env, caller.teamId, templateId);
  if (!removed.ok) throw ApiError.from(removed.error);
  const spec = removed.template?.spec;
  const { builds, claimed } = await deleteBuildsOf(db, caller.teamId, templateId, spec && BUILT_IMAGE.test(spec.image) ? { image: spec.image, cluster: spec.cluster } : undefined);
  if (!removed.found && !builds) throw new ApiError("template_not_found", `Template "${templateId}" not found`);
  for (const cluster of claimed.keys()) await nudgeImageGc(env, cluster);
}
