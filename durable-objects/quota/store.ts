// TeamQuotaDO's SQLite tables: the reservations of sandboxes that count (keyed by sandbox id), the
// team's own limits, and whether the census (of running, then also of paused sandboxes as frozen,
// then also of Stop-paused ones, which held nothing before paused sandboxes counted) is done. Pending reservations (a claim in flight) are never written: a restart
// ends their claim too.
import { TeamQuotaUpdate } from "../../schema/api/quota.ts";
import type { Kept, Reservation } from "./ledger.ts";

type Sql = Pick<SqlStorage, "exec">;

const SCHEMA = `
CREATE TABLE IF NOT EXISTS reservations (
  sandbox_id TEXT PRIMARY KEY, generation INTEGER NOT NULL, cpu REAL NOT NULL, memory_mb INTEGER NOT NULL, at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS limits (id INTEGER PRIMARY KEY CHECK (id = 0), value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS census (id INTEGER PRIMARY KEY CHECK (id = 0), at INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS census_paused (id INTEGER PRIMARY KEY CHECK (id = 0), at INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS census_stopped (id INTEGER PRIMARY KEY CHECK (id = 0), at INTEGER NOT NULL);
`;
/** Added after the table: 1 for a paused sandbox's reservation, Freeze (its memory and a paused
 * slot) and Stop (a paused slot only); 1 for a resume in flight (`resuming`: running and the
 * paused slot it resumes from). */
const ADDED_COLUMNS = ["frozen", "stopped", "resuming"] as const;
/** The census tables, each taken once: an object missing one takes the census again. */
const CENSUS_TABLES = ["census", "census_paused", "census_stopped"] as const;

export interface QuotaStore {
  /** Throws when the rows cannot be read or do not parse: the caller refuses (fails closed). */
  load(): { reservations: [string, Reservation][]; overrides: TeamQuotaUpdate; census: boolean };
  /** The census of sandboxes that predate the quota is done (see team-quota-do.ts). */
  markCensus(at: number): void;
  put(id: string, r: Reservation): void;
  remove(id: string): void;
  saveOverrides(o: TeamQuotaUpdate): void;
}

export function openQuotaStore(sql: Sql): QuotaStore {
  let ready = false;
  const schema = () => {
    if (ready) return;
    sql.exec(SCHEMA);
    const columns = sql.exec<{ name: string }>("SELECT name FROM pragma_table_info('reservations')").toArray();
    for (const name of ADDED_COLUMNS) {
      if (!columns.some((c) => c.name === name)) sql.exec(`ALTER TABLE reservations ADD COLUMN ${name} INTEGER NOT NULL DEFAULT 0`);
    }
    ready = true;
  };
  return {
    load: () => {
      schema();
      const rows = sql.exec<{ sandbox_id: string; generation: number; cpu: number; memory_mb: number; at: number; frozen: number; stopped: number; resuming: number }>("SELECT * FROM reservations").toArray();
      const stored = sql.exec<{ value: string }>("SELECT value FROM limits WHERE id = 0").toArray()[0];
      return {
        reservations: rows.map((r) => [r.sandbox_id, { generation: r.generation, cpu: r.cpu, memoryMB: r.memory_mb, at: r.at, ...pausedOf(r) }]),
        overrides: stored ? TeamQuotaUpdate.parse(JSON.parse(stored.value)) : {},
        // All: an object that counted only running (or running and frozen) sandboxes takes the
        // census again for its paused ones (a reserve of one already held changes nothing).
        census: CENSUS_TABLES.every((t) => sql.exec(`SELECT at FROM ${t} WHERE id = 0`).toArray().length > 0),
      };
    },
    put: (id, r) => {
      sql.exec(
        "INSERT INTO reservations (sandbox_id, generation, cpu, memory_mb, at, frozen, stopped, resuming) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(sandbox_id) DO UPDATE SET generation = excluded.generation, cpu = excluded.cpu, memory_mb = excluded.memory_mb, at = excluded.at, frozen = excluded.frozen, stopped = excluded.stopped, resuming = excluded.resuming",
        id, r.generation, r.cpu, r.memoryMB, r.at, r.paused === "frozen" ? 1 : 0, r.paused === "stopped" ? 1 : 0, r.paused === "resuming" ? 1 : 0,
      );
    },
    markCensus: (at) => {
      for (const t of CENSUS_TABLES) sql.exec(`INSERT INTO ${t} (id, at) VALUES (0, ?) ON CONFLICT(id) DO NOTHING`, at);
    },
    remove: (id) => {
      sql.exec("DELETE FROM reservations WHERE sandbox_id = ?", id);
    },
    saveOverrides: (o) => {
      schema();
      sql.exec("INSERT INTO limits (id, value) VALUES (0, ?) ON CONFLICT(id) DO UPDATE SET value = excluded.value", JSON.stringify(o));
    },
  };
}

/** The one place the columns become the reservation's `paused` (more than one set, never written,
 * reads as the larger hold). One column each because each was added by its own ALTER on load. */
function pausedOf(r: { frozen: number; stopped: number; resuming: number }): { paused?: Kept } {
  return r.resuming ? { paused: "resuming" } : r.frozen ? { paused: "frozen" } : r.stopped ? { paused: "stopped" } : {};
}
