// GET /teams: the caller's team (the admin key sees every team).
import { Hono } from "hono";
import type { z } from "zod";
import type { Team } from "../../schema/api/team.ts";
import type { AppEnv } from "../env.ts";
import { getDb } from "../../durable-objects/store/db.ts";
import { listTeams } from "../../durable-objects/store/teams.ts";

export const teams = new Hono<AppEnv>();

teams.get("/teams", async (c) => {
  const caller = c.get("caller");
  const rows = await listTeams(getDb(c.env), caller.admin ? null : caller.teamId);
  const out: z.infer<typeof Team>[] = rows.map((t) => ({ teamID: t.id, name: t.name, apiKey: "", isDefault: t.id === caller.teamId }));
  return c.json(out);
});
