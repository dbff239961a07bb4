// The console's sessions (functions/console/session.ts): a row per sign-in, named by the random id
// the signed cookie carries. Reading one is a primary-key lookup on every console request (each
// live poll included); signing out deletes it, so a copied cookie is refused from then on.
import { and, desc, eq, gt, lt, notInArray } from "drizzle-orm";
import { consoleSessions } from "../../schema/db/tables.ts";
import type { Db } from "./db.ts";

/** Sessions one key may hold at once: a login past it ends that key's oldest (a key's holder can
 * sign in in a loop; the table stays bounded by keys × this, and expired rows are collected). */
export const SESSIONS_PER_KEY = 16;

/** Records a new session; collects every expired one and the key's oldest past `SESSIONS_PER_KEY`. */
export async function recordConsoleSession(db: Db, s: { id: string; keyHash: string; expiresAt: number }, now = Date.now()): Promise<void> {
  const keep = db
    .select({ id: consoleSessions.id })
    .from(consoleSessions)
    .where(eq(consoleSessions.keyHash, s.keyHash))
    .orderBy(desc(consoleSessions.createdAt), desc(consoleSessions.id))
    .limit(SESSIONS_PER_KEY);
  // One round trip: the collection rides with the insert (both deletes use an index).
  await db.batch([
    db.insert(consoleSessions).values({ id: s.id, keyHash: s.keyHash, createdAt: now, expiresAt: s.expiresAt }),
    db.delete(consoleSessions).where(lt(consoleSessions.expiresAt, now)),
    db.delete(consoleSessions).where(and(eq(consoleSessions.keyHash, s.keyHash), notInArray(consoleSessions.id, keep))),
  ]);
}

/** The key HMAC of a live session, or undefined when it was ended or has expired. */
export async function consoleSessionKey(db: Db, id: string, now = Date.now()): Promise<string | undefined> {
  const rows = await db
    .select({ keyHash: consoleSessions.keyHash })
    .from(consoleSessions)
    .where(and(eq(consoleSessions.id, id), gt(consoleSessions.expiresAt, now)))
    .limit(1);
  return rows[0]?.keyHash;
}

export async function endConsoleSession(db: Db, id: string): Promise<void> {
  await db.delete(consoleSessions).where(eq(consoleSessions.id, id));
}
