// The team↔cluster bindings (schema/db/tables.ts `team_clusters`). Only
// ../operations/team-clusters.ts writes them (and the seed, for the template it writes itself).
import { and, asc, eq, sql } from "drizzle-orm";
import { teamClusters, teams, templates } from "../../schema/db/tables.ts";
import type { Db } from "./db.ts";

export async function isBound(db: Db, teamId: string, cluster: string): Promise<boolean> {
  const rows = await db.select({ c: teamClusters.cluster }).from(teamClusters).where(and(eq(teamClusters.teamId, teamId), eq(teamClusters.cluster, cluster))).limit(1);
  return rows.length > 0;
}

/** Binds; `created` is false when the binding was there already. */
export async function insertBinding(db: Db, teamId: string, cluster: string, now = Date.now()): Promise<boolean> {
  const res = await db.insert(teamClusters).values({ teamId, cluster, createdAt: now }).onConflictDoNothing();
  return res.rowsAffected > 0;
}

/** Unbinds unless a template of the team runs on the cluster, in one statement: a template a bound
 * cluster writes concurrently either keeps the binding or finds it gone (crd-sync.ts re-checks). */
export async function deleteBindingUnlessPlaced(db: Db, teamId: string, cluster: string): Promise<boolean> {
  // A template's spec names its cluster; parsed, a missing one is "local" (schema/api/template.ts).
  const placed = db
    .select({ one: sql`1` })
    .from(templates)
    .where(and(eq(templates.teamId, teamId), sql`coalesce(json_extract(${templates.spec}, '$.cluster'), 'local') = ${cluster}`));
  const res = await db.delete(teamClusters).where(and(eq(teamClusters.teamId, teamId), eq(teamClusters.cluster, cluster), sql`NOT EXISTS ${placed}`));
  return res.rowsAffected > 0;
}

export async function listBindings(db: Db, teamId: string): Promise<{ cluster: string; createdAt: number }[]> {
  return db.select({ cluster: teamClusters.cluster, createdAt: teamClusters.createdAt }).from(teamClusters).where(eq(teamClusters.teamId, teamId)).orderBy(asc(teamClusters.cluster));
}

/** The names of the teams bound to `cluster`. */
export async function teamsBoundTo(db: Db, cluster: string): Promise<Set<string>> {
  const rows = await db.select({ name: teams.name }).from(teamClusters).innerJoin(teams, eq(teams.id, teamClusters.teamId)).where(eq(teamClusters.cluster, cluster));
  return new Set(rows.map((r) => r.name));
}
