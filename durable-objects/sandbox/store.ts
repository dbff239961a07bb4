// A sandbox group's SQLite tables. `sandboxes`: one row per sandbox (its spec, its state, an intent
// ClusterDO did not take yet, and when its timer is due). The spec is written at create and again
// only when it changes (rarely); other writes carry only the small changing part. Rows are read one at a time, when a
// sandbox is first touched by this object instance; the alarm asks for the due ones through the
// `due` index. `index_outbox`: the newest libSQL index op per sandbox that the index has not
// confirmed, written in the same commit as the change that made it (see IndexOutbox).
import type { IndexOp } from "../store/sandbox-index.ts";
import type { Intent } from "../../schema/protocol/index.ts";
import type { SandboxState } from "./state.ts";

type Sql = Pick<SqlStorage, "exec">;

/**
 * The newest intent ClusterDO has not confirmed taking (level-based: only the newest), sent again
 * at `retryAt`. Written with the transition that made the intent, before the enqueue.
 */
export interface Undelivered {
  intent: Intent;
  retryAt: number;
  /** The trace of the call that made the intent: its redelivery is a span of that trace. */
  traceparent?: string;
}

export interface SandboxRow {
  state: SandboxState;
  undelivered: Undelivered | null;
}

const SCHEMA = `
CREATE TABLE IF NOT EXISTS sandboxes (
  id TEXT PRIMARY KEY, spec TEXT NOT NULL, state TEXT NOT NULL, undelivered TEXT, due INTEGER
);
CREATE INDEX IF NOT EXISTS sandboxes_due ON sandboxes (due) WHERE due IS NOT NULL;
CREATE TABLE IF NOT EXISTS index_outbox (id TEXT PRIMARY KEY, rev INTEGER NOT NULL, op TEXT NOT NULL);
`;

/** An index op and the revision of the row it writes (newer revisions replace older ones). */
export interface OutboxEntry {
  id: string;
  rev: number;
  op: IndexOp;
}

export interface SandboxStore {
  /** Every stored id (read once per object instance, so a new id costs no lookup). */
  ids(): string[];
  load(id: string): SandboxRow | null;
  /** A sandbox not stored yet. */
  insert(id: string, row: SandboxRow, due: number | null): void;
  /** A stored sandbox: everything but its spec, and the spec too when `spec` (it changed: an
   * upgrade's template, updateNetwork's rules, kubectl's hooks). */
  update(id: string, row: SandboxRow, due: number | null, spec?: boolean): void;
  remove(id: string): void;
  /** Sandboxes whose timer is due at `now`. */
  dueIds(now: number): string[];
  /** The earliest due time of any sandbox (later than `after`, when given), or null. */
  nextDue(after?: number): number | null;
  /** Keeps `entry` unless a newer revision of the sandbox's row is kept already. */
  outboxPut(entry: OutboxEntry): void;
  /** The index committed revision `rev` (or a newer one) of the sandbox's row. */
  outboxDone(id: string, rev: number): void;
  /** Up to `limit` entries the index has not confirmed. */
  outbox(limit: number): OutboxEntry[];
}

export function openSandboxStore(sql: Sql): SandboxStore {
  sql.exec(SCHEMA);
  return {
    ids() {
      return sql.exec<{ id: string }>("SELECT id FROM sandboxes").toArray().map((r) => r.id);
    },
    load(id) {
      const r = sql
        .exec<{ spec: string; state: string; undelivered: string | null }>("SELECT spec, state, undelivered FROM sandboxes WHERE id = ?", id)
        .toArray()[0];
      if (!r) return null;
      const state = { ...(JSON.parse(r.state) as Omit<SandboxState, "spec">), spec: JSON.parse(r.spec) as SandboxState["spec"] };
      return { state, undelivered: r.undelivered ? (JSON.parse(r.undelivered) as Undelivered) : null };
    },
    insert(id, row, due) {
      sql.exec(
        "INSERT INTO sandboxes (id, spec, state, undelivered, due) VALUES (?, ?, ?, ?, ?)",
        id, JSON.stringify(row.state.spec), withoutSpec(row.state), undeliveredText(row), due,
      );
    },
    update(id, row, due, spec = false) {
      if (spec) sql.exec("UPDATE sandboxes SET spec = ?, state = ?, undelivered = ?, due = ? WHERE id = ?", JSON.stringify(row.state.spec), withoutSpec(row.state), undeliveredText(row), due, id);
      else sql.exec("UPDATE sandboxes SET state = ?, undelivered = ?, due = ? WHERE id = ?", withoutSpec(row.state), undeliveredText(row), due, id);
    },
    remove(id) {
      sql.exec("DELETE FROM sandboxes WHERE id = ?", id);
    },
    dueIds(now) {
      return sql.exec<{ id: string }>("SELECT id FROM sandboxes WHERE due <= ?", now).toArray().map((r) => r.id);
    },
    nextDue(after = -1) {
      return sql.exec<{ due: number | null }>("SELECT MIN(due) AS due FROM sandboxes WHERE due > ?", after).toArray()[0]?.due ?? null;
    },
    outboxPut(e) {
      sql.exec(
        "INSERT INTO index_outbox (id, rev, op) VALUES (?, ?, ?) ON CONFLICT (id) DO UPDATE SET rev = excluded.rev, op = excluded.op WHERE excluded.rev > index_outbox.rev",
        e.id, e.rev, JSON.stringify(e.op),
      );
    },
    outboxDone(id, rev) {
      sql.exec("DELETE FROM index_outbox WHERE id = ? AND rev <= ?", id, rev);
    },
    outbox(limit) {
      return sql
        .exec<{ id: string; rev: number; op: string }>("SELECT id, rev, op FROM index_outbox LIMIT ?", limit)
        .toArray()
        .map((r) => ({ id: r.id, rev: r.rev, op: JSON.parse(r.op) as IndexOp }));
    },
  };
}

function withoutSpec(state: SandboxState): string {
  const { spec: _spec, ...rest } = state;
  return JSON.stringify(rest);
}

function undeliveredText(row: SandboxRow): string | null {
  return row.undelivered ? JSON.stringify(row.undelivered) : null;
}
