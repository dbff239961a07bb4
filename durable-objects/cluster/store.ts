// The ClusterDO's own SQLite tables: each sandbox's newest intent, the outbox, session metadata.
// Writes touch only the rows an event changed; the routing state loads once per object instance.
import type { Intent, Owner, SandboxId } from "../../schema/protocol/index.ts";
import { initialState, type ClusterState } from "./machine.ts";

type Sql = Pick<SqlStorage, "exec">;

/** Parameters one Durable Object SQLite statement may bind. */
const MAX_BOUND = 100;

const SCHEMA = `
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS desired (
  sandbox_id TEXT PRIMARY KEY, generation INTEGER NOT NULL, owner TEXT NOT NULL, state TEXT NOT NULL,
  intent TEXT NOT NULL, team TEXT
);
-- A pending intent is always its sandbox's desired one (newer intents supersede), so the outbox
-- names the row in "desired" instead of copying the intent.
CREATE TABLE IF NOT EXISTS outbox (
  seq INTEGER PRIMARY KEY AUTOINCREMENT, sandbox_id TEXT NOT NULL, generation INTEGER NOT NULL
);
`;

export interface ClusterStore {
  /** The routing state: desired entries and the outbox (seq order), plus the next seq. */
  load(): ClusterState;
  /** `text`: the intent as JSON, when the caller has it (the frame that sends it uses the same). */
  saveDesired(intent: Intent, text?: string): void;
  dropDesired(sandboxId: SandboxId): void;
  /** Adds an outbox row for the sandbox's desired intent (saved before, at `generation`). */
  queue(seq: number, sandboxId: SandboxId, generation: number): void;
  unqueue(seqs: readonly number[]): void;
  /** Outbox intents by seq, with their stored JSON (rows gone in the meantime are skipped). */
  outboxIntents(seqs: readonly number[]): { seq: number; intent: Intent; text: string }[];
  getMeta(key: string): string | null;
  setMeta(key: string, value: string): void;
  /** The teams of the sandboxes this cluster has (desired, a deleted one until its agent says it
   * is gone, as its proxy serves it until then): the ones it serves whatever libSQL's index says
   * (a template deleted or moved, an index row not written yet). */
  liveTeams(): string[];
  /** Whether a sandbox of `team` is among them (an index lookup). */
  hasTeam(team: string): boolean;
  /** Those of `images` a sandbox kept here names (running, paused, queued for its agent, deleted
   * until the agent says it is gone). A scan of the desired rows: run only while images wait to
   * be freed, and an index would cost every intent write. */
  imagesInUse(images: readonly string[]): Set<string>;
}

