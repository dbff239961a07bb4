// The ClusterDO's own SQLite tables: each sandbox's newest intent, the outbox, session metadata.
// Writes touch only the rows an event changed; the routing state loads once per object instance.
import type { Intent, Owner, SandboxId } from "../../schema/protocol/index.ts";
import { initialState, type ClusterState } from "./machine.ts";
import { inChunks, marks, MAX_BOUND, rowMarks, runs } from "../sql-rows.ts";

type Sql = Pick<SqlStorage, "exec">;

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

/** A write of the intent tables, as the machine's effects ask for it (`writeIntents`). */
export type IntentWrite =
  | { op: "save"; intent: Intent; text: string }
  | { op: "drop"; sandboxId: SandboxId }
  | { op: "queue"; seq: number; sandboxId: SandboxId; generation: number }
  | { op: "unqueue"; seqs: readonly number[] };

export interface ClusterStore {
  /** The routing state: desired entries and the outbox (seq order), plus the next seq. */
  load(): ClusterState;
  /**
   * Runs `writes` with the stored result of running them one by one in order, in as few
   * statements as that allows: each run of saves (or drops, queues, unqueues) in a row is one
   * statement per `MAX_BOUND` parameters, and the `desired` writes go before the `outbox` ones
   * (the two tables never read each other in a write, so only each table's own order matters).
   * A turn of concurrent enqueues, two intents per create, was four statements per create.
   */
  writeIntents(writes: readonly IntentWrite[]): void;
  /** `text`: the intent as JSON, when the caller has it (the frame that sends it uses the same). */
  saveDesired(intent: Intent, text?: string): void;
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
  // One statement per 100 rows (Durable Object SQLite binds at most 100 parameters): an ack burst
  // of a refill is hundreds of seqs.
  const unqueue = (seqs: readonly number[]) =>
    inChunks(seqs, MAX_BOUND, (chunk) => sql.exec(`DELETE FROM outbox WHERE seq IN (${marks(chunk.length)})`, ...chunk));
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
    writeIntents(writes) {
      const desired: IntentWrite[] = [];
      const outbox: IntentWrite[] = [];
      for (const w of writes) (w.op === "save" || w.op === "drop" ? desired : outbox).push(w);
      for (const run of [...runs(desired), ...runs(outbox)]) {
        switch (run[0]!.op) {
          case "save":
            // One upsert for the run: SQLite takes a VALUES list row by row, so a sandbox saved twice
            // ends with its later intent, as two statements would leave it.
            inChunks(run as Extract<IntentWrite, { op: "save" }>[], SAVE_ROWS, (rows) =>
              sql.exec(saveSql(rows.length), ...rows.flatMap(({ intent: i, text }) => [i.sandboxId, i.generation, JSON.stringify(i.owner), i.desired.state, text, i.team ?? null])),
            );
            break;
          case "drop":
            inChunks(run.map((w) => (w as Extract<IntentWrite, { op: "drop" }>).sandboxId), MAX_BOUND, (ids) => sql.exec(`DELETE FROM desired WHERE sandbox_id IN (${marks(ids.length)})`, ...ids));
            break;
          case "queue":
            inChunks(run as Extract<IntentWrite, { op: "queue" }>[], QUEUE_ROWS, (rows) =>
              sql.exec(`INSERT INTO outbox (seq, sandbox_id, generation) VALUES ${rowMarks(rows.length, 3)}`, ...rows.flatMap((r) => [r.seq, r.sandboxId, r.generation])),
            );
            break;
          case "unqueue":
            unqueue(run.flatMap((w) => (w as Extract<IntentWrite, { op: "unqueue" }>).seqs));
            break;
        }
      }
    },
    saveDesired(intent, text = JSON.stringify(intent)) {
      this.writeIntents([{ op: "save", intent, text }]);
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
      inChunks(images, MAX_BOUND, (chunk) => {
        const rows = sql.exec<{ image: string }>(
          `SELECT DISTINCT json_extract(intent, '$.template.image') AS image FROM desired WHERE json_extract(intent, '$.template.image') IN (${marks(chunk.length)})`,
          ...chunk,
        );
        for (const r of rows) used.add(r.image);
      });
      return used;
    },
    unqueue,
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

/** Rows of one multi-row statement: its parameters stay within MAX_BOUND. */
const SAVE_ROWS = Math.floor(MAX_BOUND / 6);
const QUEUE_ROWS = Math.floor(MAX_BOUND / 3);

/** The desired upsert for `n` rows, built once per row count. An upsert, not INSERT OR REPLACE:
 * that deletes the old row and inserts anew, updating every index twice. */
const saveSqls = new Map<number, string>();
function saveSql(n: number): string {
  let text = saveSqls.get(n);
  if (text === undefined) {
    text = `INSERT INTO desired (sandbox_id, generation, owner, state, intent, team) VALUES ${rowMarks(n, 6)} ON CONFLICT (sandbox_id) DO UPDATE SET generation = excluded.generation, owner = excluded.owner, state = excluded.state, intent = excluded.intent, team = excluded.team`;
    saveSqls.set(n, text);
  }
  return text;
}
