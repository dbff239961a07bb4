// E2B template builds (`Template.build`): request, start, record what the agent reports, and read
// status and logs. Build state lives in libSQL (store/template-builds.ts): builds are read by any
// isolate polling status, are few and write in batches (a frame of log lines is one insert), and
// a finished build becomes a template row in the same database. The agent runs the steps
// (controllers/drivers/local/builder/); ClusterDO hands it the build and its events come back here.
import { LOGGED_BUILDS_PER_TEAM, MAX_BUILD_LOG_ENTRIES, MAX_TEAM_BUILDS, MAX_TEAM_WAITING_BUILDS, WAITING_BUILD_TTL_MS, BUILD_SILENCE_MS, stepsEnv, type BuildLogEntry, type BuildStatus, type TemplateBuildInfo, type TemplateBuildStart } from "../../schema/api/template-build.ts";
import { TemplateSpec } from "../../schema/api/template.ts";
import { ApiError } from "../../schema/errors.ts";
import { configProblem, type BuildEvents, type BuildFrame } from "../../schema/protocol/build.ts";
import type { Caller, Env } from "../env.ts";
import { quotaStub } from "../quota/stub.ts";
import { getDb } from "../store/db.ts";
import { claimUnusedImages, getBuild, insertWaitingBuild, lastLogs, logsFrom, moveBuild, pruneBuildLogs, putTags, startWaitingBuild, touchBuild, appendLogs, useFiles, type BuildRow, type LogRow } from "../store/template-builds.ts";
import { getTemplate, resolveTemplate } from "../store/templates.ts";
import { BUILT_IMAGE, nudgeImageGc } from "./image-gc.ts";
import { putTemplate } from "./templates.ts";

/** What `POST /v3/templates` answers (E2B TemplateRequestResponseV3). */
export interface BuildRequested {
  templateID: string;
  buildID: string;
  public: boolean;
  aliases: string[];
  names: string[];
  tags: string[];
}

export interface RequestBuildInput {
  name: string;
  tags: string[];
  cpuCount?: number;
  memoryMB?: number;
}

/** Registers a build of the caller's template `name` (waiting for its start). */
export async function requestBuild(env: Env, caller: Caller, input: RequestBuildInput): Promise<BuildRequested> {
  const db = getDb(env);
  const visible = await resolveTemplate(db, caller.teamId, input.name);
  if (visible && visible.teamId !== caller.teamId) throw new ApiError("conflict", `template name "${input.name}" is taken by a public template; choose another name`);
  const spec = visible?.spec ?? TemplateSpec.parse({});
  const id = crypto.randomUUID();
  const now = Date.now();
  const row: BuildRow = {
    id,
    teamId: caller.teamId,
    teamName: caller.teamName,
    templateId: input.name,
    cluster: spec.cluster,
    status: "waiting",
    cpuCount: input.cpuCount ?? spec.cpuCount,
    memoryMB: input.memoryMB ?? spec.memoryMB,
    tags: input.tags,
    startCmd: null,
    readyCmd: null,
    reason: null,
    image: `b-${id}`,
    inherit: null,
    baseImage: null,
    createdAt: now,
    updatedAt: now,
    finishedAt: null,
  };
  await insertWaitingBuild(db, row, MAX_TEAM_WAITING_BUILDS, WAITING_BUILD_TTL_MS);
  return { templateID: input.name, buildID: id, public: visible?.public ?? false, aliases: [input.name], names: [input.name], tags: input.tags };
}

/** The build if the caller's team owns it and it belongs to `templateId`, else E2B's 404. */
export async function visibleBuild(env: Env, caller: Caller, templateId: string, buildId: string): Promise<BuildRow> {
  const b = await getBuild(getDb(env), buildId);
  if (!b || b.templateId !== templateId || (b.teamId !== caller.teamId && !caller.admin)) throw new ApiError("template_not_found", `Build "${buildId}" of template "${templateId}" not found`);
  return b;
}

