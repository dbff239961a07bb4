// Each sandbox's recent log entries, kept on the agent for E2B's logs routes (the edge asks over the
// link: a `logsRequest` frame). Bounded per sandbox (the oldest go first) and per entry; dropped with
// the sandbox. Fed by every agent log line that names a sandbox (`sandboxId` field: the reconciler's
// phase changes, the runtime's process starts and exits, driver errors) and by `append` (a start
// command's output: `logs.append(id, "info", line, { source: "start", stream: "stdout" })`).
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

  constructor(perSandbox = LOGS_PER_SANDBOX) {
    this.#perSandbox = perSandbox;
  }

  append(sandboxId: string, level: SandboxLogLevel, message: string, fields: Record<string, unknown> = {}, at: number = Date.now()): void {
    let list = this.#bySandbox.get(sandboxId);
    if (!list) this.#bySandbox.set(sandboxId, (list = []));
    list.push({ timestamp: at, level: (LOG_LEVELS as readonly string[]).includes(level) ? level : "info", message: clipText(message, MAX_LOG_MESSAGE_LENGTH), fields: boundedFields(fields) });
    // Drop in chunks so a full buffer does not shift the array on every line.
    if (list.length > this.#perSandbox + this.#perSandbox / 10) list.splice(0, list.length - this.#perSandbox);
  }

  drop(sandboxId: string): void {
    this.#bySandbox.delete(sandboxId);
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