export function openClusterStore(sql: Sql): ClusterStore {
  sql.exec(SCHEMA);
  // The team is a column of its own, not an index over json_extract(intent): every saveDesired
  // (two per warm create) made SQLite parse the whole intent for the index, on the delete of the
  // old row and the insert of the new. Objects made before keep their rows: the column is added,
  // and the old expression index dropped.
  const columns = sql.exec<{ name: string }>("PRAGMA table_info(desired)").toArray();
  if (!columns.some((c) => c.name === "team")) sql.exec("ALTER TABLE desired ADD COLUMN team TEXT");
  // Whether a team still has a sandbox here, after each burst of deletes (hasTeam): a lookup, not
  // a scan of every desired row.
  sql.exec("DROP INDEX IF EXISTS desired_team; CREATE INDEX IF NOT EXISTS desired_by_team ON desired (team)");
  // The team filled in on every open, not only when the column is added: code from before the
  // column (a rollback, or a gradual deployment moving the object back) writes rows with team
  // NULL after the migration, and those teams would be missed by liveTeams and hasTeam for good.
  // Through the index: only rows with no team are read (few: sandboxes without a team).
  sql.exec("UPDATE desired SET team = json_extract(intent, '$.team') WHERE team IS NULL AND json_extract(intent, '$.team') IS NOT NULL");
  return {
    load() {
      const last = sql.exec<{ seq: number }>("SELECT seq FROM sqlite_sequence WHERE name = 'outbox'").toArray()[0];
      const st = initialState((last?.seq ?? 0) + 1);
      for (const r of sql.exec<{ sandbox_id: string; generation: number; owner: string; state: string }>(
        "SELECT sandbox_id, generation, owner, state FROM desired",
      )) {
        st.desired.set(r.sandbox_id as SandboxId, {
          generation: r.generation,
          owner: JSON.parse(r.owner) as Owner,
          state: r.state === "deleted" ? "deleted" : r.state === "paused" ? "paused" : "running",
        });
      }
      for (const r of sql.exec<{ seq: number; sandbox_id: string; generation: number }>(
        "SELECT seq, sandbox_id, generation FROM outbox ORDER BY seq",
      )) {
        const id = r.sandbox_id as SandboxId;
        st.outbox.set(r.seq, { sandboxId: id, generation: r.generation, sentAt: null });
        st.pendingSeq.set(id, r.seq);
      }
      return st;
    },
    saveDesired(i, text = JSON.stringify(i)) {
      // An upsert, not INSERT OR REPLACE: that deletes the old row and inserts anew, updating every
      // index twice.
      sql.exec(
        "INSERT INTO desired (sandbox_id, generation, owner, state, intent, team) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (sandbox_id) DO UPDATE SET generation = excluded.generation, owner = excluded.owner, state = excluded.state, intent = excluded.intent, team = excluded.team",
        i.sandboxId, i.generation, JSON.stringify(i.owner), i.desired.state, text, i.team ?? null,
      );
    },
    liveTeams() {
      const rows = sql.exec<{ team: string | null }>("SELECT DISTINCT team FROM desired WHERE team IS NOT NULL").toArray();
      return rows.flatMap((r) => (typeof r.team === "string" && r.team ? [r.team] : []));
    },
    hasTeam(team) {
      return sql.exec("SELECT 1 FROM desired WHERE team = ? LIMIT 1", team).toArray().length > 0;
    },
    imagesInUse(images) {
      const used = new Set<string>();
      for (let i = 0; i < images.length; i += MAX_BOUND) {
        const chunk = images.slice(i, i + MAX_BOUND);
        const rows = sql.exec<{ image: string }>(
          `SELECT DISTINCT json_extract(intent, '$.template.image') AS image FROM desired WHERE json_extract(intent, '$.template.image') IN (${chunk.map(() => "?").join(", ")})`,
          ...chunk,
        );
        for (const r of rows) used.add(r.image);
      }
      return used;
    },
    dropDesired(id) {
      sql.exec("DELETE FROM desired WHERE sandbox_id = ?", id);
    },
    queue(seq, id, generation) {
      sql.exec("INSERT INTO outbox (seq, sandbox_id, generation) VALUES (?, ?, ?)", seq, id, generation);
    },
    unqueue(seqs) {
      // One statement per 100 rows (Durable Object SQLite binds at most 100 parameters): an ack
      // burst of a refill is hundreds of seqs.
      for (let i = 0; i < seqs.length; i += MAX_BOUND) {
        const chunk = seqs.slice(i, i + MAX_BOUND);
        sql.exec(`DELETE FROM outbox WHERE seq IN (${chunk.map(() => "?").join(", ")})`, ...chunk);
      }
    },
    outboxIntents(seqs) {
      const out: { seq: number; intent: Intent; text: string }[] = [];
      for (const seq of seqs) {
        const r = sql
          .exec<{ intent: string }>("SELECT d.intent FROM outbox o JOIN desired d ON d.sandbox_id = o.sandbox_id WHERE o.seq = ?", seq)
          .toArray()[0];
        if (r) out.push({ seq, intent: JSON.parse(r.intent) as Intent, text: r.intent });
      }
      return out;
    },
    getMeta(key) {
      const r = sql.exec<{ value: string }>("SELECT value FROM meta WHERE key = ?", key).toArray()[0];
      return r ? r.value : null;
    },
    setMeta(key, value) {
      sql.exec("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value", key, value);
    },
  };
}
