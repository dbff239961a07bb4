// Template builds in libSQL: build rows, their log entries, uploaded copy archives and tags. The
// build operations (operations/template-builds.ts) are the only writers.
import { and, asc, desc, eq, gte, inArray, lte, sql, type SQL } from "drizzle-orm";
import type { BuildStatus } from "../../schema/api/template-build.ts";
import { templateBuildLogs, templateBuilds, templates, templateTags } from "../../schema/db/tables.ts";
import type { BuildLog } from "../../schema/protocol/build.ts";
import type { Db } from "./db.ts";

export type BuildRow = typeof templateBuilds.$inferSelect;

/**
 * Inserts a waiting build, failing ("never started") its team's waiting builds older than `ttlMs`
 * and, past `maxWaiting`, its oldest ones: a waiting build holds nothing but its row, a client that
 * requests builds and never starts them must not grow the table, and the SDK starts a build right
 * after requesting it (a refused start is never started again by it), so the oldest waiting one is
 * the abandoned one; refusing the new request instead would lock the team out for a day. One
 * transaction (sqld serializes writes): concurrent requests cannot leave more than `maxWaiting`.
 */
export async function insertWaitingBuild(db: Db, row: BuildRow, maxWaiting: number, ttlMs: number): Promise<void> {
  const neverStarted = (why: string) => ({ status: "error", reason: { message: `never started: ${why}` }, finishedAt: row.createdAt, updatedAt: row.createdAt });
  const waiting = and(eq(templateBuilds.teamId, row.teamId), eq(templateBuilds.status, "waiting"));
  // Past the newest maxWaiting - 1 (the new one makes maxWaiting). Written out: drizzle's limit()
  // takes no -1, SQLite's "no limit" before an OFFSET.
  const oldest = sql`${templateBuilds.id} IN (SELECT id FROM template_builds WHERE team_id = ${row.teamId} AND status = 'waiting' ORDER BY created_at DESC, id DESC LIMIT -1 OFFSET ${maxWaiting - 1})`;
  await db.batch([
    db.update(templateBuilds).set(neverStarted(`not started within ${ttlMs / 3_600_000} h of its request`)).where(and(waiting, lte(templateBuilds.createdAt, row.createdAt - ttlMs))),
    db.update(templateBuilds).set(neverStarted(`the team requested ${maxWaiting} builds after it`)).where(oldest),
    db.insert(templateBuilds).values(row),
  ]);
}

export async function getBuild(db: Db, id: string): Promise<BuildRow | undefined> {
  return (await db.select().from(templateBuilds).where(eq(templateBuilds.id, id)).limit(1))[0];
}

/** Moves a build on only from one of `from` (and where `also` holds, checked in the same
 * statement); false when it was elsewhere (a repeat, a race) or `also` did not hold. */
export async function moveBuild(db: Db, id: string, from: BuildStatus[], set: Partial<BuildRow>, also?: SQL): Promise<boolean> {
  const rows = await db
    .update(templateBuilds)
    .set({ ...set, updatedAt: set.updatedAt ?? Date.now() })
    .where(and(eq(templateBuilds.id, id), inArray(templateBuilds.status, from), also))
    .returning({ id: templateBuilds.id });
  return rows.length > 0;
}

export async function touchBuild(db: Db, id: string, now = Date.now()): Promise<void> {
  await db.update(templateBuilds).set({ updatedAt: now }).where(and(eq(templateBuilds.id, id), eq(templateBuilds.status, "building")));
}

/**
 * Moves a waiting build to building unless its team already runs `maxBuilding` builds: the count
 * and the move are one statement (a count read before the move let concurrent starts all pass it).
 * "busy": the team is at its bound; "gone": the build is no longer waiting (a repeat, a race).
 */
