// GET/POST/DELETE /api-keys. Keys belong to teams; the admin key may create keys for any team
// (`teamName`, created when missing) and cannot be deleted.
import { Hono } from "hono";
import { NewTeamAPIKey, type TeamAPIKey } from "../../schema/api/team.ts";
import { ApiError } from "../api-error.ts";
import { ADMIN_KEY_ID, KEY_PREFIX, MAX_TEAM_API_KEYS } from "../../schema/api/api-key.ts";
import { evictKey } from "../auth/middleware.ts";
import { readJson } from "../body.ts";
import type { AppEnv } from "../env.ts";
import { createApiKey, deleteApiKey, listApiKeys, type ApiKeyRow } from "../../durable-objects/store/api-keys.ts";
import { audit } from "../../durable-objects/store/audit.ts";
import { getDb } from "../../durable-objects/store/db.ts";
import { ensureTeam } from "../../durable-objects/store/teams.ts";

export const apiKeys = new Hono<AppEnv>();

function render(row: ApiKeyRow): TeamAPIKey {
  return {
    id: row.id,
    name: row.name,
    mask: { prefix: KEY_PREFIX, valueLength: row.valueLength, maskedValuePrefix: row.maskPrefix, maskedValueSuffix: row.maskSuffix },
    createdAt: new Date(row.createdAt).toISOString(),
    createdBy: row.createdBy === null ? null : { id: row.createdBy, email: null },
    lastUsed: row.lastUsed === null ? null : new Date(row.lastUsed).toISOString(),
  };
}

apiKeys.get("/api-keys", async (c) => {
  const rows = await listApiKeys(getDb(c.env), c.get("caller").teamId);
  return c.json(rows.map(render));
});

apiKeys.post("/api-keys", async (c) => {
  const body = await readJson(c, NewTeamAPIKey);
  const caller = c.get("caller");
  const db = getDb(c.env);
  if (body.teamName !== undefined && body.teamName !== caller.teamName && !caller.admin) {
    throw new ApiError("forbidden", "Only the admin key may create keys for another team");
  }
  const teamId = body.teamName === undefined ? caller.teamId : (await ensureTeam(db, body.teamName)).id;
  const created = await createApiKey(db, c.env.KEY_PEPPER, { teamId, name: body.name, createdBy: caller.keyId, max: MAX_TEAM_API_KEYS });
  if (!created) throw new ApiError("quota_exceeded", `team "${body.teamName ?? caller.teamName}" has ${MAX_TEAM_API_KEYS} API keys, the most a team has; delete one first`);
  const { row, key } = created;
  c.executionCtx.waitUntil(audit(db, { teamId, keyId: caller.keyId, action: "api_key.create", target: row.id }).catch(() => {}));
  return c.json({ ...render(row), key }, 201);
});

apiKeys.delete("/api-keys/:keyId", async (c) => {
  const id = c.req.param("keyId");
  const caller = c.get("caller");
  if (id === ADMIN_KEY_ID) throw new ApiError("forbidden", "The admin key cannot be deleted");
  const db = getDb(c.env);
  const hash = await deleteApiKey(db, id, caller.admin ? null : caller.teamId);
  // Another team's key is not found either, as every other object of another team: a 403 would
  // tell that the id exists.
  if (!hash) throw new ApiError("not_found", `API key "${id}" not found`);
  evictKey(hash);
  c.executionCtx.waitUntil(audit(db, { teamId: caller.teamId, keyId: caller.keyId, action: "api_key.delete", target: id }).catch(() => {}));
  return c.body(null, 204);
});
