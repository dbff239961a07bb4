// The E2B sandbox routes (v1 and v2). Each handler validates, makes one SandboxGroupDO call (or one
// index query for lists) and shapes the reply; the DO answers another team's sandbox as not found.
import { Hono, type Context } from "hono";
import { DEFAULT_TIMEOUT_S, MAX_LIST_LIMIT, MIN_RESUME_TIMEOUT_S, V1_DEFAULT_TIMEOUT_S } from "../../schema/api/limits.ts";
import { ConnectSandbox, ResumedSandbox, SandboxPauseRequest, SandboxNetworkUpdateConfig, SandboxRefreshRequest, SandboxTimeoutRequest } from "../../schema/api/sandbox.ts";
import { sandboxNotFoundMessage, type Refusal } from "../../schema/errors.ts";
import { SANDBOX_ID_PATTERN } from "../../schema/protocol/ids.ts";
import { ApiError } from "../api-error.ts";
import { readJson } from "../body.ts";
import type { AppEnv } from "../env.ts";
import { getDb } from "../../durable-objects/store/db.ts";
import { listIndex, listIndexWithRunning } from "../../durable-objects/store/sandbox-index.ts";
import { encodeCursor, parseListQuery, parseMetadataQuery } from "./list-query.ts";
import { renderDetail, renderListed, renderSandbox } from "./render.ts";
import { assertNetworkSupported } from "../../schema/api/network-support.ts";
import { createSandboxRoute } from "./sandbox-create.ts";
import { sandboxLogsRoute } from "./sandbox-logs.ts";
import { manySandboxMetricsRoute, sandboxMetricsRoute } from "./sandbox-metrics.ts";
import { accessOf, sandboxHandle } from "./stubs.ts";
import { connectSandbox, pauseSandbox } from "../../durable-objects/operations/pause-resume.ts";

export const sandboxes = new Hono<AppEnv>();


/** The DO stub of `:id` plus the caller's access; a malformed id cannot exist, so it is a 404. */
function target(c: Context<AppEnv>) {
  const id = c.req.param("id") ?? "";
  if (!SANDBOX_ID_PATTERN.test(id)) throw new ApiError("sandbox_not_found", sandboxNotFoundMessage(id));
  return { id, stub: sandboxHandle(c.env, id), access: accessOf(c.get("caller")) };
}

function fail(id: string, error: Refusal): never {
  if (error.code === "sandbox_not_found") throw new ApiError("sandbox_not_found", sandboxNotFoundMessage(id));
  throw ApiError.from(error);
}

sandboxes.post("/sandboxes", createSandboxRoute("v1"));
sandboxes.post("/v2/sandboxes", createSandboxRoute("v2"));

sandboxes.get("/v2/sandboxes", async (c) => {
  const q = parseListQuery(c.req.query());
  const caller = c.get("caller");
  const page = await listIndexWithRunning(getDb(c.env), { ...q, teamId: caller.admin ? null : caller.teamId });
  if (page.next) c.header("X-Next-Token", encodeCursor(page.next));
  c.header("X-Total-Running", String(page.running));
  return c.json(page.rows.map(renderListed));
});

/** v1 list: running sandboxes only, filtered by metadata, no paging (bounded). */
sandboxes.get("/sandboxes", async (c) => {
  const caller = c.get("caller");
  const page = await listIndex(getDb(c.env), {
    teamId: caller.admin ? null : caller.teamId,
    states: ["running"],
    metadata: parseMetadataQuery(c.req.query("metadata")),
    order: "desc",
    limit: MAX_LIST_LIMIT * 10,
  });
  return c.json(page.rows.map(renderListed));
});

// Before /sandboxes/:id, which would otherwise take "metrics" for an id.
sandboxes.get("/sandboxes/metrics", manySandboxMetricsRoute);
sandboxes.get("/sandboxes/:id/metrics", sandboxMetricsRoute);

sandboxes.get("/sandboxes/:id", async (c) => {
  const { id, stub, access } = target(c);
  const res = await stub.info(access);
  if (!res.ok) fail(id, res.error);
  return c.json(renderDetail(res.sandbox, c.env.SANDBOX_DOMAIN));
});

