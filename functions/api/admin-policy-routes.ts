// The admin API's shape for policy objects that are a team's or global (TrafficPolicy and
// GlobalTrafficPolicy, SecurityProfile and GlobalSecurityProfile), for deployments without
// Kubernetes. Each change reaches the agents of the clusters it concerns at once; status lists the live sandboxes
// selected.
//   GET    /admin/<plural>                              every object, with status
//   GET    /admin/teams/{team}/<plural>[/{name}]        a team's
//   PUT    /admin/teams/{team}/<plural>/{name}          the spec
//   DELETE /admin/teams/{team}/<plural>/{name}
//   GET|PUT|DELETE /admin/global-<plural>/{name}
import { Hono, type Context } from "hono";
import type { z } from "zod";
import { audit } from "../../durable-objects/store/audit.ts";
import { getDb } from "../../durable-objects/store/db.ts";
import type { Env } from "../../durable-objects/env.ts";
import { TeamName } from "../../schema/api/team.ts";
import { ApiError } from "../api-error.ts";
import { requireAdmin } from "../auth/middleware.ts";
import { parseOr400, readJson } from "../body.ts";
import type { AppEnv } from "../env.ts";
import { teamOr404 } from "./admin-templates.ts";

export interface PolicyRoutes<S extends z.ZodType, V extends { team: string | null; name: string }> {
  /** `traffic-policies`: the path segment. */
  plural: string;
  /** `TrafficPolicy`: the team kind; the global one is `Global<kind>`. */
  kind: string;
  /** `traffic-policy`: the audit log's action prefix. */
  auditAs: string;
  max: number;
  name: z.ZodType<string>;
  /** How a 400 for a bad name calls it (`policy name`). */
  nameLabel: string;
  spec: S;
  list(env: Env, team?: string | null): Promise<V[]>;
  /** Every object's team and name (the PUT's count; no status computed). */
  keys(env: Env): Promise<{ team: string | null; name: string }[]>;
  get(env: Env, team: string | null, name: string): Promise<V | undefined>;
  set(env: Env, team: string | null, name: string, spec: z.infer<S>): Promise<V>;
  remove(env: Env, team: string | null, name: string): Promise<boolean>;
  /** Why a global object cannot hold this spec (a 400), or null. */
  globalRefusal?(spec: z.infer<S>): string | null;
}

export function policyRoutes<S extends z.ZodType, V extends { team: string | null; name: string }>(o: PolicyRoutes<S, V>): Hono<AppEnv> {
  const app = new Hono<AppEnv>();
  app.use("/admin/*", requireAdmin());
  const kindOf = (team: string | null) => (team === null ? `Global${o.kind}` : o.kind);

  /** The scope and name a path names: a team's (it must exist) or the global one (null). */
  async function target(c: Context<AppEnv>, global: boolean): Promise<{ team: string | null; name: string; teamId: string | null }> {
    const name = parseOr400(o.name, c.req.param("name"), o.nameLabel);
    if (global) return { team: null, name, teamId: null };
    const team = await teamOr404(c, parseOr400(TeamName, c.req.param("team"), "team name"));
    return { team: team.name, name, teamId: team.id };
  }

  app.get(`/admin/${o.plural}`, async (c) => c.json(await o.list(c.env)));
  app.get(`/admin/teams/:team/${o.plural}`, async (c) => {
    const team = await teamOr404(c, parseOr400(TeamName, c.req.param("team"), "team name"));
    return c.json(await o.list(c.env, team.name));
  });

  for (const [path, global] of [[`/admin/teams/:team/${o.plural}/:name`, false], [`/admin/global-${o.plural}/:name`, true]] as const) {
    app.get(path, async (c) => {
      const t = await target(c, global);
      const view = await o.get(c.env, t.team, t.name);
      if (!view) throw new ApiError("not_found", `${kindOf(t.team)} "${t.name}" not found`);
      return c.json(view);
    });
    app.put(path, async (c) => {
      const t = await target(c, global);
      const spec = await readJson(c, o.spec);
      const refused = t.team === null ? o.globalRefusal?.(spec) : null;
      if (refused) throw new ApiError("bad_request", refused);
      const all = await o.keys(c.env);
      if (all.length >= o.max && !all.some((p) => p.team === t.team && p.name === t.name)) {
        throw new ApiError("bad_request", `at most ${o.max} ${o.plural.replace("-", " ")} in all; delete one first`);
      }
      const view = await o.set(c.env, t.team, t.name, spec);
      c.executionCtx.waitUntil(audit(getDb(c.env), { teamId: t.teamId, keyId: c.get("caller").keyId, action: `${o.auditAs}.put`, target: `${kindOf(t.team)} ${t.team ?? ""}/${t.name}`, detail: spec as Record<string, unknown> }).catch(() => {}));
      return c.json(view);
    });
    app.delete(path, async (c) => {
      const t = await target(c, global);
      if (!(await o.remove(c.env, t.team, t.name))) throw new ApiError("not_found", `${kindOf(t.team)} "${t.name}" not found`);
      c.executionCtx.waitUntil(audit(getDb(c.env), { teamId: t.teamId, keyId: c.get("caller").keyId, action: `${o.auditAs}.delete`, target: `${kindOf(t.team)} ${t.team ?? ""}/${t.name}` }).catch(() => {}));
      return c.body(null, 204);
    });
  }
  return app;
}