export async function startWaitingBuild(db: Db, b: Pick<BuildRow, "id" | "teamId">, maxBuilding: number, set: Partial<BuildRow>): Promise<"started" | "busy" | "gone"> {
  const fits = sql`(SELECT count(*) FROM template_builds WHERE team_id = ${b.teamId} AND status = 'building') < ${maxBuilding}`;
  if (await moveBuild(db, b.id, ["waiting"], { ...set, status: "building" }, fits)) return "started";
  return (await getBuild(db, b.id))?.status === "waiting" ? "busy" : "gone";
}

/**
 * Drops the log lines of the team's finished builds past its newest `keep` (their rows and status
 * stay): a build keeps up to MAX_BUILD_LOG_ENTRIES lines of 4 KiB, so a team building in a loop
 * would otherwise grow libSQL by its logs without bound.
 */
export async function pruneBuildLogs(db: Db, teamId: string, keep: number): Promise<void> {
  await db.$client.execute({
    sql: `DELETE FROM template_build_logs WHERE build_id IN (SELECT id FROM template_builds WHERE team_id = ?
            AND status IN ('ready', 'error') ORDER BY created_at DESC, id DESC LIMIT -1 OFFSET ?)`,
    args: [teamId, keep],
  });
}

export async function buildsOf(db: Db, teamId: string, templateId: string): Promise<BuildRow[]> {
  return db
    .select()
    .from(templateBuilds)
    .where(and(eq(templateBuilds.teamId, teamId), eq(templateBuilds.templateId, templateId)))
    .orderBy(desc(templateBuilds.createdAt))
    .limit(100);
}

/**
 * Deletes a template's builds (their logs and tags too) and, in the same batch before the rows go,
 * claims for freeing their images and `also` (the image the deleted template's spec named, on its
 * cluster) that no template names and no other template's build published. One transaction: if it
 * fails, the rows stay, a retried DELETE finds them, and a collection pass can still claim their
 * images (`claimSupersededImages`); no state is left where nothing names an image the agent keeps.
 * Answers how many builds went and what was claimed, by cluster.
 */
export async function deleteBuildsOf(db: Db, teamId: string, templateId: string, also?: { image: string; cluster: string }, now = Date.now()): Promise<{ builds: number; claimed: Map<string, string[]> }> {
  // No template names it, and no build but this template's (deleted in the same batch) published it.
  const unused = (image: string) => `NOT EXISTS (SELECT 1 FROM templates WHERE (spec ->> '$.image') = +${image})
            AND NOT EXISTS (SELECT 1 FROM template_builds o WHERE o.image = ${image} AND NOT (o.team_id = ?1 AND o.template_id = ?2))`;
  // Numbered parameters: ?1 team, ?2 template, ?3 now, ?4 image, ?5 cluster.
  const mine = [teamId, templateId];
  const res = await db.$client.batch(
    [
      {
        sql: `INSERT INTO freed_images (image, freed_at, cluster) SELECT b.image, ?3, b.cluster FROM template_builds b
              WHERE b.team_id = ?1 AND b.template_id = ?2 AND ${unused("b.image")}
              ON CONFLICT DO NOTHING RETURNING image, cluster`,
        args: [...mine, now],
      },
      {
        sql: `INSERT INTO freed_images (image, freed_at, cluster) SELECT ?4, ?3, ?5 WHERE ?4 IS NOT NULL AND ${unused("?4")}
              ON CONFLICT DO NOTHING RETURNING image, cluster`,
        args: [...mine, now, also?.image ?? null, also?.cluster ?? "local"],
      },
      { sql: "DELETE FROM template_build_logs WHERE build_id IN (SELECT id FROM template_builds WHERE team_id = ?1 AND template_id = ?2)", args: mine },
      { sql: "DELETE FROM template_tags WHERE team_id = ?1 AND template_id = ?2", args: mine },
      { sql: "DELETE FROM template_builds WHERE team_id = ?1 AND template_id = ?2", args: mine },
    ],
    "write",
  );
  const claimed = new Map<string, string[]>();
  for (const r of [...res[0]!.rows, ...res[1]!.rows]) claimed.set(String(r.cluster), [...(claimed.get(String(r.cluster)) ?? []), String(r.image)]);
  return { builds: res[4]!.rowsAffected, claimed };
}

