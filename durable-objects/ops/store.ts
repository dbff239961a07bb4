// UpdateOpsDO's SQLite rows: the run (everything but its members) in one row, one row per member
// (a run of 1,000 sandboxes writes the lines that changed, not the whole run), and the snapshots a
// deleted run left to upgrades under way (`left`), which outlive it until those upgrades end.
import type { TemplateSpec } from "../../schema/protocol/index.ts";
import type { UpgradeRequest } from "../sandbox/upgrade.ts";
import type { OpsMember, OpsState } from "./machine.ts";

type Sql = Pick<SqlStorage, "exec">;

const SCHEMA = `
CREATE TABLE IF NOT EXISTS run (id INTEGER PRIMARY KEY CHECK (id = 0), value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS members (id TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS left_snapshots (snapshot TEXT PRIMARY KEY, value TEXT NOT NULL);
`;

/** A snapshot a deleted run left to its member's upgrade (`restoreFs`), freed once that ends. */
export interface LeftSnapshot {
  upgrade: UpgradeRequest & { restoreFs: string };
  /** Deletes tried and failed so far (given up on after a bound). */
  attempts: number;
  /** Times its sandbox was asked and still needed it (each wait twice the last, left.ts). */
  checks?: number;
  /** Not looked at before this (absent: now). */
  nextAt?: number;
}

/** What the shell keeps beside the machine: the run, and each template's target at selection. */
export interface Stored {
  state: OpsState;
  /** The template each member is upgraded to, by template id (fixed when the run selects). */
  targets: Record<string, TemplateSpec>;
  /** The trace of the call that started the run: each alarm step is a span of it. */
  traceparent?: string;
}

export class OpsStore {
  readonly #sql: Sql;
  /** Each member's row as last written. */
  readonly #written = new Map<string, string>();

  constructor(sql: Sql) {
    this.#sql = sql;
    sql.exec(SCHEMA);
  }

  load(): Stored | null {
    const row = this.#sql.exec<{ value: string }>("SELECT value FROM run WHERE id = 0").toArray()[0];
    if (!row) return null;
    const run = JSON.parse(row.value) as Omit<Stored, "state"> & { state: Omit<OpsState, "members"> };
    const members: OpsMember[] = [];
    for (const m of this.#sql.exec<{ id: string; value: string }>("SELECT id, value FROM members ORDER BY id").toArray()) {
      this.#written.set(m.id, m.value);
      members.push(JSON.parse(m.value) as OpsMember);
    }
    return { targets: run.targets, state: { ...run.state, members }, ...(run.traceparent ? { traceparent: run.traceparent } : {}) };
  }

  save(s: Stored): void {
    const { members, ...rest } = s.state;
    this.#sql.exec("INSERT INTO run (id, value) VALUES (0, ?) ON CONFLICT(id) DO UPDATE SET value = excluded.value", JSON.stringify({ targets: s.targets, state: rest, traceparent: s.traceparent }));
    const ids = new Set<string>();
    for (const m of members) {
      ids.add(m.id);
      const value = JSON.stringify(m);
      if (this.#written.get(m.id) === value) continue;
      this.#sql.exec("INSERT INTO members (id, value) VALUES (?, ?) ON CONFLICT(id) DO UPDATE SET value = excluded.value", m.id, value);
      this.#written.set(m.id, value);
    }
    for (const id of [...this.#written.keys()].filter((x) => !ids.has(x))) {
      this.#sql.exec("DELETE FROM members WHERE id = ?", id);
      this.#written.delete(id);
    }
  }

  /** The snapshots deleted runs left, oldest first. */
  leftSnapshots(): LeftSnapshot[] {
    return this.#sql.exec<{ value: string }>("SELECT value FROM left_snapshots ORDER BY rowid").toArray().map((r) => JSON.parse(r.value) as LeftSnapshot);
  }

  leaveSnapshot(l: LeftSnapshot): void {
    this.#sql.exec("INSERT INTO left_snapshots (snapshot, value) VALUES (?, ?) ON CONFLICT(snapshot) DO UPDATE SET value = excluded.value", l.upgrade.restoreFs, JSON.stringify(l));
  }

  forgetSnapshot(snapshotId: string): void {
    this.#sql.exec("DELETE FROM left_snapshots WHERE snapshot = ?", snapshotId);
  }

  /** Forgets the run (the snapshots it left stay). */
  clear(): void {
    this.#sql.exec("DELETE FROM run; DELETE FROM members;");
    this.#written.clear();
  }
}
