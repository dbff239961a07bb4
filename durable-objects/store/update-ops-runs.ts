// Update ops runs by team, so they can be listed (the console): each run lives in its own
// UpdateOpsDO; operations/update-ops.ts writes a row when a run starts and removes it with the run,
// and the run rewrites the row's summary (phase, counts) whenever that changes.
import { and, desc, eq } from "drizzle-orm";
import { teams, updateOpsRuns } from "../../schema/db/tables.ts";
import type { Db } from "./db.ts";

export interface OpsRunSummary {
  phase: string;
  replicas: number;
  updatedReplicas: number;
  failedReplicas: number;
}

export interface OpsRunRow {
  teamId: string;
  teamName: string;
  name: string;
  createdAt: number;
  /** Null until the run first wrote its summary. */
  phase: string | null;
  replicas: number;
  updatedReplicas: number;
  failedReplicas: number;
}

export async function recordOpsRun(db: Db, teamId: string, name: string, now = Date.now()): Promise<void> {
  await db.insert(updateOpsRuns).values({ teamId, name, createdAt: now }).onConflictDoNothing();
}

/** The run's summary, as of its last change (written by the run; creates the row if its start's write has not landed yet). */
export async function writeOpsRunSummary(db: Db, teamId: string, name: string, createdAt: number, summary: OpsRunSummary): Promise<void> {
  await db.insert(updateOpsRuns).values({ teamId, name, createdAt, ...summary }).onConflictDoUpdate({ target: [updateOpsRuns.teamId, updateOpsRuns.name], set: summary });
}

export async function forgetOpsRun(db: Db, teamId: string, name: string): Promise<void> {
  await db.delete(updateOpsRuns).where(and(eq(updateOpsRuns.teamId, teamId), eq(updateOpsRuns.name, name)));
}

/** The newest runs first; `null` lists every team's. */
export async function listOpsRuns(db: Db, teamId: string | null, limit: number): Promise<OpsRunRow[]> {
  const q = db
    .select({
      teamId: updateOpsRuns.teamId,
      teamName: teams.name,
      name: updateOpsRuns.name,
      createdAt: updateOpsRuns.createdAt,
      phase: updateOpsRuns.phase,
      replicas: updateOpsRuns.replicas,
      updatedReplicas: updateOpsRuns.updatedReplicas,
      failedReplicas: updateOpsRuns.failedReplicas,
    })
    .from(updateOpsRuns)
    .innerJoin(teams, eq(teams.id, updateOpsRuns.teamId));
  return (teamId === null ? q : q.where(eq(updateOpsRuns.teamId, teamId))).orderBy(desc(updateOpsRuns.createdAt), desc(updateOpsRuns.name)).limit(limit);
}
