// X-API-KEY authentication. The admin key is recognised by comparing HMACs in constant time
// (no store lookup); other keys are looked up by HMAC in libSQL and cached per isolate for
// KEY_CACHE_TTL_MS, so the create path costs no store round trip for a warm key. Knob: a deleted
// key stays usable in other isolates for at most that TTL.
import type { MiddlewareHandler } from "hono";
import { ApiError } from "../api-error.ts";
import type { AppEnv, Caller, Env } from "../env.ts";
import { getDb } from "../../durable-objects/store/db.ts";
import { TtlCache } from "../../durable-objects/store/ttl-cache.ts";
import { findKeyByHash, touchApiKey } from "../../durable-objects/store/api-keys.ts";
import { ADMIN_KEY_ID, ADMIN_TEAM_ID, ADMIN_TEAM_NAME, hashApiKey, looksLikeApiKey, timingSafeEqualHex } from "../../schema/api/api-key.ts";
import { edgeLogger } from "../../durable-objects/tracing/edge-log.ts";

const LOG = edgeLogger("auth");

export const KEY_CACHE_TTL_MS = 30_000;

const cache = new TtlCache<Caller>(KEY_CACHE_TTL_MS);

/** Forgets a key (deleted in this isolate). */
export function evictKey(keyHash: string): void {
  cache.delete(keyHash);
}

export function requireApiKey(): MiddlewareHandler<AppEnv> {
  return async function apiKeyAuth(c, next) {
    // Two mounted patterns match some paths (`/sandboxes` and `/sandboxes/*` both match
    // `/sandboxes`): the key is checked once per request.
    if (c.get("caller")) return next();
    const key = c.req.header("x-api-key");
    if (!key || !looksLikeApiKey(key)) throw new ApiError("unauthorized", "Invalid API key");
    c.set("caller", await resolveCaller(c.env, key, (p) => c.executionCtx.waitUntil(p)));
    await next();
  };
}

export function requireAdmin(): MiddlewareHandler<AppEnv> {
  return async function adminOnly(c, next) {
    if (!c.get("caller").admin) throw new ApiError("forbidden", "This route needs the admin API key");
    await next();
  };
}

let admin: { of: string; hash: Promise<string> } | null = null;

function adminHash(env: Env): Promise<string> {
  const of = `${env.KEY_PEPPER}\n${env.ADMIN_API_KEY}`;
  if (admin?.of !== of) admin = { of, hash: hashApiKey(env.ADMIN_API_KEY, env.KEY_PEPPER) };
  return admin.hash;
}

/**
 * Keys seen recently and their HMAC, so a client's every request does not pay for a WebCrypto
 * sign (about 1 % of the edge's CPU per create). Bounded; holds nothing the requests did not.
 */
const hashes = new Map<string, string>();
const MAX_HASHES = 10_000;

async function hashOf(key: string, pepper: string): Promise<string> {
  const id = `${pepper}\n${key}`;
  const known = hashes.get(id);
  if (known) return known;
  const hash = await hashApiKey(key, pepper);
  if (hashes.size >= MAX_HASHES) hashes.clear();
  hashes.set(id, hash);
  return hash;
}

async function resolveCaller(env: Env, key: string, background: (p: Promise<unknown>) => void): Promise<Caller> {
  return callerOfHash(env, await hashOf(key, env.KEY_PEPPER), background);
}

/** The key's HMAC, for a session that must not hold the key itself (functions/console/). */
export function keyHashOf(env: Env, key: string): Promise<string> {
  return hashOf(key, env.KEY_PEPPER);
}

/** The caller a key's HMAC stands for (a deleted key is refused, after the cache's TTL at most). */
export async function callerOfHash(env: Env, hash: string, background: (p: Promise<unknown>) => void): Promise<Caller> {
  if (timingSafeEqualHex(hash, await adminHash(env))) {
    return { keyId: ADMIN_KEY_ID, teamId: ADMIN_TEAM_ID, teamName: ADMIN_TEAM_NAME, admin: true };
  }
  const caller = await cache.get(hash, async () => {
    const db = getDb(env);
    const owner = await findKeyByHash(db, hash);
    if (!owner) throw new ApiError("unauthorized", "Invalid API key");
    background(touchApiKey(db, owner.keyId, Date.now()).catch((err) => LOG.error("lastUsed update failed", { error: err })));
    return { ...owner, admin: false };
  });
  return caller;
}
