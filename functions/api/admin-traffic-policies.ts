// Admin HTTP API for TrafficPolicy (a team's) and GlobalTrafficPolicy (every team's), for
// deployments without Kubernetes (OpenKruise §1.7; schema/api/traffic-policy.ts, egress only).
// Each change reaches every cluster's agent at once; status lists the live sandboxes selected.
//   GET    /admin/traffic-policies                              every policy, with status
//   GET    /admin/teams/{team}/traffic-policies[/{name}]        a team's
//   PUT    /admin/teams/{team}/traffic-policies/{name}          {priority?, selector?, egress: {rules}}
//   DELETE /admin/teams/{team}/traffic-policies/{name}
//   GET|PUT|DELETE /admin/global-traffic-policies/{name}
import { Hono, type Context } from "hono";
import { getTrafficPolicyView, listTrafficPolicyViews, removeTrafficPolicy, setTrafficPolicy } from "../../durable-objects/operations/traffic-policies.ts";
import { audit } from "../../durable-objects/store/audit.ts";
import { getDb } from "../../durable-objects/store/db.ts";
import { MAX_TRAFFIC_POLICIES, TrafficPolicyName, TrafficPolicySpec } from "../../schema/api/traffic-policy.ts";
import { TeamName } from "../../schema/api/team.ts";
import { ApiError } from "../api-error.ts";
import { requireAdmin } from "../auth/middleware.ts";
import { parseOr400, readJson } from "../body.ts";
import type { AppEnv } from "../env.ts";
import { teamOr404 } from "./admin-templates.ts";

export const adminTrafficPolicies = new Hono<AppEnv>();
adminTrafficPolicies.use("/admin/*", requireAdmin());

/** The scope and name a path names: a team's (it must exist) or the global one (null). */
async function target(c: Context<AppEnv>, global: boolean): Promise<{ team: string | null; name: string; teamId: string | null }> {
  const name = parseOr400(TrafficPolicyName, c.req.param("name"), "policy name");
  if (global) return { team: null, name, teamId: null };
  const team = await teamOr404(c, parseOr400(TeamName, c.req.param("team"), "team name"));
  return { team: team.name, name, teamId: team.id };
}

const kindOf = (team: string | null) => (team === null ? "GlobalTrafficPolicy" : "TrafficPolicy");

adminTrafficPolicies.get("/admin/traffic-policies", async (c) => c.json(await listTrafficPolicyViews(c.env)));
adminTrafficPolicies.get("/admin/teams/:team/traffic-policies", async (c) => {
  const team = await teamOr404(c, parseOr400(TeamName, c.req.param("team"), "team name"));
  return c.json(await listTrafficPolicyViews(c.env, team.name));
});

for (const [path, global] of [["/admin/teams/:team/traffic-policies/:name", false], ["/admin/global-traffic-policies/:name", true]] as const) {
  adminTrafficPolicies.get(path, async (c) => {
    const t = await target(c, global);
    const view = await getTrafficPolicyView(c.env, t.team, t.name);
    if (!view) throw new ApiError("not_found", `${kindOf(t.team)} "${t.name}" not found`);
    return c.json(view);
  });
  adminTrafficPolicies.put(path, async (c) => {
    const t = await target(c, global);
    const spec = await readJson(c, TrafficPolicySpec);
    const all = await listTrafficPolicyViews(c.env);
    if (all.length >= MAX_TRAFFIC_POLICIES && !all.some((p) => p.team === t.team && p.name === t.name)) {
      throw new ApiError("bad_request", `at most ${MAX_TRAFFIC_POLICIES} traffic policies in all; delete one first`);
    }
    const view = await setTrafficPolicy(c.env, t.team, t.name, spec);
    c.executionCtx.waitUntil(audit(getDb(c.env), { teamId: t.teamId, keyId: c.get("caller").keyId, action: "traffic-policy.put", target: `${kindOf(t.team)} ${t.team ?? ""}/${t.name}`, detail: spec }).catch(() => {}));
    return c.json(view);
  });
  adminTrafficPolicies.delete(path, async (c) => {
    const t = await target(c, global);
    if (!(await removeTrafficPolicy(c.env, t.team, t.name))) throw new ApiError("not_found", `${kindOf(t.team)} "${t.name}" not found`);
    c.executionCtx.waitUntil(audit(getDb(c.env), { teamId: t.teamId, keyId: c.get("caller").keyId, action: "traffic-policy.delete", target: `${kindOf(t.team)} ${t.team ?? ""}/${t.name}` }).catch(() => {}));
    return c.body(null, 204);
  });
}
