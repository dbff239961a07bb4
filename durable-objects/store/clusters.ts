// Clusters whose agent has linked to this edge (written by functions/agent-link.ts on each link),
// so the console lists every connected agent, not only the clusters templates name.
import { sql } from "drizzle-orm";
import { clusters } from "../../schema/db/tables.ts";
import type { Db } from "./db.ts";

export async function recordClusterLink(db: Db, name: string, now = Date.now()): Promise<void> {
  await db.insert(clusters).values({ name, firstLinkedAt: now, lastLinkedAt: now }).onConflictDoUpdate({ target: clusters.name, set: { lastLinkedAt: sql`excluded.last_linked_at` } });
}

/**
 * Up to `limit` cluster names in order after `after`: every cluster whose agent has linked and
 * every cluster a template names (one query; the console asks each listed cluster's ClusterDO).
 */
export async function listClusterPage(db: Db, opts: { after?: string; limit: number }): Promise<string[]> {
  const res = await db.$client.execute({
    sql: `SELECT name FROM (SELECT name FROM clusters UNION SELECT spec ->> '$.cluster' AS name FROM templates) WHERE name IS NOT NULL AND name > ? ORDER BY name LIMIT ?`,
    args: [opts.after ?? "", opts.limit],
  });
  return res.rows.map((r) => String(r.name));
}
