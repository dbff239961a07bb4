// Each sandbox's recent log entries, kept on the agent for E2B's logs routes (the edge asks over the
// link: a `logsRequest` frame). Bounded per sandbox (the oldest go first) and per entry. A deleted
// sandbox's logs are kept a while (ENDED_KEEP_MS, at most ENDED_KEEP_COUNT sandboxes), as E2B
// serves a killed sandbox's logs; the edge finds their agent by the sandbox's tombstone. Fed by every agent log line that names a sandbox (`sandboxId` field: the reconciler's
// phase changes, the runtime's process starts and exits, driver errors) and by `append` (a start
// command's output: `logs.append(id, "info", line, { source: "start", stream: "stdout" })`).
// With a directory, each sandbox's entries are also appended to `<dir>/<id>.jsonl` and read back
// when the agent starts, so they survive its restart: the file is rewritten from memory once it
// holds twice the bound, so it stays under 2 × LOGS_PER_SANDBOX lines (each line is bounded).
// Writes are batched: entries wait at most FLUSH_MS and go in one append per sandbox, off the path
// of the line that made them (two synchronous appends per command before). A query flushes first,
// so whatever a client has been served is on disk and survives a crash of the agent.
import { appendFileSync, chmodSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { SANDBOX_ID_PATTERN } from "../../schema/protocol/ids.ts";
import {
  LOG_LEVELS,
  MAX_LOG_FIELD_KEY_LENGTH,
  MAX_LOG_FIELD_VALUE_LENGTH,
  MAX_LOG_FIELDS,
  MAX_LOG_MESSAGE_LENGTH,
  type SandboxLogEntry,
  type SandboxLogLevel,
  type SandboxLogsQuery,
} from "../../schema/api/sandbox-logs.ts";
import { clipText } from "../../schema/api/limits.ts";

/** Entries kept per sandbox. */
export const LOGS_PER_SANDBOX = 1000;
/** Characters of messages and fields one answer carries at most (a frame stays well under 1 MiB);
 * the client pages on with the last timestamp. */
export const MAX_ANSWER_CHARS = 256 * 1024;

/** How long an entry may wait before it is written to disk. */
export const FLUSH_MS = 200;
/** A deleted sandbox's logs are served this long after it went (E2B serves a killed sandbox's). */
export const ENDED_KEEP_MS = 15 * 60_000;
/** And for at most this many deleted sandboxes (the oldest go first). */
export const ENDED_KEEP_COUNT = 100;

export interface SandboxLogsOptions {
  perSandbox?: number;
  /** Where entries are kept across agent restarts; memory only without one. */
  dir?: string;
  flushMs?: number;
  endedKeepMs?: number;
  endedKeepCount?: number;
  now?: () => number;
}

const RANK: Record<SandboxLogLevel, number> = { debug: 0, info: 1, warn: 2, error: 3 };

export class SandboxLogs {
  readonly #bySandbox = new Map<string, SandboxLogEntry[]>();
  readonly #perSandbox: number;
  readonly #dir: string | undefined;
  /** Lines in each sandbox's file (with a directory). */
  readonly #fileLines = new Map<string, number>();
  /** Serialized entries not yet on disk, per sandbox. */
  readonly #pending = new Map<string, string[]>();
  #flushTimer: ReturnType<typeof setTimeout> | undefined;
  /** Deleted sandboxes whose logs are still served, with when they went (oldest first). */
  readonly #ended = new Map<string, number>();
  readonly #o: Required<Omit<SandboxLogsOptions, "dir">>;

  constructor(opts: SandboxLogsOptions = {}) {
    this.#o = {
      perSandbox: opts.perSandbox ?? LOGS_PER_SANDBOX,
      flushMs: opts.flushMs ?? FLUSH_MS,
      endedKeepMs: opts.endedKeepMs ?? ENDED_KEEP_MS,
      endedKeepCount: opts.endedKeepCount ?? ENDED_KEEP_COUNT,
      now: opts.now ?? Date.now,
    };
    this.#perSandbox = this.#o.perSandbox;
    this.#dir = opts.dir;
    if (opts.dir) this.#load(opts.dir);
  }

  append(sandboxId: string, level: SandboxLogLevel, message: string, fields: Record<string, unknown> = {}, at: number = Date.now()): void {
    let list = this.#bySandbox.get(sandboxId);
    if (!list) this.#bySandbox.set(sandboxId, (list = []));
    const entry: SandboxLogEntry = { timestamp: at, level: (LOG_LEVELS as readonly string[]).includes(level) ? level : "info", message: clipText(message, MAX_LOG_MESSAGE_LENGTH), fields: boundedFields(fields) };
    list.push(entry);
    // Drop in chunks so a full buffer does not shift the array on every line.
    if (list.length > this.#perSandbox + this.#perSandbox / 10) list.splice(0, list.length - this.#perSandbox);
    if (!this.#fileOf(sandboxId)) return;
    let pending = this.#pending.get(sandboxId);
    if (!pending) this.#pending.set(sandboxId, (pending = []));
    pending.push(JSON.stringify(entry) + "\n");
    this.#flushTimer ??= setTimeout(() => this.flush(), this.#o.flushMs).unref();
  }

  /** The sandbox is deleted: its logs are served a while longer (bounded), then forgotten. */
  ended(sandboxId: string, at = this.#o.now()): void {
    if (!this.#bySandbox.has(sandboxId)) return;
    this.#ended.delete(sandboxId);
    this.#ended.set(sandboxId, at);
    this.#sweep();
  }

  /** Forgets the sandbox's logs now, memory and disk. */
  drop(sandboxId: string): void {
    this.#bySandbox.delete(sandboxId);
    this.#fileLines.delete(sandboxId);
    this.#pending.delete(sandboxId);
    this.#ended.delete(sandboxId);
    const file = this.#fileOf(sandboxId);
    if (file) rmSync(file, { force: true });
  }

  /** Every sandbox not in `ids` was deleted while the agent was down: its logs count as ended when its file was last written. */
  retainOnly(ids: Iterable<string>): void {
    const keep = new Set(ids);
    const gone = [...this.#bySandbox.keys()].filter((id) => !keep.has(id) && !this.#ended.has(id));
    const at = (id: string) => {
      const file = this.#fileOf(id);
      try {
        return file ? statSync(file).mtimeMs : 0;
      } catch {
        return 0;
      }
    };
    for (const [id, when] of gone.map((id) => [id, at(id)] as const).sort((a, b) => a[1] - b[1])) this.#ended.set(id, when);
    this.#sweep();
  }

  /** Writes what waits; the agent calls it when it stops. */
  flush(): void {
    if (this.#flushTimer) clearTimeout(this.#flushTimer);
    this.#flushTimer = undefined;
    for (const [id, lines] of this.#pending) this.#write(id, lines);
    this.#pending.clear();
  }

  #sweep(): void {
    const oldest = this.#o.now() - this.#o.endedKeepMs;
    for (const [id, at] of this.#ended) {
      if (at >= oldest && this.#ended.size <= this.#o.endedKeepCount) break;
      this.drop(id);
    }
  }

  /** The sandbox's file; none for an id that is not a sandbox id (never a path of its own). */
  #fileOf(sandboxId: string): string | undefined {
    return this.#dir && SANDBOX_ID_PATTERN.test(sandboxId) ? join(this.#dir, `${sandboxId}.jsonl`) : undefined;
  }

  /** Appends the sandbox's waiting lines in one write, or rewrites the file from memory once it holds twice the bound. */
  #write(sandboxId: string, lines: string[]): void {
    const file = this.#fileOf(sandboxId);
    if (!file) return;
    try {
      const count = (this.#fileLines.get(sandboxId) ?? 0) + lines.length;
      if (count > 2 * this.#perSandbox) {
        const kept = (this.#bySandbox.get(sandboxId) ?? []).slice(-this.#perSandbox);
        writeFileSync(file, kept.map((e) => JSON.stringify(e) + "\n").join(""));
        this.#fileLines.set(sandboxId, kept.length);
      } else {
        appendFileSync(file, lines.join(""));
        this.#fileLines.set(sandboxId, count);
      }
    } catch {
      // A full or read-only disk loses the copy, not the entries: memory still has them.
    }
  }

  #load(dir: string): void {
    // Tenants' output: readable by the agent only (the data directory above lets other host users
    // pass, for the sandboxes' holders).
    mkdirSync(dir, { recursive: true });
    chmodSync(dir, 0o700);
    for (const name of readdirSync(dir)) {
      const id = name.endsWith(".jsonl") ? name.slice(0, -".jsonl".length) : "";
      if (!SANDBOX_ID_PATTERN.test(id)) continue;
      const lines = readFileSync(join(dir, name), "utf8").split("\n").filter((l) => l !== "");
      const entries: SandboxLogEntry[] = [];
      for (const line of lines.slice(-this.#perSandbox)) {
        const e = parseEntry(line);
        if (e) entries.push(e);
      }
      this.#bySandbox.set(id, entries);
      this.#fileLines.set(id, lines.length);
    }
  }

  query(sandboxId: string, q: SandboxLogsQuery): SandboxLogEntry[] {
    // What a client is shown is on disk first: an agent crash after the answer does not lose it.
    if (this.#pending.size) this.flush();
    this.#sweep();
    const all = (this.#bySandbox.get(sandboxId) ?? []).slice(-this.#perSandbox);
    const min = q.level ? RANK[q.level] : 0;
    const keep = (e: SandboxLogEntry) => RANK[e.level] >= min && (!q.search || e.message.includes(q.search));
    const out: SandboxLogEntry[] = [];
    let chars = 0;
    const forward = q.direction !== "backward";
    for (let i = forward ? 0 : all.length - 1; forward ? i < all.length : i >= 0; i += forward ? 1 : -1) {
      const e = all[i]!;
      if (q.start !== undefined && (forward ? e.timestamp < q.start : e.timestamp > q.start)) continue;
      if (!keep(e)) continue;
      if (out.length >= q.limit) break;
      chars += e.message.length + JSON.stringify(e.fields).length;
      if (chars > MAX_ANSWER_CHARS && out.length) break;
      out.push(e);
    }
    return out;
  }
}

/** Fields as E2B's strings, bounded in count and length; ids and the message's own keys left out. */
function boundedFields(fields: Record<string, unknown>): Record<string, string> {
  const out: Record<string, string> = {};
  let n = 0;
  for (const [k, v] of Object.entries(fields)) {
    if (v === undefined || k === "sandboxId") continue;
    if (n++ >= MAX_LOG_FIELDS) break;
    const s = typeof v === "string" ? v : v instanceof Error ? v.message : JSON.stringify(v);
    out[clipText(k, MAX_LOG_FIELD_KEY_LENGTH)] = clipText(s ?? String(v), MAX_LOG_FIELD_VALUE_LENGTH);
  }
  return out;
}

/** One stored line, or null when it is torn (a crash mid-write) or not an entry. */
function parseEntry(line: string): SandboxLogEntry | null {
  try {
    const e = JSON.parse(line) as SandboxLogEntry;
    if (typeof e.timestamp !== "number" || typeof e.message !== "string" || !(LOG_LEVELS as readonly string[]).includes(e.level)) return null;
    if (typeof e.fields !== "object" || e.fields === null) return null;
    return { timestamp: e.timestamp, level: e.level, message: clipText(e.message, MAX_LOG_MESSAGE_LENGTH), fields: boundedFields(e.fields) };
  } catch {
    return null;
  }
}
