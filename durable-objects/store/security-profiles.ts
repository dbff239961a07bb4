// SecurityProfiles and GlobalSecurityProfiles (team "") in libSQL, from the admin API and the CRD sync.
import { and, asc, eq, inArray, isNull, or, sql } from "drizzle-orm";
import type { SecurityProfileEntry, SecurityProfileSpec } from "../../schema/api/security-profile.ts";
import { securityProfiles, teams, templates } from "../../schema/db/tables.ts";
import type { Db } from "./db.ts";
import { placedOn } from "./templates.ts";

/** Every profile, or (`of` given) only those of these teams (null: the global ones), so a caller
 * about some teams never reads the others'. */
export async function listSecurityProfiles(db: Db, of?: Iterable<string | null>): Promise<SecurityProfileEntry[]> {
  const q = db.select().from(securityProfiles);
  const keys = of === undefined ? undefined : [...new Set([...of].map((t) => t ?? ""))];
  if (keys?.length === 0) return [];
  const rows = await (keys === undefined ? q : q.where(inArray(securityProfiles.team, keys))).orderBy(asc(securityProfiles.team), asc(securityProfiles.name));
  return rows.map((r) => ({ team: r.team === "" ? null : r.team, name: r.name, spec: r.spec, createdAt: r.createdAt }));
}

/** Who writes a profile: the admin API, or a cluster's CRD (a team's from a cluster bound to it, a
 * global one from any cluster GLOBAL_POLICY_CLUSTERS names: the platform team may apply the same
 * GlobalSecurityProfile to each of them). */
export type ProfileOwner = "admin" | "cluster";

const row = (team: string | null, name: string) => and(eq(securityProfiles.team, team ?? ""), eq(securityProfiles.name, name));
/** A row `owner` may write: its own. A row without an owner (from before owners were kept, or
 * written by an older Worker during a rolling upgrade, which a migration backfill would miss) is
 * the admin API's: a cluster's object claiming it would silently change what an admin made,
 * while the other way round the cluster gets a 409 naming the way out. */
const writable = (owner: ProfileOwner) => (owner === "admin" ? or(isNull(securityProfiles.owner), eq(securityProfiles.owner, owner)) : eq(securityProfiles.owner, owner));

/** The owner of a stored profile (one without an owner is the admin API's); undefined when there is none. */
export async function securityProfileOwner(db: Db, team: string | null, name: string): Promise<ProfileOwner | undefined> {
  const [r] = await db.select({ owner: securityProfiles.owner }).from(securityProfiles).where(row(team, name));
  return r ? (r.owner ?? "admin") : undefined;
}

/** Creates or replaces one, unless the other owner holds it (one statement, so a concurrent
 * write of the other cannot slip between check and write): null when written, else the holder.
 * Its creation time stays (it orders profiles of equal priority). */
export async function putSecurityProfile(db: Db, team: string | null, name: string, spec: SecurityProfileSpec, owner: ProfileOwner = "admin", now = Date.now()): Promise<ProfileOwner | null> {
  const written = await db
    .insert(securityProfiles)
    .values({ team: team ?? "", name, spec, createdAt: now, updatedAt: now, owner })
    .onConflictDoUpdate({ target: [securityProfiles.team, securityProfiles.name], set: { spec, updatedAt: now, owner }, setWhere: writable(owner) })
    .returning({ name: securityProfiles.name });
  return written.length ? null : ((await securityProfileOwner(db, team, name)) ?? null);
}

/** Deletes one `owner` may delete (any, when `owner` is undefined): true when deleted, false when
 * there was none, else the other owner holding it. */
export async function deleteSecurityProfile(db: Db, team: string | null, name: string, owner?: ProfileOwner): Promise<boolean | ProfileOwner> {
  const gone = await db
    .delete(securityProfiles)
    .where(owner ? and(row(team, name), writable(owner)) : row(team, name))
    .returning({ name: securityProfiles.name });
  if (gone.length) return true;
  return (owner && (await securityProfileOwner(db, team, name))) || false;
}

/** The teams with a template on `cluster` (templates are rows of their team, so a same-named
 * template of another team never counts). With the teams of the sandboxes the ClusterDO keeps
 * there (ClusterStore.liveTeams), the teams whose profiles, and only theirs, go to its agent. */
export async function teamsWithTemplatesOn(db: Db, cluster: string): Promise<Set<string>> {
  const owners = await db.selectDistinct({ name: teams.name }).from(templates).innerJoin(teams, eq(teams.id, templates.teamId)).where(placedOn(cluster));
  return new Set(owners.map((r) => r.name));
}