/**
 * Claims for freeing those of `images` (built on `cluster`) that no template names and no build
 * published, and returns them. One statement: the check and the claim see one state of the
 * database (sqld serializes writes), and a template write naming a claimed image is refused after
 * it (the `freed_images` triggers), so a concurrent PUT either names the image first, and it is not
 * freed, or is refused. The agent is told later (operations/image-gc.ts). `again`: one claimed
 * already is to be sent again (it was published after its name was sent: a build that finished
 * after its template's delete), and is returned too.
 */
export async function claimUnusedImages(db: Db, images: string[], cluster: string, now = Date.now(), again = false): Promise<Set<string>> {
  if (!images.length) return new Set();
  const res = await db.$client.execute({
    sql: `INSERT INTO freed_images (image, freed_at, cluster) SELECT value, ?, ? FROM json_each(?) AS c
          WHERE NOT EXISTS (SELECT 1 FROM templates WHERE (spec ->> '$.image') = +c.value)
            AND NOT EXISTS (SELECT 1 FROM template_builds WHERE image = c.value)
          ON CONFLICT (image) ${again ? "DO UPDATE SET sent_at = NULL" : "DO NOTHING"} RETURNING image`,
    args: [now, cluster, JSON.stringify(images)],
  });
  return new Set(res.rows.map((r) => String(r.image)));
}

/**
 * Claims for freeing the images of `cluster`'s finished builds that nothing in libSQL references
 * any more (a rebuild or a re-point moved their template off them): no template names it, no tag
 * names its build (a kept tag is a reference the caller made), and no build that is waiting or
 * running stands on it (`fromTemplate`). A running build's own image is named only once it
 * finishes, so it is never a candidate. The build's row stays (its status and logs are still asked
 * for). An untagged superseded build cannot be named again (a tag target by name is its newest
 * ready build). One statement with the `freed_images` triggers, as `claimUnusedImages`. Returns
 * what it claimed.
 */
export async function claimSupersededImages(db: Db, cluster: string, now = Date.now()): Promise<string[]> {
  const res = await db.$client.execute({ sql: CLAIM_SUPERSEDED_SQL, args: [now, cluster] });
  return res.rows.map((r) => String(r.image));
}

// Each NOT EXISTS is an index lookup (migration 0013: templates_image, template_tags_build,
// template_builds_base_image), so a pass is linear in the cluster's builds, not quadratic: it holds
// sqld's write lock. `+b.image` drops the column's affinity so SQLite matches the expression index.
export const CLAIM_SUPERSEDED_SQL = `INSERT INTO freed_images (image, freed_at, cluster) SELECT b.image, ?, b.cluster FROM template_builds b
          WHERE b.cluster = ? AND b.status IN ('ready', 'error')
            AND NOT EXISTS (SELECT 1 FROM freed_images f WHERE f.image = b.image)
            AND NOT EXISTS (SELECT 1 FROM templates WHERE (spec ->> '$.image') = +b.image)
            AND NOT EXISTS (SELECT 1 FROM template_tags t WHERE t.build_id = b.id)
            AND NOT EXISTS (SELECT 1 FROM template_builds c WHERE c.base_image = b.image AND c.status IN ('waiting', 'building'))
          ON CONFLICT DO NOTHING RETURNING image`;

// By the freed_images_cluster_sent index (migration 0013).
export const UNSENT_FREES_SQL = `SELECT f.image, f.freed_at, f.sent_at,
            EXISTS (SELECT 1 FROM template_builds c WHERE c.base_image = f.image AND c.status IN ('waiting', 'building')) AS standing
          FROM freed_images f WHERE f.cluster = ? AND (f.sent_at IS NULL OR f.sent_at >= ?) ORDER BY f.freed_at LIMIT ?`;