sandboxes.delete("/sandboxes/:id", async (c) => {
  const { id, stub, access } = target(c);
  const res = await stub.kill(access);
  if (!res.ok) fail(id, res.error);
  return c.body(null, 204);
});

sandboxes.post("/sandboxes/:id/timeout", async (c) => {
  const { id, stub, access } = target(c);
  const body = await readJson(c, SandboxTimeoutRequest);
  const res = await stub.setTimeout(access, body.timeout);
  if (!res.ok) fail(id, res.error);
  return c.body(null, 204);
});

sandboxes.post("/sandboxes/:id/refreshes", async (c) => {
  const { id, stub, access } = target(c);
  const body = await readJson(c, SandboxRefreshRequest, { emptyAs: {} });
  const res = await stub.refresh(access, body.duration ?? V1_DEFAULT_TIMEOUT_S);
  if (!res.ok) fail(id, res.error);
  return c.body(null, 204);
});

sandboxes.post("/sandboxes/:id/pause", async (c) => {
  const { id, stub, access } = target(c);
  const body = await readJson(c, SandboxPauseRequest, { emptyAs: {} });
  const strategy = body.memory === undefined ? undefined : body.memory ? "Freeze" : "Stop";
  const res = await pauseSandbox(c.env, id, access, strategy);
  if (!res.ok) fail(id, res.error);
  return c.body(null, 204);
});

function connectRoute(version: "v1" | "v2") {
  return async (c: Context<AppEnv>) => {
    const { id, stub, access } = target(c);
    const body = await readJson(c, ConnectSandbox, { emptyAs: {} });
    if (version === "v1" && body.timeout === undefined) throw new ApiError("bad_request", "Invalid body: timeout is required");
    const res = await connectSandbox(c.env, id, access, { timeoutS: body.timeout ?? DEFAULT_TIMEOUT_S, memory: body.memory });
    if (!res.ok) fail(id, res.error);
    return c.json(renderSandbox(res.sandbox, c.env.SANDBOX_DOMAIN), res.resumed ? 201 : 200);
  };
}
sandboxes.post("/sandboxes/:id/connect", connectRoute("v1"));
sandboxes.post("/v2/sandboxes/:id/connect", connectRoute("v2"));

/** Deprecated resume: 201 when it resumed, 409 when the sandbox was running. */
sandboxes.post("/sandboxes/:id/resume", async (c) => {
  const { id, stub, access } = target(c);
  const body = await readJson(c, ResumedSandbox, { emptyAs: {} });
  const info = await stub.info(access);
  if (!info.ok) fail(id, info.error);
  if (info.sandbox.state !== "paused") throw new ApiError("conflict", `Sandbox "${id}" is already running`);
  const timeoutS = Math.max(body.timeout ?? V1_DEFAULT_TIMEOUT_S, MIN_RESUME_TIMEOUT_S);
  const res = await connectSandbox(c.env, id, access, { timeoutS, memory: body.memory });
  if (!res.ok) fail(id, res.error);
  return c.json(renderSandbox(res.sandbox, c.env.SANDBOX_DOMAIN), 201);
});

/** E2B updateNetwork: answered once the agent applies the rules (the gateway's wait bound). */
sandboxes.put("/sandboxes/:id/network", async (c) => {
  const { id, stub, access } = target(c);
  const body = await readJson(c, SandboxNetworkUpdateConfig);
  assertNetworkSupported(body);
  const res = await stub.updateNetwork(access, { allowOut: body.allowOut, denyOut: body.denyOut, rules: body.rules, allowInternetAccess: body.allow_internet_access ?? null });
  if (!res.ok) fail(id, res.error);
  return c.body(null, 204);
});
sandboxes.get("/sandboxes/:id/logs", sandboxLogsRoute("v1"));
sandboxes.get("/v2/sandboxes/:id/logs", sandboxLogsRoute("v2"));
sandboxes.get("/sandboxes/:id/network/audit", sandboxLogsRoute("audit"));

