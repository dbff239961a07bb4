// E2B's /secrets: a team's secrets, write-only values (no response carries one), encrypted at
// rest under the Worker's SECRETS_KEY. The traffic-proxy adds them to a sandbox's matching
// requests (controllers/traffic/l7/); nothing here returns them.
import { Hono } from "hono";
import { ListSecretsQuery, MAX_TEAM_SECRETS, NewSecret, SecretUpdate } from "../../schema/api/secret.ts";
import { ApiError } from "../api-error.ts";
import { parseOr400, readJson } from "../body.ts";
import type { AppEnv, Env } from "../env.ts";
import { secretChanged } from "../../durable-objects/operations/security-profiles.ts";
import { audit } from "../../durable-objects/store/audit.ts";
import { getDb } from "../../durable-objects/store/db.ts";
import { MIN_SECRETS_KEY_LENGTH } from "../../durable-objects/store/secret-box.ts";
import { createSecret, deleteSecret, findSecret, listSecretRows, renderSecret, updateSecret } from "../../durable-objects/store/secrets.ts";

export const secretsApi = new Hono<AppEnv>();

function secretsKey(env: Env): string {
  const k = env.SECRETS_KEY;
  if (!k || k.length < MIN_SECRETS_KEY_LENGTH) {
    throw new ApiError("not_implemented", `secrets are not served: the server has no SECRETS_KEY of at least ${MIN_SECRETS_KEY_LENGTH} characters`);
  }
  return k;
}

const toToken = (name: string) => btoa(name).replaceAll("+", "-").replaceAll("/", "_").replace(/=+$/, "");
function fromToken(t: string): string {
  try {
    const name = atob(t.replaceAll("-", "+").replaceAll("_", "/"));
    if (/^[a-z0-9_-]{1,128}$/.test(name)) return name;
  } catch {
    // falls through to the 400
  }
  throw new ApiError("bad_request", "Invalid nextToken");
}

secretsApi.get("/secrets", async (c) => {
  secretsKey(c.env);
  const q = parseOr400(ListSecretsQuery, c.req.query(), "query");
  const rows = await listSecretRows(getDb(c.env), c.get("caller").teamId, q.limit, q.nextToken === undefined ? undefined : fromToken(q.nextToken));
  const page = rows.slice(0, q.limit);
  if (rows.length > q.limit) c.header("X-Next-Token", toToken(page.at(-1)!.name));
  return c.json(page.map(renderSecret));
});

secretsApi.post("/secrets", async (c) => {
  const key = secretsKey(c.env);
  const body = await readJson(c, NewSecret);
  const caller = c.get("caller");
  const db = getDb(c.env);
  const row = await createSecret(db, key, caller.teamId, { name: body.name, value: body.value, metadata: body.metadata ?? {} });
  if (row === "exists") throw new ApiError("conflict", `A secret named "${body.name}" already exists`);
  if (row === "full") throw new ApiError("quota_exceeded", `team "${caller.teamName}" has ${MAX_TEAM_SECRETS} secrets, the most a team keeps; delete one first`);
  c.executionCtx.waitUntil(audit(db, { teamId: caller.teamId, keyId: caller.keyId, action: "secret.create", target: row.id }).catch(() => {}));
  c.executionCtx.waitUntil(secretChanged(c.env, caller.teamName, row.name).catch(() => 0));
  return c.json(renderSecret(row), 201);
});

secretsApi.get("/secrets/:secretID", async (c) => {
  secretsKey(c.env);
  const row = await findSecret(getDb(c.env), c.get("caller").teamId, c.req.param("secretID"));
  if (!row) throw new ApiError("not_found", `Secret "${c.req.param("secretID")}" not found`);
  return c.json(renderSecret(row));
});

secretsApi.post("/secrets/:secretID", async (c) => {
  const key = secretsKey(c.env);
  const body = await readJson(c, SecretUpdate);
  const caller = c.get("caller");
  const db = getDb(c.env);
  const row = await updateSecret(db, key, caller.teamId, c.req.param("secretID"), { value: body.value, metadata: body.metadata ?? undefined });
  if (!row) throw new ApiError("not_found", `Secret "${c.req.param("secretID")}" not found`);
  c.executionCtx.waitUntil(audit(db, { teamId: caller.teamId, keyId: caller.keyId, action: "secret.update", target: row.id, detail: { version: row.currentVersion } }).catch(() => {}));
  c.executionCtx.waitUntil(secretChanged(c.env, caller.teamName, row.name).catch(() => 0));
  return c.json(renderSecret(row));
});

secretsApi.delete("/secrets/:secretID", async (c) => {
  secretsKey(c.env);
  const caller = c.get("caller");
  const db = getDb(c.env);
  const name = await deleteSecret(db, caller.teamId, c.req.param("secretID"));
  if (name === null) throw new ApiError("not_found", `Secret "${c.req.param("secretID")}" not found`);
  c.executionCtx.waitUntil(audit(db, { teamId: caller.teamId, keyId: caller.keyId, action: "secret.delete", target: c.req.param("secretID") }).catch(() => {}));
  c.executionCtx.waitUntil(secretChanged(c.env, caller.teamName, name).catch(() => 0));
  return c.body(null, 204);
});