/** Starts a waiting build on its cluster's agent (`POST /v2/templates/{id}/builds/{buildID}`). */
export async function startBuild(env: Env, caller: Caller, templateId: string, buildId: string, body: TemplateBuildStart): Promise<void> {
  const db = getDb(env);
  const b = await visibleBuild(env, caller, templateId, buildId);
  if (b.status !== "waiting") throw new ApiError("conflict", `build "${buildId}" was already started (${b.status})`);
  if (body.fromImageRegistry !== undefined) throw new ApiError("bad_request", "fromImageRegistry: this server pulls no images from registries; build from a template or a known base image");
  let from: { rootfs: string } | { image: string } = { image: body.fromImage ?? "e2bdev/base" };
  let inherit: BuildRow["inherit"] = null;
  let config: BuildFrame["config"];
  let commands: { startCmd?: string; readyCmd?: string } = { startCmd: body.startCmd, readyCmd: body.readyCmd };
  if (body.fromTemplate) {
    const base = await resolveTemplate(db, b.teamId, body.fromTemplate.name);
    if (!base) throw new ApiError("bad_request", `fromTemplate: template "${body.fromTemplate.name}" not found`);
    from = { rootfs: base.spec.image };
    inherit = inheritedSpec(base.spec);
    config = { user: base.spec.user, workdir: base.spec.workdir, env: base.spec.env };
    // The base's env plus the steps' must still be a template's config (count, bytes: a chain of
    // ENV-only builds adds up), refused here before any slot or quota; the builder checks it again
    // with the steps' WORKDIR and USER applied.
    const bad = configProblem({ ...config, env: stepsEnv(body.steps, config.env) });
    if (bad) throw new ApiError("bad_request", `fromTemplate "${body.fromTemplate.name}": ${bad}`);
    commands = inheritedCommands(base.spec, body);
  }
  const copies = body.steps.flatMap((s, i) => (s.type === "COPY" ? [{ i, s }] : []));
  const present = await useFiles(db, b.teamId, [...new Set(copies.map(({ s }) => s.filesHash!))]);
  for (const { i, s } of copies) {
    if (!present.has(s.filesHash!)) throw new ApiError("bad_request", `steps.${i}: the files of COPY ${JSON.stringify(s.args[0]!.slice(0, 64))} were not uploaded (hash ${s.filesHash})`);
  }
  const reserved = await quotaStub(env, b.teamId).reserve({ teamId: b.teamId, teamName: b.teamName, sandboxId: quotaKey(b.id), generation: 1, cpu: b.cpuCount, memoryMB: b.memoryMB });
  if (!reserved.ok) throw ApiError.from(reserved.error);
  // The base it stands on is recorded with the move: the image is not freed while it runs.
  const baseImage = "rootfs" in from ? from.rootfs : null;
  const started = await startWaitingBuild(db, b, MAX_TEAM_BUILDS, { startCmd: commands.startCmd ?? null, readyCmd: commands.readyCmd ?? null, inherit, baseImage });
  if (started !== "started") {
    await releaseQuota(env, b);
    if (started === "busy") throw new ApiError("quota_exceeded", `team "${b.teamName}" already runs ${MAX_TEAM_BUILDS} builds; wait for one to finish`);
    throw new ApiError("conflict", `build "${buildId}" was already started`);
  }
  const sent = await env.CLUSTER.get(env.CLUSTER.idFromName(b.cluster)).startBuild({
    buildId: b.id,
    teamId: b.teamId,
    from,
    steps: body.steps,
    ...(config ? { config } : {}),
    force: body.force,
    cpuCount: b.cpuCount,
    memoryMB: b.memoryMB,
    output: b.image,
    filesPath: `/agent/v1/builds/${b.id}/files/`,
  });
  if (!sent.ok) {
    await finish(env, b, { status: "error", reason: { message: sent.error.message } });
    throw ApiError.from(sent.error);
  }
}

/**
 * What a template built `fromTemplate(base)` takes from base's spec beside its layers, its config
 * (user, workdir, env: the build's starting point) and its commands (`inheritedCommands`): the code
 * interpreter on port 49999 (its kernels need base's Python and Jupyter, which the layers carry,
 * and the flag, which the spec does). Added to the built template's spec; never removed from it.
 */
