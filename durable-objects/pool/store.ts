// The PoolDO's own SQLite tables. Every write touches only the rows one event changed, so a
// claim costs the same with 100 or 100,000 members. A load reads what does not grow with the
// stock (the config, the creating members, the count of each queue, written with the rows);
// available members are read a page at a time in queue order (the `members_queue` index) as
// claims reach them, so a cold object answers its first claim in the same time at any size.
import type { Endpoint, Intent, SandboxId } from "../../schema/protocol/index.ts";
import type { Member, MemberSource, PoolState, QueueSize, StoredInventory } from "./machine.ts";
import type { AutoscalerState } from "./autoscaler.ts";
import { inChunks, marks, MAX_BOUND, rowMarks, runs } from "../sql-rows.ts";

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

/** Members by queue (state, revision) in ticket order, and the size of each queue (the shell
 * writes them with the rows that changed them, in the same commit: `saveQueueSizes`). */
const QUEUES = `
CREATE INDEX IF NOT EXISTS members_queue ON members (state, revision, ord);
CREATE TABLE IF NOT EXISTS member_counts (state TEXT NOT NULL, revision TEXT NOT NULL, n INTEGER NOT NULL, PRIMARY KEY (state, revision)) WITHOUT ROWID;
`;

const MEMBER_COLUMNS = "id, state, revision, generation, created_at, endpoint, ord, ready_once";

type MemberRow = {
  id: string;
  state: string;
  revision: string;
  generation: number;
  created_at: number;
  endpoint: string | null;
  ord: number;
  ready_once: number;
};

function memberOf(r: MemberRow): Member {
  return {
    id: r.id as SandboxId,
    state: r.state === "available" ? "available" : "creating",
    revision: r.revision,
    generation: r.generation,
    createdAt: r.created_at,
    endpoint: r.endpoint ? (JSON.parse(r.endpoint) as Endpoint) : null,
    readyOnce: r.ready_once === 1 || r.state === "available",
    slot: r.ord,
  };
}

/** A write of member rows, as the machine's effects ask for it (`writeMembers`). */
export type MemberWrite = { op: "insert"; members: Member[] } | { op: "delete"; ids: readonly string[] } | { op: "update"; member: Member };

export interface PoolStore extends MemberSource {
  loadConfig(): Config;
  saveConfig(config: Config): void;
  loadCounters(): { claimed: number; createdOnDemand: number };
  saveCounters(claimed: number, createdOnDemand: number): void;
  /** The autoscaler (spec, last decision, events; not its samples), or null when none is set. */
  loadAutoscaler(): Omit<AutoscalerState, "samples"> | null;
  saveAutoscaler(state: AutoscalerState | null): void;
  /** What a load reads of the members (`ord` is a member's queue ticket, its `slot`). */
  loadInventory(): StoredInventory;
  /** Every queue's size (machine.ts `queueSizes`), written with the member rows that changed them. */
  saveQueueSizes(sizes: QueueSize[]): void;
  /**
   * Runs `writes` with the stored result of running them one by one in order, in few statements:
   * inserts (and deletes) in a row are one statement per `MAX_BOUND` parameters, and when no
   * member is named twice the writes are grouped by kind first (writes of different rows of one
   * table, no triggers: their order does not change what is stored). A turn of claims (the claimed
   * member's delete, its replacement's insert) was two statements per claim.
   */
  writeMembers(writes: readonly MemberWrite[]): void;
  insertMembers(members: Member[]): void;
  updateMember(member: Member): void;
  /** Intents not yet accepted by their cluster's ClusterDO, with that cluster. */
  loadOutgoing(): Outgoing[];
  saveOutgoing(items: Outgoing[]): void;
  deleteOutgoing(ids: readonly string[]): void;
}

