// The team↔cluster bindings (schema/db/tables.ts `team_clusters`). Only
// ../operations/team-clusters.ts writes them (and the seed, for the template it writes itself).
import { and, asc, eq, sql } from "drizzle-orm";
import { teamClusters, teams, templates } from "../../schema/db/tables.ts";
import type { Db } from "./db.ts";
import type { TeamRow } from "./teams.ts";
import { placedOn } from "./templates.ts";

/** Team `name` and whether it is bound to `cluster`, in one read (undefined: no such team). */
export async function teamAndBinding(db: Db, name: string, cluster: string): Promise<{ team: TeamRow; bound: boolean } | undefined> {
  const rows = await db
    .select({ id: teams.id, name: teams.name, createdAt: teams.createdAt, bound: teamClusters.cluster })
    .from(teams)
    .leftJoin(teamClusters, and(eq(teamClusters.teamId, teams.id), eq(teamClusters.cluster, cluster)))
    .where(eq(teams.name, name))
    .limit(1);
  const r = rows[0];
  return r && { team: { id: r.id, name: r.name, createdAt: r.createdAt }, bound: r.bound !== null };
}

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
  const placed = db.select({ one: sql`1` }).from(templates).where(and(eq(templates.teamId, teamId), placedOn(cluster)));
  const res = await db.delete(teamClusters).where(and(eq(teamClusters.teamId, teamId), eq(teamClusters.cluster, cluster), sql`NOT EXISTS ${placed}`));
  return res.rowsAffected > 0;
}

export async function listBindings(db: Db, teamId: string): Promise<{ cluster: string; createdAt: number }[]> {
  return db.select({ cluster: teamClusters.cluster, createdAt: teamClusters.createdAt }).from(teamClusters).where(eq(teamClusters.teamId, teamId)).orderBy(asc(teamClusters.cluster));
}

/** The names of the teams bound to `cluster`, and of those the ones with a template placed there,
 * in one read. */
export async function teamsBoundTo(db: Db, cluster: string): Promise<{ bound: Set<string>; withTemplates: Set<string> }> {
  const placed = db
    .select({ one: sql`1` })
    .from(templates)
    .where(and(eq(templates.teamId, teamClusters.teamId), placedOn(cluster)));
  const rows = await db
    .select({ name: teams.name, placed: sql<number>`EXISTS ${placed}` })
    .from(teamClusters)
    .innerJoin(teams, eq(teams.id, teamClusters.teamId))
    .where(eq(teamClusters.cluster, cluster));
  return { bound: new Set(rows.map((r) => r.name)), withTemplates: new Set(rows.flatMap((r) => (r.placed ? [r.name] : []))) };
}
