// SecurityProfiles and GlobalSecurityProfiles (team "") in libSQL, from the admin API and the CRD sync.
import { and, asc, eq, sql } from "drizzle-orm";
import type { SecurityProfileEntry, SecurityProfileSpec } from "../../schema/api/security-profile.ts";
import { securityProfiles, teams, templates } from "../../schema/db/tables.ts";
import type { Db } from "./db.ts";

export async function listSecurityProfiles(db: Db): Promise<SecurityProfileEntry[]> {
  const rows = await db.select().from(securityProfiles).orderBy(asc(securityProfiles.team), asc(securityProfiles.name));
  return rows.map((r) => ({ team: r.team === "" ? null : r.team, name: r.name, spec: r.spec, createdAt: r.createdAt }));
}

/** Creates or replaces one; its creation time stays (it orders profiles of equal priority). */
export async function putSecurityProfile(db: Db, team: string | null, name: string, spec: SecurityProfileSpec, now = Date.now()): Promise<void> {
  await db
    .insert(securityProfiles)
    .values({ team: team ?? "", name, spec, createdAt: now, updatedAt: now })
    .onConflictDoUpdate({ target: [securityProfiles.team, securityProfiles.name], set: { spec, updatedAt: now } });
}

/** Whether there was one to delete. */
export async function deleteSecurityProfile(db: Db, team: string | null, name: string): Promise<boolean> {
  const gone = await db.delete(securityProfiles).where(and(eq(securityProfiles.team, team ?? ""), eq(securityProfiles.name, name))).returning({ name: securityProfiles.name });
  return gone.length > 0;
}

/** The teams with a template on `cluster` (templates are rows of their team, so a same-named
 * template of another team never counts). With the teams of the sandboxes the ClusterDO keeps
 * there (ClusterStore.liveTeams), the teams whose profiles, and only theirs, go to its agent. */
export async function teamsWithTemplatesOn(db: Db, cluster: string): Promise<Set<string>> {
  const onCluster = sql`coalesce(json_extract(${templates.spec}, '$.cluster'), 'local') = ${cluster}`;
  const owners = await db.selectDistinct({ name: teams.name }).from(templates).innerJoin(teams, eq(teams.id, templates.teamId)).where(onCluster);
  return new Set(owners.map((r) => r.name));
}
