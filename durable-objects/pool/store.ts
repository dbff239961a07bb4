// The PoolDO's own SQLite tables. Every write touches only the rows one event changed, so a
// claim costs the same with 100 or 10,000 members; reads happen once, when the object loads.
import type { Endpoint, Intent, SandboxId } from "../../schema/protocol/index.ts";
import type { Member, PoolState } from "./machine.ts";
import type { AutoscalerState } from "./autoscaler.ts";

type Sql = Pick<SqlStorage, "exec">;
type Config = PoolState["config"];

export interface Outgoing {
  cluster: string;
  intent: Intent;
}

const SCHEMA = `
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS members (
  id TEXT PRIMARY KEY, state TEXT NOT NULL, revision TEXT NOT NULL, generation INTEGER NOT NULL,
  created_at INTEGER NOT NULL, endpoint TEXT, ord INTEGER NOT NULL, ready_once INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS pending_intents (sandbox_id TEXT PRIMARY KEY, cluster TEXT NOT NULL, intent TEXT NOT NULL);
`;

export interface PoolStore {
  loadConfig(): Config;
  saveConfig(config: Config): void;
  loadCounters(): { claimed: number; createdOnDemand: number };
  saveCounters(claimed: number, createdOnDemand: number): void;
  /** The autoscaler (spec, last decision, events; not its samples), or null when none is set. */
  loadAutoscaler(): Omit<AutoscalerState, "samples"> | null;
  saveAutoscaler(state: AutoscalerState | null): void;
  /** Members in queue order (`ord` is the member's queue ticket when it was last written). */
  loadMembers(): Member[];
  insertMembers(members: Member[]): void;
  updateMember(member: Member): void;
  deleteMembers(ids: readonly string[]): void;
  /** Intents not yet accepted by their cluster's ClusterDO, with that cluster. */
  loadOutgoing(): Outgoing[];
  saveOutgoing(items: Outgoing[]): void;
  deleteOutgoing(ids: readonly string[]): void;
}

export function openPoolStore(sql: Sql): PoolStore {
  sql.exec(SCHEMA);
  // Tables created before members remembered having been ready.
  const columns = sql.exec<{ name: string }>("PRAGMA table_info(members)").toArray();
  if (!columns.some((c) => c.name === "ready_once")) sql.exec("ALTER TABLE members ADD COLUMN ready_once INTEGER NOT NULL DEFAULT 0");
  const meta = (key: string): string | null => {
    const row = sql.exec<{ value: string }>("SELECT value FROM meta WHERE key = ?", key).toArray()[0];
    return row ? row.value : null;
  };
  const setMeta = (key: string, value: string) =>
    sql.exec("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value", key, value);
  return {
    loadConfig: () => {
      const v = meta("config");
      return v ? (JSON.parse(v) as Config) : null;
    },
    saveConfig: (config) => setMeta("config", JSON.stringify(config)),
    loadCounters: () => {
      const v = meta("counters");
      return v ? (JSON.parse(v) as { claimed: number; createdOnDemand: number }) : { claimed: 0, createdOnDemand: 0 };
    },
    saveCounters: (claimed, createdOnDemand) => setMeta("counters", JSON.stringify({ claimed, createdOnDemand })),
    loadAutoscaler: () => {
      const v = meta("autoscaler");
      return v ? (JSON.parse(v) as Omit<AutoscalerState, "samples">) : null;
    },
    saveAutoscaler: (state) => {
      if (!state) return void sql.exec("DELETE FROM meta WHERE key = 'autoscaler'");
      const { samples: _samples, ...kept } = state;
      setMeta("autoscaler", JSON.stringify(kept));
    },
    loadMembers: () =>
      sql
        .exec<{ id: string; state: string; revision: string; generation: number; created_at: number; endpoint: string | null; ready_once: number }>(
          "SELECT id, state, revision, generation, created_at, endpoint, ready_once FROM members ORDER BY ord",
        )
        .toArray()
        .map((r) => ({
          id: r.id as SandboxId,
          state: r.state === "available" ? "available" : "creating",
          revision: r.revision,
          generation: r.generation,
          createdAt: r.created_at,
          endpoint: r.endpoint ? (JSON.parse(r.endpoint) as Endpoint) : null,
          readyOnce: r.ready_once === 1 || r.state === "available",
          slot: -1,
        })),
    insertMembers: (members) => {
      for (const m of members) {
        sql.exec(
          "INSERT OR REPLACE INTO members (id, state, revision, generation, created_at, endpoint, ord) VALUES (?, ?, ?, ?, ?, ?, ?)",
          m.id, m.state, m.revision, m.generation, m.createdAt, m.endpoint ? JSON.stringify(m.endpoint) : null, m.slot,
        );
      }
    },
    updateMember: (m) =>
      sql.exec(
        "UPDATE members SET state = ?, endpoint = ?, ord = ?, ready_once = ? WHERE id = ?",
        m.state, m.endpoint ? JSON.stringify(m.endpoint) : null, m.slot, m.readyOnce ? 1 : 0, m.id,
      ),
    deleteMembers: (ids) => {
      for (const id of ids) sql.exec("DELETE FROM members WHERE id = ?", id);
    },
    loadOutgoing: () =>
      sql
        .exec<{ cluster: string; intent: string }>("SELECT cluster, intent FROM pending_intents")
        .toArray()
        .map((r) => ({ cluster: r.cluster, intent: JSON.parse(r.intent) as Intent })),
    saveOutgoing: (items) => {
      for (const o of items) {
        sql.exec("INSERT OR REPLACE INTO pending_intents (sandbox_id, cluster, intent) VALUES (?, ?, ?)", o.intent.sandboxId, o.cluster, JSON.stringify(o.intent));
      }
    },
    deleteOutgoing: (ids) => {
      for (const id of ids) sql.exec("DELETE FROM pending_intents WHERE sandbox_id = ?", id);
    },
  };
}
