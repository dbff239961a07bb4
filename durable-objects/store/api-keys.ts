// API keys by team. Only the HMAC is stored; `createApiKey` returns the plaintext once.
import { and, asc, eq } from "drizzle-orm";
import { apiKeys, teams } from "../../schema/db/tables.ts";
import { generateApiKey, hashApiKey, maskApiKey } from "../../schema/api/api-key.ts";
import type { Db } from "./db.ts";
import { boundedInsert } from "./team-bound.ts";

export type ApiKeyRow = typeof apiKeys.$inferSelect;

export interface KeyOwner {
  keyId: string;
  teamId: string;
  teamName: string;
}

export async function findKeyByHash(db: Db, keyHash: string): Promise<KeyOwner | undefined> {
  const rows = await db
    .select({ keyId: apiKeys.id, teamId: apiKeys.teamId, teamName: teams.name })
    .from(apiKeys)
    .innerJoin(teams, eq(teams.id, apiKeys.teamId))
    .where(eq(apiKeys.keyHash, keyHash))
    .limit(1);
  return rows[0];
}

/** Null when the team already has `opts.max` keys (checked in the insert; absent: no bound). */
export async function createApiKey(
  db: Db,
  pepper: string,
  opts: { teamId: string; name: string; createdBy: string | null; key?: string; id?: string; now?: number; max?: number | null },
): Promise<{ row: ApiKeyRow; key: string } | null> {
  const key = opts.key ?? generateApiKey();
  const mask = maskApiKey(key);
  const row: ApiKeyRow = {
    id: opts.id ?? crypto.randomUUID(),
    teamId: opts.teamId,
    name: opts.name,
    keyHash: await hashApiKey(key, pepper),
    maskPrefix: mask.maskedValuePrefix,
    maskSuffix: mask.maskedValueSuffix,
    valueLength: mask.valueLength,
    createdBy: opts.createdBy,
    createdAt: opts.now ?? Date.now(),
    lastUsed: null,
  };
  const res = await db.$client.execute(boundedInsert(apiKeys, row, { teamId: row.teamId, max: opts.max ?? null }));
  return res.rowsAffected === 1 ? { row, key } : null;
}

export async function listApiKeys(db: Db, teamId: string): Promise<ApiKeyRow[]> {
  return db.select().from(apiKeys).where(eq(apiKeys.teamId, teamId)).orderBy(asc(apiKeys.createdAt), asc(apiKeys.id));
}

/** Deletes a key; returns its hash so callers can evict it from caches. */
export async function deleteApiKey(db: Db, id: string, teamId: string | null): Promise<string | undefined> {
  const where = teamId === null ? eq(apiKeys.id, id) : and(eq(apiKeys.id, id), eq(apiKeys.teamId, teamId));
  const rows = await db.delete(apiKeys).where(where).returning({ keyHash: apiKeys.keyHash });
  return rows[0]?.keyHash;
}

export async function touchApiKey(db: Db, id: string, now: number): Promise<void> {
  await db.update(apiKeys).set({ lastUsed: now }).where(eq(apiKeys.id, id));
}
