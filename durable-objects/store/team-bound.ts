// Per-team bounds on rows a tenant makes (snapshots, secrets, API keys), checked by the insert
// itself: a count read before the insert lets concurrent requests all pass it.
import { getTableColumns, getTableName, type Column } from "drizzle-orm";
import type { SQLiteTable } from "drizzle-orm/sqlite-core";
import { marks } from "../sql-rows.ts";

type Value = string | number | null;

export interface TeamBound {
  teamId: string;
  /** The most rows of the table the team may have; null is no bound. */
  max: number | null;
}

/**
 * `INSERT INTO table (…) SELECT … WHERE (SELECT count(*) FROM table WHERE team_id = ?) < max`,
 * then `tail` (e.g. `ON CONFLICT DO NOTHING`: the WHERE also keeps SQLite from reading it as part
 * of the SELECT). The row as drizzle types it: column names and stored values come from the table
 * (JSON and boolean columns encoded as drizzle would). One row inserted when within the bound,
 * none past it.
 */
export function boundedInsert<T extends SQLiteTable & { teamId: Column }>(table: T, row: T["$inferInsert"], bound: TeamBound, tail = ""): { sql: string; args: Value[] } {
  const columns = getTableColumns(table) as Record<string, Column>;
  const given = Object.keys(row).filter((k) => columns[k] !== undefined);
  const name = getTableName(table);
  return {
    sql: `INSERT INTO ${name} (${given.map((k) => columns[k]!.name).join(", ")}) SELECT ${marks(given.length)}
          WHERE ? IS NULL OR (SELECT count(*) FROM ${name} WHERE ${table.teamId.name} = ?) < ? ${tail}`,
    args: [...given.map((k) => columns[k]!.mapToDriverValue((row as Record<string, unknown>)[k]) as Value), bound.max, bound.teamId, bound.max],
  };
}