export function openPoolStore(sql: Sql): PoolStore {
  const counted = sql.exec("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'member_counts'").toArray().length > 0;
  if (!counted) {
    sql.exec(SCHEMA);
    // Tables created before members remembered having been ready.
    const columns = sql.exec<{ name: string }>("PRAGMA table_info(members)").toArray();
    if (!columns.some((c) => c.name === "ready_once")) sql.exec("ALTER TABLE members ADD COLUMN ready_once INTEGER NOT NULL DEFAULT 0");
    sql.exec(QUEUES);
    // Members stored before: counted once, and their tickets made unique and increasing in the
    // order a load gave them (ORDER BY ord; an older load numbered its queues from 0 again, so
    // tickets of different loads could be equal).
    sql.exec("INSERT OR REPLACE INTO member_counts (state, revision, n) SELECT state, revision, COUNT(*) FROM members GROUP BY state, revision");
    sql.exec("UPDATE members SET ord = r.n FROM (SELECT id, ROW_NUMBER() OVER (ORDER BY ord, rowid) AS n FROM members) AS r WHERE members.id = r.id");
  }
  const meta = (key: string): string | null => {
    const row = sql.exec<{ value: string }>("SELECT value FROM meta WHERE key = ?", key).toArray()[0];
    return row ? row.value : null;
  };
  // Each multi-row statement: SQLite takes its VALUES row by row, so a member inserted twice ends
  // as its later row, as two statements would leave it.
  const insertMembers = (members: readonly Member[]) =>
    inChunks(members, Math.floor(MAX_BOUND / 7), (chunk) =>
      sql.exec(
        `INSERT INTO members (id, state, revision, generation, created_at, endpoint, ord) VALUES ${rowMarks(chunk.length, 7)}
         ON CONFLICT (id) DO UPDATE SET state = excluded.state, revision = excluded.revision, generation = excluded.generation,
           created_at = excluded.created_at, endpoint = excluded.endpoint, ord = excluded.ord`,
        ...chunk.flatMap((m) => [m.id, m.state, m.revision, m.generation, m.createdAt, m.endpoint ? JSON.stringify(m.endpoint) : null, m.slot]),
      ),
    );
  const updateMember = (m: Member) =>
    sql.exec(
      "UPDATE members SET state = ?, endpoint = ?, ord = ?, ready_once = ? WHERE id = ?",
      m.state, m.endpoint ? JSON.stringify(m.endpoint) : null, m.slot, m.readyOnce ? 1 : 0, m.id,
    );
  const deleteMembers = (ids: readonly string[]) =>
    inChunks(ids, MAX_BOUND, (chunk) => sql.exec(`DELETE FROM members WHERE id IN (${marks(chunk.length)})`, ...chunk));
  const writeMembers = (writes: readonly MemberWrite[]) => {
    const named = writes.flatMap((w) => (w.op === "insert" ? w.members.map((m) => m.id) : w.op === "delete" ? w.ids : [w.member.id]));
    const order = { delete: 0, insert: 1, update: 2 };
    const sorted = new Set(named).size === named.length ? [...writes].sort((a, b) => order[a.op] - order[b.op]) : writes;
    for (const run of runs(sorted)) {
      if (run[0]!.op === "insert") insertMembers(run.flatMap((w) => (w.op === "insert" ? w.members : [])));
      else if (run[0]!.op === "delete") deleteMembers(run.flatMap((w) => (w.op === "delete" ? w.ids : [])));
      else for (const w of run) if (w.op === "update") updateMember(w.member);
    }
  };
  /** The queues this object loaded or last wrote non-empty, by `queueKey` (saveQueueSizes). */
  const queues = new Map<string, { state: string; revision: string }>();
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
    loadInventory: () => {
      const counts = sql.exec<{ state: string; revision: string; n: number }>("SELECT state, revision, n FROM member_counts WHERE n > 0").toArray();
      for (const c of counts) queues.set(queueKey(c), { state: c.state, revision: c.revision });
      let nextSlot = 0;
      for (const c of counts) {
        // One index seek per queue (a global MAX(ord) would scan the table).
        const top = sql.exec<{ top: number | null }>("SELECT MAX(ord) AS top FROM members WHERE state = ? AND revision = ?", c.state, c.revision).one().top;
        if (top !== null) nextSlot = Math.max(nextSlot, top + 1);
      }
      const creating = sql.exec<MemberRow>(`SELECT ${MEMBER_COLUMNS} FROM members WHERE state = 'creating' ORDER BY ord`).toArray().map(memberOf);
      const available = counts.filter((c) => c.state === "available").map((c) => ({ revision: c.revision, size: c.n }));
      return { creating, available, nextSlot };
    },
    saveQueueSizes: (sizes) => {
      // One upsert, not a delete and an insert per queue: a queue gone since is written as 0 (a
      // load reads n > 0 only). The queues that can be gone are those this object loaded or last
      // wrote non-empty; one written 0 is left out after that (the writes of one object commit in
      // order, or a failed one resets the object and it loads again), so a claim's write does not
      // grow with every revision a pool has rolled through.
      const rows = new Map<string, QueueSize>();
      for (const [key, q] of queues) rows.set(key, { ...q, n: 0 } as QueueSize);
      for (const q of sizes) rows.set(queueKey(q), q);
      for (const [key, q] of rows) if (q.n > 0) queues.set(key, { state: q.state, revision: q.revision });
      else queues.delete(key);
      inChunks([...rows.values()], Math.floor(MAX_BOUND / 3), (chunk) =>
        sql.exec(
          `INSERT INTO member_counts (state, revision, n) VALUES ${rowMarks(chunk.length, 3)} ON CONFLICT (state, revision) DO UPDATE SET n = excluded.n`,
          ...chunk.flatMap((q) => [q.state, q.revision, q.n]),
        ),
      );
    },
    availablePage: (revision, after, before, limit) =>
      sql
        .exec<MemberRow>(`SELECT ${MEMBER_COLUMNS} FROM members WHERE state = 'available' AND revision = ? AND ord > ? AND ord < ? ORDER BY ord LIMIT ?`, revision, after, before, limit)
        .toArray()
        .map(memberOf),
    members: (ids) =>
      ids.length ? sql.exec<MemberRow>(`SELECT ${MEMBER_COLUMNS} FROM members WHERE id IN (${marks(ids.length)})`, ...ids).toArray().map(memberOf) : [],
    writeMembers,
    insertMembers,
    updateMember,
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

/** A queue's state and revision as one key, the queue itself again when parsed. */
const queueKey = (q: { state: string; revision: string }) => JSON.stringify({ state: q.state, revision: q.revision });
