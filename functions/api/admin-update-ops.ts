// Admin HTTP API for update ops runs (SandboxUpdateOps without Kubernetes; durable-objects/ops/):
//   POST   /admin/teams/{team}/updateops                {name, selector, updateStrategy?, paused?, stateFilter?}
//   GET    /admin/teams/{team}/updateops/{name}         phase, counts, conditions, per-sandbox lines, events
//   PATCH  /admin/teams/{team}/updateops/{name}         {paused?, maxUnavailable?}
//   POST   /admin/teams/{team}/updateops/{name}/resume  retry the failed sandboxes
//   DELETE /admin/teams/{team}/updateops/{name}
import { Hono, type Context } from "hono";
import { NewUpdateOps, UpdateOpsChange, UpdateOpsName } from "../../schema/api/update-ops.ts";
import { TeamName } from "../../schema/api/team.ts";
import { ApiError } from "../api-error.ts";
import { requireAdmin } from "../auth/middleware.ts";
import { parseOr400, readJson } from "../body.ts";
import type { AppEnv } from "../env.ts";
import { teamOr404 } from "./admin-templates.ts";
import { changeUpdateOps, removeUpdateOps, resumeUpdateOps, startUpdateOps, updateOpsStatus } from "../../durable-objects/operations/update-ops.ts";
import type { OpsResult } from "../../durable-objects/ops/update-ops-do.ts";

export const adminUpdateOps = new Hono<AppEnv>();
adminUpdateOps.use("/admin/*", requireAdmin());

async function target(c: Context<AppEnv>) {
  const team = await teamOr404(c, parseOr400(TeamName, c.req.param("team"), "team name"));
  const name = c.req.param("name");
  return { team, name: name === undefined ? "" : parseOr400(UpdateOpsName, name, "update ops name") };
}

function rendered(c: Context<AppEnv>, res: OpsResult, status: 200 | 201 = 200) {
  if (!res.ok) throw ApiError.from(res.error);
  return c.json(res.ops, status);
}

adminUpdateOps.post("/admin/teams/:team/updateops", async (c) => {
  const { team } = await target(c);
  const { name, ...spec } = await readJson(c, NewUpdateOps);
  const res = await startUpdateOps(c.env, team, name, spec);
  return rendered(c, res, res.ok && res.created ? 201 : 200);
});

adminUpdateOps.get("/admin/teams/:team/updateops/:name", async (c) => {
  const { team, name } = await target(c);
  return rendered(c, await updateOpsStatus(c.env, team, name));
});

adminUpdateOps.patch("/admin/teams/:team/updateops/:name", async (c) => {
  const { team, name } = await target(c);
  return rendered(c, await changeUpdateOps(c.env, team, name, await readJson(c, UpdateOpsChange)));
});

adminUpdateOps.post("/admin/teams/:team/updateops/:name/resume", async (c) => {
  const { team, name } = await target(c);
  return rendered(c, await resumeUpdateOps(c.env, team, name));
});

adminUpdateOps.delete("/admin/teams/:team/updateops/:name", async (c) => {
  const { team, name } = await target(c);
  const res = await removeUpdateOps(c.env, team, name);
  if (!res.ok) throw ApiError.from(res.error);
  return c.body(null, 204);
});
