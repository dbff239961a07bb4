// E2B snapshots and fork: POST /sandboxes/{id}/snapshots, GET /snapshots, DELETE /templates/{id}
// for a snapshot (the SDK's deleteSnapshot), POST /sandboxes/{id}/fork. Each validates, calls the
// snapshot operation (durable-objects/operations/snapshots.ts) and shapes the reply.
import { Hono, type Context } from "hono";
import { ListSnapshotsQuery, SandboxForkRequest, SandboxSnapshotRequest, snapshotNames } from "../../schema/api/snapshot.ts";
import { errorStatus, sandboxNotFoundMessage, type Refusal } from "../../schema/errors.ts";
import { SANDBOX_ID_PATTERN } from "../../schema/protocol/ids.ts";
import { createSnapshot, deleteSnapshot, forkSandbox, listSnapshots } from "../../durable-objects/operations/snapshots.ts";
import { ApiError } from "../api-error.ts";
import { TemplateId } from "../../schema/api/template.ts";
import { parseOr400, readJson } from "../body.ts";
import type { AppEnv } from "../env.ts";
import { decodeCursor, encodeCursor } from "./list-query.ts";
import { renderSandbox } from "./render.ts";

export const snapshots = new Hono<AppEnv>();

function sandboxId(c: Context<AppEnv>): string {
  const id = c.req.param("id") ?? "";
  if (!SANDBOX_ID_PATTERN.test(id)) throw new ApiError("sandbox_not_found", sandboxNotFoundMessage(id));
  return id;
}

function fail(id: string, error: Refusal): never {
  if (error.code === "sandbox_not_found") throw new ApiError("sandbox_not_found", sandboxNotFoundMessage(id));
  throw ApiError.from(error);
}

snapshots.post("/sandboxes/:id/snapshots", async (c) => {
  const id = sandboxId(c);
  const body = await readJson(c, SandboxSnapshotRequest, { emptyAs: {} });
  const caller = c.get("caller");
  const res = await createSnapshot(c.env, caller, id, body);
  if (!res.ok) fail(id, res.error);
  return c.json(snapshotNames(res.snapshot, teamOf(res.snapshot.names, caller.teamName)), 201);
});

snapshots.get("/snapshots", async (c) => {
  const q = parseOr400(ListSnapshotsQuery, c.req.query(), "query");
  const caller = c.get("caller");
  const page = await listSnapshots(c.env, caller, { sandboxId: q.sandboxID, name: q.name, limit: q.limit, after: cursorOf(q.nextToken) });
  if (page.next) c.header("X-Next-Token", encodeCursor({ startedAt: page.next.createdAt, id: page.next.id }));
  return c.json(page.rows.map((r) => snapshotNames(r, teamOf(r.names, caller.teamName))));
});

/** The SDK's deleteSnapshot. A template of that id is not a snapshot: the templates' own route
 * (or the 501 of unserved.ts) answers it; a reference that is neither is E2B's 404. */
snapshots.delete("/templates/:templateId", async (c, next) => {
  const ref = c.req.param("templateId");
  const caller = c.get("caller");
  const res = await deleteSnapshot(c.env, caller, ref);
  if (!res.ok) throw ApiError.from(res.error);
  if (res.found) return c.body(null, 204);
  // Not one of the team's snapshots: a template id goes on to the template route (a template, its
  // builds, or 404); anything else (a snapshot's `team/name:tag` form) is not found.
  if (TemplateId.safeParse(ref).success) return next();
  throw new ApiError("template_not_found", `Snapshot or template "${ref.slice(0, 128)}" not found`);
});

snapshots.post("/sandboxes/:id/fork", async (c) => {
  const id = sandboxId(c);
  const body = await readJson(c, SandboxForkRequest, { emptyAs: {} });
  const res = await forkSandbox(c.env, c.get("caller"), id, { timeoutS: body.timeout, count: body.count });
  if (!res.ok) fail(id, res.error);
  const domain = c.env.SANDBOX_DOMAIN;
  return c.json(
    res.forks.map((f) => ("sandbox" in f ? { sandbox: renderSandbox(f.sandbox, domain) } : { error: { code: errorStatus[f.error.code], message: f.error.message } })),
    201,
  );
});

/** The team a stored full name carries (the caller's for an unnamed snapshot). */
function teamOf(names: string[], fallback: string): string {
  const first = names[0];
  return first ? first.slice(0, first.indexOf("/")) : fallback;
}

function cursorOf(token: string | undefined) {
  if (token === undefined) return undefined;
  const c = decodeCursor(token);
  return { createdAt: c.startedAt, id: c.id };
}
