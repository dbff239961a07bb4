// Clusters whose agent has linked to this edge (written by functions/agent-link.ts on each link),
// so the console lists every connected agent, not only the clusters templates name.
import { asc, sql } from "drizzle-orm";
import { clusters } from "../../schema/db/tables.ts";
import type { Db } from "./db.ts";

export async function recordClusterLink(db: Db, name: string, now = Date.now()): Promise<void> {
  await db.insert(clusters).values({ name, firstLinkedAt: now, lastLinkedAt: now }).onConflictDoUpdate({ target: clusters.name, set: { lastLinkedAt: sql`excluded.last_linked_at` } });
}

export async function listLinkedClusters(db: Db): Promise<string[]> {
  return (await db.select({ name: clusters.name }).from(clusters).orderBy(asc(clusters.name))).map((r) => r.name);
}