/** A claimed image its agent has not been told about yet (or was told recently: `sentAt`);
 * `standing`: a build that is waiting or running stands on it (it was claimed just before that
 * build's start recorded its base). */
export interface UnsentFree {
  image: string;
  freedAt: number;
  sentAt: number | null;
  standing: boolean;
}

/** `cluster`'s claimed images not sent to its agent yet, oldest first (at most `limit`); with
 * `sentSince`, also those first sent at or after that time. */
export async function unsentFrees(db: Db, cluster: string, sentSince?: number, limit = 1000): Promise<UnsentFree[]> {
  const res = await db.$client.execute({ sql: UNSENT_FREES_SQL, args: [cluster, sentSince ?? Number.MAX_SAFE_INTEGER, limit] });
  return res.rows.map((r) => ({ image: String(r.image), freedAt: Number(r.freed_at), sentAt: r.sent_at === null ? null : Number(r.sent_at), standing: Number(r.standing) === 1 }));
}

export async function markFreesSent(db: Db, images: string[], now = Date.now()): Promise<void> {
  if (!images.length) return;
  // The first send's time stays: a resend (with a welcome) does not extend its window.
  await db.$client.execute({ sql: "UPDATE freed_images SET sent_at = COALESCE(sent_at, ?) WHERE image IN (SELECT value FROM json_each(?))", args: [now, JSON.stringify(images)] });
}

/** Appends entries the agent numbered; a repeated seq is ignored, entries past `max` dropped. */
export async function appendLogs(db: Db, buildId: string, logs: BuildLog[], max: number): Promise<void> {
  const kept = logs.filter((l) => l.seq < max);
  if (!kept.length) return;
  await db
    .insert(templateBuildLogs)
    .values(kept.map((l) => ({ buildId, seq: l.seq, at: l.at, level: l.level, step: l.step ?? null, message: l.message })))
    .onConflictDoNothing();
}

export type LogRow = typeof templateBuildLogs.$inferSelect;

/** Entries from the `offset`-th on (the SDK's logsOffset), in order. */
export async function logsFrom(db: Db, buildId: string, offset: number, limit: number): Promise<LogRow[]> {
  return db
    .select()
    .from(templateBuildLogs)
    .where(and(eq(templateBuildLogs.buildId, buildId), gte(templateBuildLogs.seq, offset)))
    .orderBy(asc(templateBuildLogs.seq))
    .limit(limit);
}

/** Entries at or after (forward) / at or before (backward) a time, optionally one level. */
export async function logsByTime(db: Db, buildId: string, q: { cursor?: number; limit: number; direction: "forward" | "backward"; level?: string }): Promise<LogRow[]> {
  const where = [eq(templateBuildLogs.buildId, buildId)];
  if (q.cursor !== undefined) where.push(q.direction === "forward" ? gte(templateBuildLogs.at, q.cursor) : lte(templateBuildLogs.at, q.cursor));
  if (q.level) where.push(eq(templateBuildLogs.level, q.level));
  const rows = await db
    .select()
    .from(templateBuildLogs)
    .where(and(...where))
    .orderBy(q.direction === "forward" ? asc(templateBuildLogs.seq) : desc(templateBuildLogs.seq))
    .limit(q.limit);
  return rows;
}

/** The last entries of a build (a failed build's reason carries them). */
export async function lastLogs(db: Db, buildId: string, n: number): Promise<LogRow[]> {
  const rows = await db.select().from(templateBuildLogs).where(eq(templateBuildLogs.buildId, buildId)).orderBy(desc(templateBuildLogs.seq)).limit(n);
  return rows.reverse();
}

// Blobs go through the client by hand: drizzle's buffer mode wants node's Buffer.

/** What an archive of `size` bytes counts against its team's bound: a row costs too. */
export const chargedBytes = (size: number) => Math.max(size, 4096);

/** Marks the team's archives `hashes` used now (a build starts with them, or the SDK found one
 * present and will not upload it): answers those it has. Only the small `template_file_uses` rows
 * are written. */
