// Team secrets in libSQL (schema/db `secrets`, `secret_versions`). Values go in sealed
// (secret-box.ts) and come out only through `secretValues`, for the agent of a sandbox whose
// rules name them; every other read is metadata.
import { and, asc, eq, gt, inArray, lte, or } from "drizzle-orm";
import { MAX_TEAM_SECRETS, SECRET_ID_PREFIX, SECRET_VERSIONS_KEPT, type Secret } from "../../schema/api/secret.ts";
import { secrets, secretVersions, teams } from "../../schema/db/tables.ts";
import type { Db } from "./db.ts";
import { open, seal } from "./secret-box.ts";
import { boundedInsert } from "./team-bound.ts";

export type SecretRow = typeof secrets.$inferSelect;

export function renderSecret(r: SecretRow): Secret {
  return {
    secretID: r.id,
    name: r.name,
    currentVersion: r.currentVersion,
    metadata: r.metadata,
    createdAt: new Date(r.createdAt).toISOString(),
    updatedAt: new Date(r.updatedAt).toISOString(),
  };
}

function newSecretId(): string {
  const b = crypto.getRandomValues(new Uint8Array(12));
  return SECRET_ID_PREFIX + [...b].map((x) => x.toString(16).padStart(2, "0")).join("");
}

/** The team's secret by id or (lower-cased) name. */
export async function findSecret(db: Db, teamId: string, idOrName: string): Promise<SecretRow | undefined> {
  const ref = idOrName.startsWith(SECRET_ID_PREFIX) ? idOrName : idOrName.toLowerCase();
  const rows = await db
    .select()
    .from(secrets)
    .where(and(eq(secrets.teamId, teamId), or(eq(secrets.id, ref), eq(secrets.name, ref))))
    .limit(1);
  return rows[0];
}

/** "exists" when the team already has a secret of that name, "full" when it has `max` secrets. */
export async function createSecret(
  db: Db,
  secretsKey: string,
  teamId: string,
  s: { name: string; value: string; metadata: Record<string, string> },
  now = Date.now(),
  max: number | null = MAX_TEAM_SECRETS,
): Promise<SecretRow | "exists" | "full"> {
  const row: SecretRow = { id: newSecretId(), teamId, name: s.name, currentVersion: 1, metadata: s.metadata, createdAt: now, updatedAt: now };
  const sealed = await seal(secretsKey, s.value, { teamId, secretId: row.id, version: 1 });
  // The version first: a crash between the two leaves an orphan version, never a secret without a value.
  await db.insert(secretVersions).values({ secretId: row.id, version: 1, sealed, createdAt: now });
  const inserted = await db.$client.execute(boundedInsert(secrets, row, { teamId, max }, "ON CONFLICT DO NOTHING"));
  if (inserted.rowsAffected === 0) {
    await db.delete(secretVersions).where(eq(secretVersions.secretId, row.id));
    return (await findSecret(db, teamId, s.name)) ? "exists" : "full";
  }
  return row;
}

/** Appends a version and makes it current, dropping versions older than the newest
 * SECRET_VERSIONS_KEPT in the same batch; undefined when there is no such secret. Metadata is
 * replaced when given. A concurrent update of the same secret makes one of them retry. */
export async function updateSecret(
  db: Db,
  secretsKey: string,
  teamId: string,
  idOrName: string,
  s: { value: string; metadata?: Record<string, string> },
): Promise<SecretRow | undefined> {
  for (;;) {
    const cur = await findSecret(db, teamId, idOrName);
    if (!cur) return undefined;
    const version = cur.currentVersion + 1;
    const now = Math.max(Date.now(), cur.updatedAt);
    const sealed = await seal(secretsKey, s.value, { teamId, secretId: cur.id, version });
    const wrote = await db.insert(secretVersions).values({ secretId: cur.id, version, sealed, createdAt: now }).onConflictDoNothing().returning({ v: secretVersions.version });
    if (wrote.length === 0) continue;
    const next = { currentVersion: version, updatedAt: now, metadata: s.metadata ?? cur.metadata };
    // Only the newest SECRET_VERSIONS_KEPT stay: a team updating in a loop must not grow libSQL.
    await db.batch([
      db.update(secrets).set(next).where(and(eq(secrets.id, cur.id), eq(secrets.currentVersion, cur.currentVersion))),
      db.delete(secretVersions).where(and(eq(secretVersions.secretId, cur.id), lte(secretVersions.version, version - SECRET_VERSIONS_KEPT))),
    ]);
    return { ...cur, ...next };
  }
}

/** Deletes the secret and every version; false when there was none. */
/** The deleted secret's name, or null when there was none. */
export async function deleteSecret(db: Db, teamId: string, idOrName: string): Promise<string | null> {
  const cur = await findSecret(db, teamId, idOrName);
  if (!cur) return null;
  await db.delete(secrets).where(eq(secrets.id, cur.id));
  await db.delete(secretVersions).where(eq(secretVersions.secretId, cur.id));
  return cur.name;
}

/** A page of the team's secrets by name; one extra row tells there is more. */
export async function listSecretRows(db: Db, teamId: string, limit: number, afterName?: string): Promise<SecretRow[]> {
  const where = afterName === undefined ? eq(secrets.teamId, teamId) : and(eq(secrets.teamId, teamId), gt(secrets.name, afterName));
  return db.select().from(secrets).where(where).orderBy(asc(secrets.name)).limit(limit + 1);
}

/** The current values of the named secrets of a team (names it lacks are absent). */
export async function secretValues(db: Db, secretsKey: string, teamId: string, names: string[]): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  if (names.length === 0) return out;
  const rows = await db
    .select({ id: secrets.id, name: secrets.name, version: secrets.currentVersion, sealed: secretVersions.sealed })
    .from(secrets)
    .innerJoin(secretVersions, and(eq(secretVersions.secretId, secrets.id), eq(secretVersions.version, secrets.currentVersion)))
    .where(and(eq(secrets.teamId, teamId), inArray(secrets.name, names)));
  for (const r of rows) out.set(r.name, await open(secretsKey, r.sealed, { teamId, secretId: r.id, version: r.version }));
  return out;
}

/** `secretValues` for a team known by its name (an intent's `team`); an unknown team has none. */
export async function teamSecretValues(db: Db, secretsKey: string, teamName: string, names: string[]): Promise<Map<string, string>> {
  if (names.length === 0) return new Map();
  const [team] = await db.select({ id: teams.id }).from(teams).where(eq(teams.name, teamName)).limit(1);
  return team ? secretValues(db, secretsKey, team.id, names) : new Map();
}
