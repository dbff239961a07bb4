// Per-team bounds on rows a tenant makes (snapshots, secrets, API keys), checked by the insert
// itself: a count read before the insert lets concurrent requests all pass it.
type Value = string | number | null;

export interface TeamBound {
  teamId: string;
  /** The most rows of `table` the team may have; null is no bound. */
  max: number | null;
}

/**
 * `INSERT INTO table (…) SELECT … WHERE (SELECT count(*) FROM table WHERE team_id = ?) < max`,
 * then `tail` (e.g. `ON CONFLICT DO NOTHING`: the WHERE also keeps SQLite from reading it as part
 * of the SELECT). Columns by their SQL names. One row inserted when within the bound, none past it.
 */
export function boundedInsert(table: string, row: Record<string, Value>, bound: TeamBound, tail = ""): { sql: string; args: Value[] } {
  const cols = Object.keys(row);
  return {
    sql: `INSERT INTO ${table} (${cols.join(", ")}) SELECT ${cols.map(() => "?").join(", ")}
          WHERE ? IS NULL OR (SELECT count(*) FROM ${table} WHERE team_id = ?) < ? ${tail}`,
    args: [...Object.values(row), bound.max, bound.teamId, bound.max],
  };
}
