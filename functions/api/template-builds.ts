// E2B's template build API (`Template.build`, `Template.exists`, tags): thin routes over the build
// operations (durable-objects/operations/template-*.ts).
//   POST   /v3/templates, /v2/templates                 register a build (202)
//   GET    /templates/{id}/files/{hash}                 upload link for a copy step's archive (201)
//   PUT    /template-files/{team}/{hash}?expires&signature   the upload itself (signed, no key)
//   GET    /agent/v1/builds/{buildID}/files/{hash}      the archive, for the agent (cluster token)
//   POST   /v2/templates/{id}/builds/{buildID}          start (202)
//   GET    /templates/{id}/builds/{buildID}/status      status + log entries from logsOffset
//   GET    /templates/{id}/builds/{buildID}/logs        log entries by time
//   GET    /templates/aliases/{alias}; POST, DELETE /templates/tags; GET /templates/{id}/tags
//   DELETE /templates/{id}
import { Hono } from "hono";
import { agentFile, fileUploadLink, receiveUpload, verifyUpload } from "../../durable-objects/operations/template-files.ts";
import { buildLogEntry, buildStatus, requestBuild, startBuild, visibleBuild } from "../../durable-objects/operations/template-builds.ts";
import { aliasOf, assignTags, deleteTemplateAndBuilds, listTags, removeTags } from "../../durable-objects/operations/template-tags.ts";
import { getDb } from "../../durable-objects/store/db.ts";
import { logsByTime } from "../../durable-objects/store/template-builds.ts";
import { TemplateId } from "../../schema/api/template.ts";
import { MAX_TEMPLATE_FILE_BYTES, AssignTags, BuildLogsQuery, BuildStatusQuery, DeleteTags, TemplateBuildRequest, TemplateBuildStart } from "../../schema/api/template-build.ts";
import { ApiError } from "../api-error.ts";
import { parseOr400, readBytes, readJson } from "../body.ts";
import type { AppEnv } from "../env.ts";

export const templateBuilds = new Hono<AppEnv>();

const HASH = /^[a-f0-9]{64}$/;
const BUILD_ID = /^[a-z0-9-]{1,64}$/;
const templateOf = (id: string | undefined) => parseOr400(TemplateId, id, "template id");
function hashOf(h: string | undefined): string {
  if (!h || !HASH.test(h)) throw new ApiError("bad_request", "Invalid hash: a sha256 in hex");
  return h;
}
function buildOf(id: string | undefined): string {
  if (!id || !BUILD_ID.test(id)) throw new ApiError("template_not_found", `Build "${String(id).slice(0, 64)}" not found`);
  return id;
}

for (const path of ["/v3/templates", "/v2/templates"]) {
  templateBuilds.post(path, async (c) => {
    const body = await readJson(c, TemplateBuildRequest);
    const ref = body.name ?? body.alias;
    if (!ref) throw new ApiError("bad_request", "Invalid body: name is required");
    const tags = [...new Set([...(ref.tag ? [ref.tag] : []), ...(body.tags ?? [])])];
    return c.json(await requestBuild(c.env, c.get("caller"), { name: ref.name, tags, cpuCount: body.cpuCount, memoryMB: body.memoryMB }), 202);
  });
}

templateBuilds.get("/templates/:templateID/files/:hash", async (c) => {
  const origin = new URL(c.req.url).origin;
  return c.json(await fileUploadLink(c.env, c.get("caller"), origin, templateOf(c.req.param("templateID")), hashOf(c.req.param("hash"))), 201);
});

templateBuilds.put("/template-files/:team/:hash", async (c) => {
  const team = c.req.param("team");
  if (team.length > 64) throw new ApiError("forbidden", "upload link signature does not match");
  const hash = hashOf(c.req.param("hash"));
  await verifyUpload(c.env, team, hash, Number(c.req.query("expires")), c.req.query("signature") ?? "");
  await receiveUpload(c.env, team, hash, async () => (await readBytes(c.req.raw, MAX_TEMPLATE_FILE_BYTES)).buffer);
  return c.body(null, 201);
});

templateBuilds.get("/agent/v1/builds/:buildID/files/:hash", async (c) => {
  const data = await agentFile(c.env, buildOf(c.req.param("buildID")), hashOf(c.req.param("hash")), c.req.header("Authorization"));
  return c.body(data, 200, { "content-type": "application/octet-stream" });
});

templateBuilds.post("/v2/templates/:templateID/builds/:buildID", async (c) => {
  const body = await readJson(c, TemplateBuildStart);
  await startBuild(c.env, c.get("caller"), templateOf(c.req.param("templateID")), buildOf(c.req.param("buildID")), body);
  return c.body(null, 202);
});

templateBuilds.get("/templates/:templateID/builds/:buildID/status", async (c) => {
  const q = parseOr400(BuildStatusQuery, c.req.query(), "query");
  return c.json(await buildStatus(c.env, c.get("caller"), templateOf(c.req.param("templateID")), buildOf(c.req.param("buildID")), q.logsOffset));
});

templateBuilds.get("/templates/:templateID/builds/:buildID/logs", async (c) => {
  const q = parseOr400(BuildLogsQuery, c.req.query(), "query");
  const b = await visibleBuild(c.env, c.get("caller"), templateOf(c.req.param("templateID")), buildOf(c.req.param("buildID")));
  return c.json({ logs: (await logsByTime(getDb(c.env), b.id, q)).map(buildLogEntry) });
});

templateBuilds.get("/templates/aliases/:alias", async (c) => c.json(await aliasOf(c.env, c.get("caller"), templateOf(c.req.param("alias")))));

templateBuilds.post("/templates/tags", async (c) => {
  const body = await readJson(c, AssignTags);
  return c.json(await assignTags(c.env, c.get("caller"), body.target, body.tags), 201);
});

templateBuilds.delete("/templates/tags", async (c) => {
  const body = await readJson(c, DeleteTags);
  await removeTags(c.env, c.get("caller"), body.name.name, body.tags);
  return c.body(null, 204);
});

templateBuilds.get("/templates/:templateID/tags", async (c) => c.json(await listTags(c.env, c.get("caller"), templateOf(c.req.param("templateID")))));

templateBuilds.delete("/templates/:templateID", async (c) => {
  await deleteTemplateAndBuilds(c.env, c.get("caller"), templateOf(c.req.param("templateID")));
  return c.body(null, 204);
});
