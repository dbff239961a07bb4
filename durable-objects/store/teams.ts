// Teams (team name = Kubernetes namespace).
import { and, asc, eq, gt } from "drizzle-orm";
import { teams } from "../../schema/db/tables.ts";
import type { Db } from "./db.ts";

export interface TeamRow {
  id: string;
  name: string;
  createdAt: number;
}

export async function findTeamByName(db: Db, name: string): Promise<TeamRow | undefined> {
  const rows = await db.select().from(teams).where(eq(teams.name, name)).limit(1);
  return rows[0];
}

/** Creates the team unless it exists (races settle on the unique name) and returns it. */
export async function ensureTeam(db: Db, name: string, id: string = crypto.randomUUID(), now = Date.now()): Promise<TeamRow> {
  await db.insert(teams).values({ id, name, createdAt: now }).onConflictDoNothing();
  const team = await findTeamByName(db, name);
  if (!team) throw new Error(`team ${name} vanished after insert`);
  return team;
}

export async function listTeams(db: Db, teamId: string | null): Promise<TeamRow[]> {
  const q = db.select().from(teams);
  return teamId === null ? q.orderBy(asc(teams.name)) : q.where(eq(teams.id, teamId));
}

/** Up to `limit` teams in name order after `after`; `teamId` names the only one (a team's caller). */
export async function listTeamPage(db: Db, opts: { teamId: string | null; after?: string; limit: number }): Promise<TeamRow[]> {
  return db
    .select()
    .from(teams)
    .where(and(opts.teamId === null ? undefined : eq(teams.id, opts.teamId), opts.after === undefined ? undefined : gt(teams.name, opts.after)))
    .orderBy(asc(teams.name))
    .limit(opts.limit);
}