export function inheritedSpec(base: TemplateSpec): BuildRow["inherit"] {
  return base.codeInterpreter ? { codeInterpreter: true } : null;
}

/**
 * The start and ready commands of a template built `fromTemplate(base)`: its own, else base's, as
 * a Dockerfile's CMD carries over from the image it is built FROM. A template that sets its own
 * start command gets its own ready command with it (base's would check base's process), or none.
 */
export function inheritedCommands(base: TemplateSpec, own: Pick<TemplateBuildStart, "startCmd" | "readyCmd">): { startCmd?: string; readyCmd?: string } {
  if (own.startCmd !== undefined) return { startCmd: own.startCmd, readyCmd: own.readyCmd };
  return { startCmd: base.startCmd, readyCmd: own.readyCmd ?? base.readyCmd };
}

/** The key a build's resources are reserved under in the team's quota (beside its sandboxes). */
function quotaKey(buildId: string): string {
  return `build-${buildId}`;
}

async function releaseQuota(env: Env, b: BuildRow): Promise<void> {
  const r = await quotaStub(env, b.teamId).release(quotaKey(b.id), 1);
  if (!r.ok) console.warn(`build ${b.id}: quota release failed: ${r.error.message}`);
}

async function finish(env: Env, b: BuildRow, to: { status: "ready" | "error"; reason?: { message: string; step?: string } }): Promise<boolean> {
  const now = Date.now();
  const moved = await moveBuild(getDb(env), b.id, ["building", "waiting"], { status: to.status, reason: to.reason ?? null, finishedAt: now });
  if (moved) await Promise.all([releaseQuota(env, b), pruneBuildLogs(getDb(env), b.teamId, LOGGED_BUILDS_PER_TEAM)]);
  // A failed build no longer stands on its base image (and published none of its own worth
  // keeping): both may be claimed now. (A ready build nudges once its tags are in place.)
  if (moved && to.status === "error") await nudgeImageGc(env, b.cluster);
  return moved;
}

/**
 * What the cluster's agent reported (ClusterDO's `buildEvents`); only for builds it runs. Answers
 * the builds whose result is stored now (each write awaited), was stored before, or has nowhere to
 * go (a build this edge no longer has, or another cluster's): the ones ClusterDO may ack. A result
 * is applied once: the agent sends it again until acked (a session dropped before the ack), and a
 * build already ended stays as it ended. An item whose writes fail is not acked (the agent sends
 * it again); the others go on.
 */
export async function recordBuildEvents(env: Env, cluster: string, items: BuildEvents["items"]): Promise<string[]> {
  const stored: string[] = [];
  for (const item of items) {
    try {
      if (await recordBuildItem(env, cluster, item)) stored.push(item.buildId);
    } catch (err) {
      console.error(`build ${item.buildId}: events not recorded`, err);
    }
  }
  return stored;
}