export async function useFiles(db: Db, teamId: string, hashes: string[], now = Date.now()): Promise<Set<string>> {
  if (!hashes.length) return new Set();
  const r = await db.$client.execute({
    sql: "UPDATE template_file_uses SET used_at = ? WHERE team_id = ? AND hash IN (SELECT value FROM json_each(?)) RETURNING hash",
    args: [now, teamId, JSON.stringify(hashes)],
  });
  return new Set(r.rows.map((x) => String(x.hash)));
}

/**
 * Stores an archive unless the team's archives would then pass `maxTeamBytes` (false then; true
 * when stored or already there). First the team's archives unused for `ttlMs` go: a build uses its
 * archives when it starts (`useFiles`) and builds end long before a week, so none a running build
 * needs. One transaction: the bound is read inside the statement that writes past it.
 */
export async function putFile(db: Db, teamId: string, hash: string, data: ArrayBuffer, bounds: { maxTeamBytes: number; ttlMs: number }, now = Date.now()): Promise<boolean> {
  const res = await db.$client.batch(
    [
      {
        sql: "DELETE FROM template_files WHERE team_id = ?1 AND hash IN (SELECT hash FROM template_file_uses WHERE team_id = ?1 AND used_at <= ?2)",
        args: [teamId, now - bounds.ttlMs],
      },
      { sql: "DELETE FROM template_file_uses WHERE team_id = ?1 AND used_at <= ?2", args: [teamId, now - bounds.ttlMs] },
      {
        sql: `INSERT INTO template_file_uses (team_id, hash, bytes, used_at) SELECT ?1, ?2, ?3, ?4
                WHERE coalesce((SELECT sum(bytes) FROM template_file_uses WHERE team_id = ?1), 0) + ?3 <= ?5
              ON CONFLICT DO UPDATE SET used_at = excluded.used_at`,
        args: [teamId, hash, chargedBytes(data.byteLength), now, bounds.maxTeamBytes],
      },
      {
        sql: `INSERT INTO template_files (team_id, hash, size, data, created_at) SELECT ?1, ?2, ?3, ?4, ?5
                WHERE EXISTS (SELECT 1 FROM template_file_uses WHERE team_id = ?1 AND hash = ?2)
              ON CONFLICT DO NOTHING`,
        args: [teamId, hash, data.byteLength, data, now],
      },
      { sql: "SELECT 1 FROM template_file_uses WHERE team_id = ? AND hash = ?", args: [teamId, hash] },
    ],
    "write",
  );
  return res[4]!.rows.length > 0;
}

export async function getFile(db: Db, teamId: string, hash: string): Promise<ArrayBuffer | undefined> {
  const r = await db.$client.execute({ sql: "SELECT data FROM template_files WHERE team_id = ? AND hash = ?", args: [teamId, hash] });
  const v = r.rows[0]?.data;
  return v instanceof ArrayBuffer ? v : undefined;
}

export async function putTags(db: Db, teamId: string, templateId: string, tags: string[], buildId: string, now = Date.now()): Promise<void> {
  if (!tags.length) return;
  await db
    .insert(templateTags)
    .values(tags.map((tag) => ({ teamId, templateId, tag, buildId, createdAt: now })))
    .onConflictDoUpdate({ target: [templateTags.teamId, templateTags.templateId, templateTags.tag], set: { buildId, createdAt: now } });
}

export async function deleteTags(db: Db, teamId: string, templateId: string, tags: string[]): Promise<number> {
  const rows = await db
    .delete(templateTags)
    .where(and(eq(templateTags.teamId, teamId), eq(templateTags.templateId, templateId), inArray(templateTags.tag, tags)))
    .returning({ tag: templateTags.tag });
  return rows.length;
}

export async function tagsOf(db: Db, teamId: string, templateId: string) {
  return db
    .select()
    .from(templateTags)
    .where(and(eq(templateTags.teamId, teamId), eq(templateTags.templateId, templateId)))
    .orderBy(asc(templateTags.tag));
}
