// TrafficPolicies and GlobalTrafficPolicies (team "" ) in libSQL, from the admin API.
import { and, asc, eq, inArray, ne } from "drizzle-orm";
import type { TrafficPolicyEntry, TrafficPolicySpec } from "../../schema/api/traffic-policy.ts";
import { sandboxes, teams, trafficPolicies } from "../../schema/db/tables.ts";
import type { Db } from "./db.ts";

/** Every policy, or (`of` given) only those of these teams (null: the global ones), so what a
 * cluster is sent never holds another team's (ClusterDO.sendTrafficPolicies). */
export async function listTrafficPolicies(db: Db, of?: Iterable<string | null>): Promise<TrafficPolicyEntry[]> {
  const q = db.select().from(trafficPolicies);
  const keys = of === undefined ? undefined : [...new Set([...of].map((t) => t ?? ""))];
  if (keys?.length === 0) return [];
  const rows = await (keys === undefined ? q : q.where(inArray(trafficPolicies.team, keys))).orderBy(asc(trafficPolicies.team), asc(trafficPolicies.name));
  return rows.map((r) => ({ team: r.team === "" ? null : r.team, name: r.name, spec: r.spec }));
}

export async function putTrafficPolicy(db: Db, team: string | null, name: string, spec: TrafficPolicySpec, now = Date.now()): Promise<void> {
  await db
    .insert(trafficPolicies)
    .values({ team: team ?? "", name, spec, updatedAt: now })
    .onConflictDoUpdate({ target: [trafficPolicies.team, trafficPolicies.name], set: { spec, updatedAt: now } });
}

/** Whether there was one to delete. */
export async function deleteTrafficPolicy(db: Db, team: string | null, name: string): Promise<boolean> {
  const gone = await db.delete(trafficPolicies).where(and(eq(trafficPolicies.team, team ?? ""), eq(trafficPolicies.name, name))).returning({ name: trafficPolicies.name });
  return gone.length > 0;
}

/** The live sandboxes (not killed) with their team's name and metadata, for policy status. */
export async function liveSandboxLabels(db: Db): Promise<{ id: string; team: string; templateId: string; metadata: Record<string, string> }[]> {
  return db.select({ id: sandboxes.id, team: teams.name, templateId: sandboxes.templateId, metadata: sandboxes.metadata }).from(sandboxes).innerJoin(teams, eq(teams.id, sandboxes.teamId)).where(ne(sandboxes.state, "killed"));
}