/** One build's item; true when it carried a result that needs no further delivery. */
async function recordBuildItem(env: Env, cluster: string, item: BuildEvents["items"][number]): Promise<boolean> {
  const db = getDb(env);
  const b = await getBuild(db, item.buildId);
  if (!b && item.result) {
    // Its template was deleted while it ran: the delete claimed its image before the agent
    // published it (and may have sent the name already). Claimed again, it is sent again.
    const image = `b-${item.buildId}`;
    if (BUILT_IMAGE.test(image) && (await claimUnusedImages(db, [image], cluster, Date.now(), true)).size) await nudgeImageGc(env, cluster);
    return true;
  }
  if (!b || b.cluster !== cluster) return item.result !== undefined;
  const r = item.result;
  if (b.status !== "building") {
    // A repeat (the ack of the first was lost) or a late result (the build was failed for its
    // silence meanwhile): what it ended as stands. Every one is logged: the first payload is not
    // kept, so a repeat and a different result of the same status cannot be told apart here.
    if (r && r.status !== b.status) console.warn(`build ${b.id}: a ${r.status} result ignored, the build already ended ${b.status}`);
    else if (r) console.info(`build ${b.id}: a ${r.status} result again (a repeat, or a different one) ignored, the build already ended ${b.status}`);
    return r !== undefined;
  }
  await appendLogs(db, b.id, item.logs, MAX_BUILD_LOG_ENTRIES);
  if (!r) {
    await touchBuild(db, b.id);
    return false;
  }
  if (r.status === "error") {
    await finish(env, b, { status: "error", reason: { message: r.message, ...(r.step ? { step: r.step } : {}) } });
    return true;
  }
  const existing = await getTemplate(db, b.teamId, b.templateId);
  // The commands are the build's own (or its base's): a rebuild without them has none, not the
  // previous build's.
  const { startCmd: _s, readyCmd: _r, ...kept } = existing?.spec ?? {};
  const spec = TemplateSpec.safeParse({
    ...kept,
    ...(b.inherit ?? {}),
    cluster: b.cluster,
    image: b.image,
    cpuCount: b.cpuCount,
    memoryMB: b.memoryMB,
    user: r.user,
    workdir: r.workdir,
    env: r.env,
    ...(b.startCmd ? { startCmd: b.startCmd } : {}),
    ...(b.readyCmd ? { readyCmd: b.readyCmd } : {}),
  });
  if (!spec.success) {
    await finish(env, b, { status: "error", reason: { message: `the built template is not valid: ${spec.error.issues[0]?.message ?? "?"}`, step: "finalize" } });
    return true;
  }
  // Not `byCluster`: the cluster ran the edge's build, it did not choose the placement, so the
  // team is bound to the build's cluster as for an admin's write (schema/db/tables.ts
  // `team_clusters`): its pool's sandboxes there need the team's profiles.
  const put = await putTemplate(env, { teamName: b.teamName, templateId: b.templateId, public: existing?.public ?? false, spec: spec.data });
  if (!put.ok) {
    await finish(env, b, { status: "error", reason: { message: `the template could not be registered: ${put.error.message}`, step: "finalize" } });
    return true;
  }
  await putTags(db, b.teamId, b.templateId, b.tags, b.id);
  await finish(env, b, { status: "ready" });
  // The previous build's image, now that its tags may have moved to this build (putTemplate's
  // pass ran before they had), and the builds that stood on another image are done.
  await nudgeImageGc(env, b.cluster);
  return true;
}

function entry(l: LogRow): BuildLogEntry {
  return { timestamp: new Date(l.at).toISOString(), level: l.level as BuildLogEntry["level"], message: l.message, ...(l.step ? { step: l.step } : {}) };
}

/** Fails a build whose agent went silent (restarted or gone); answers the row as it is now. */
async function expireSilent(env: Env, b: BuildRow, now = Date.now()): Promise<BuildRow> {
  if (b.status !== "building" || now - b.updatedAt < BUILD_SILENCE_MS) return b;
  const reason = { message: `the builder reported nothing for ${BUILD_SILENCE_MS / 60_000} minutes (agent restarted or gone)` };
  if (await finish(env, b, { status: "error", reason })) return { ...b, status: "error", reason };
  return (await getBuild(getDb(env), b.id)) ?? b;
}

/** `GET /templates/{id}/builds/{buildID}/status?logsOffset=N`: entries from the N-th on. */
export async function buildStatus(env: Env, caller: Caller, templateId: string, buildId: string, logsOffset: number): Promise<TemplateBuildInfo> {
  const db = getDb(env);
  const b = await expireSilent(env, await visibleBuild(env, caller, templateId, buildId));
  const entries = (await logsFrom(db, b.id, logsOffset, 100)).map(entry);
  const info: TemplateBuildInfo = {
    templateID: b.templateId,
    buildID: b.id,
    status: b.status as BuildStatus,
    logEntries: entries,
    logs: entries.map((e) => `[${e.timestamp}] ${e.message}`),
  };
  if (b.status === "error" && b.reason) info.reason = { ...b.reason, logEntries: (await lastLogs(db, b.id, 20)).map(entry) };
  return info;
}

export { entry as buildLogEntry };
