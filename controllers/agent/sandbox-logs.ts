// Each sandbox's recent log entries, kept on the agent for E2B's logs routes (the edge asks over the
// link: a `logsRequest` frame). Bounded per sandbox (the oldest go first) and per entry; dropped with
// the sandbox. Fed by every agent log line that names a sandbox (`sandboxId` field: the reconciler's
// phase changes, the runtime's process starts and exits, driver errors) and by `append` (a start
// command's output: `logs.append(id, "info", line, { source: "start", stream: "stdout" })`).
// With a directory, each sandbox's entries are also appended to `<dir>/<id>.jsonl` and read back
// when the agent starts, so they survive its restart: the file is rewritten from memory once it
// holds twice the bound, so it stays under 2 × LOGS_PER_SANDBOX lines (each line is bounded).
import { appendFileSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
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

const RANK: Record<SandboxLogLevel, number> = { debug: 0, info: 1, warn: 2, error: 3 };

export class SandboxLogs {
  readonly #bySandbox = new Map<string, SandboxLogEntry[]>();
  readonly #perSandbox: number;
  readonly #dir: string | undefined;
  /** Lines in each sandbox's file (with a directory). */
  readonly #fileLines = new Map<string, number>();

  constructor(perSandbox = LOGS_PER_SANDBOX, dir?: string) {
    this.#perSandbox = perSandbox;
    this.#dir = dir;
    if (dir) this.#load(dir);
  }

  append(sandboxId: string, level: SandboxLogLevel, message: string, fields: Record<string, unknown> = {}, at: number = Date.now()): void {
    let list = this.#bySandbox.get(sandboxId);
    if (!list) this.#bySandbox.set(sandboxId, (list = []));
    const entry: SandboxLogEntry = { timestamp: at, level: (LOG_LEVELS as readonly string[]).includes(level) ? level : "info", message: clipText(message, MAX_LOG_MESSAGE_LENGTH), fields: boundedFields(fields) };
    list.push(entry);
    // Drop in chunks so a full buffer does not shift the array on every line.
    if (list.length > this.#perSandbox + this.#perSandbox / 10) list.splice(0, list.length - this.#perSandbox);
    this.#persist(sandboxId, entry, list);
  }

  drop(sandboxId: string): void {
    this.#bySandbox.delete(sandboxId);
    this.#fileLines.delete(sandboxId);
    const file = this.#fileOf(sandboxId);
    if (file) rmSync(file, { force: true });
  }

  /** Drops the logs of every sandbox not in `ids` (deleted while the agent was down). */
  retainOnly(ids: Iterable<string>): void {
    const keep = new Set(ids);
    for (const id of [...this.#bySandbox.keys()]) if (!keep.has(id)) this.drop(id);
  }

  /** The sandbox's file; none for an id that is not a sandbox id (never a path of its own). */
  #fileOf(sandboxId: string): string | undefined {
    return this.#dir && SANDBOX_ID_PATTERN.test(sandboxId) ? join(this.#dir, `${sandboxId}.jsonl`) : undefined;
  }

  #persist(sandboxId: string, entry: SandboxLogEntry, list: SandboxLogEntry[]): void {
    const file = this.#fileOf(sandboxId);
    if (!file) return;
    try {
      const lines = (this.#fileLines.get(sandboxId) ?? 0) + 1;
      if (lines > 2 * this.#perSandbox) {
        const kept = list.slice(-this.#perSandbox);
        writeFileSync(file, kept.map((e) => JSON.stringify(e) + "\n").join(""));
        this.#fileLines.set(sandboxId, kept.length);
      } else {
        appendFileSync(file, JSON.stringify(entry) + "\n");
        this.#fileLines.set(sandboxId, lines);
      }
    } catch {
      // A full or read-only disk loses the copy, not the entry: memory still has it.
    }
  }

  #load(dir: string): void {
    mkdirSync(dir, { recursive: true });
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
