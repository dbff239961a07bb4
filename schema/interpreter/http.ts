// The code interpreter's HTTP API on port 49999 (what @e2b/code-interpreter and
// e2b_code_interpreter send and read), and the lines its kernel driver writes. Plain checks, as
// schema/envd/http.ts: the runtime does not load zod.

/** Bounds on what a client sends: a cell, its env, a context's cwd. */
export const INTERPRETER_LIMITS = { codeBytes: 1 << 20, envVars: 256, envBytes: 64 << 10, cwdBytes: 4096 } as const;

export interface ExecuteRequest {
  code: string;
  contextId?: string;
  language?: string;
  envVars?: Record<string, string>;
}

export interface CreateContextRequest {
  language?: string;
  cwd?: string;
}

/** One line of POST /execute's NDJSON answer (E2B's `type` vocabulary). */
export type OutputLine =
  | { type: "stdout" | "stderr"; text: string; timestamp: number }
  | { type: "result"; is_main_result: boolean; [format: string]: unknown }
  | { type: "error"; name: string; value: string; traceback: string }
  | { type: "number_of_executions"; execution_count: number }
  | { type: "end_of_execution" };

/** Any character outside ASCII (JSON's own escapes cover the rest). */
const NON_ASCII = /[^\x00-\x7f]/;
const HEX = Buffer.from("0123456789abcdef");

/**
 * One line of /execute's answer as written: JSON with every non-ASCII character escaped, as E2B's
 * server writes its lines (Python's json.dumps, ensure_ascii). The JS SDK decodes each chunk it
 * reads with a TextDecoder of its own, so a character whose UTF-8 bytes a chunk boundary cut would
 * reach the user as two U+FFFD; in ASCII no boundary can cut one.
 *
 * The text is the tenant's (a cell can print tens of MB) and this runs on the agent's one event
 * loop, so the escape is a byte loop into one buffer: a regex replace with a callback per
 * character cost ~100x JSON.stringify. Each UTF-16 unit is escaped on its own, so a pair gives
 * `\ud83d\ude00`; JSON.stringify has already escaped lone surrogates and U+0000-U+001F, and
 * U+2028/2029 are non-ASCII, so escaped here.
 */
export function outputLineText(line: OutputLine): string {
  const json = JSON.stringify(line);
  const first = json.search(NON_ASCII);
  if (first < 0) return `${json}\n`;
  let wide = 0;
  for (let i = first; i < json.length; i++) if (json.charCodeAt(i) > 0x7f) wide++;
  const out = Buffer.allocUnsafe(json.length + 5 * wide + 1);
  let o = out.write(json.slice(0, first), 0, "latin1");
  for (let i = first; i < json.length; i++) {
    const c = json.charCodeAt(i);
    if (c <= 0x7f) {
      out[o++] = c;
      continue;
    }
    out[o++] = 0x5c; // \
    out[o++] = 0x75; // u
    out[o++] = HEX[c >> 12]!;
    out[o++] = HEX[(c >> 8) & 15]!;
    out[o++] = HEX[(c >> 4) & 15]!;
    out[o++] = HEX[c & 15]!;
  }
  out[o] = 0x0a;
  return out.toString("latin1", 0, o + 1);
}

/** What the kernel driver (inside the sandbox) writes, one JSON object a line. */
export type DriverLine = { ready: true } | { id: number; done: true } | { id: number; line: OutputLine };

type Parsed<T> = { ok: true; value: T } | { ok: false; error: string };

const object = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

function optionalString(b: Record<string, unknown>, key: string, max: number): Parsed<string | undefined> {
  const v = b[key];
  if (v === undefined || v === null) return { ok: true, value: undefined };
  if (typeof v !== "string") return { ok: false, error: `${key} must be a string` };
  if (Buffer.byteLength(v) > max) return { ok: false, error: `${key} is longer than ${max} bytes` };
  return { ok: true, value: v };
}

export function parseExecuteRequest(body: unknown): Parsed<ExecuteRequest> {
  if (!object(body)) return { ok: false, error: "body must be a JSON object" };
  if (typeof body.code !== "string") return { ok: false, error: "code must be a string" };
  if (Buffer.byteLength(body.code) > INTERPRETER_LIMITS.codeBytes) return { ok: false, error: `code is longer than ${INTERPRETER_LIMITS.codeBytes} bytes` };
  const contextId = optionalString(body, "context_id", 128);
  if (!contextId.ok) return contextId;
  const language = optionalString(body, "language", 64);
  if (!language.ok) return language;
  if (contextId.value && language.value) return { ok: false, error: "give context_id or language, not both" };
  const value: ExecuteRequest = { code: body.code, contextId: contextId.value, language: language.value };
  const env = body.env_vars;
  if (env !== undefined && env !== null) {
    if (!object(env)) return { ok: false, error: "env_vars must be an object of strings" };
    const entries = Object.entries(env);
    if (entries.length > INTERPRETER_LIMITS.envVars) return { ok: false, error: `env_vars has more than ${INTERPRETER_LIMITS.envVars} entries` };
    let bytes = 0;
    for (const [k, v] of entries) {
      if (typeof v !== "string") return { ok: false, error: `env_vars.${k} must be a string` };
      if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(k)) return { ok: false, error: `env_vars: ${JSON.stringify(k.slice(0, 64))} is not a variable name` };
      if (v.includes("\0")) return { ok: false, error: `env_vars.${k} holds NUL` };
      bytes += k.length + Buffer.byteLength(v);
    }
    if (bytes > INTERPRETER_LIMITS.envBytes) return { ok: false, error: `env_vars is larger than ${INTERPRETER_LIMITS.envBytes} bytes` };
    value.envVars = env as Record<string, string>;
  }
  return { ok: true, value };
}

export function parseCreateContextRequest(body: unknown): Parsed<CreateContextRequest> {
  if (!object(body)) return { ok: false, error: "body must be a JSON object" };
  const language = optionalString(body, "language", 64);
  if (!language.ok) return language;
  const cwd = optionalString(body, "cwd", INTERPRETER_LIMITS.cwdBytes);
  if (!cwd.ok) return cwd;
  if (cwd.value !== undefined && !cwd.value.startsWith("/")) return { ok: false, error: "cwd must be an absolute path" };
  return { ok: true, value: { language: language.value, cwd: cwd.value } };
}

const LINE_TYPES = new Set(["stdout", "stderr", "result", "error", "number_of_executions", "end_of_execution"]);

/** A driver line, or undefined for anything else (the driver runs in the sandbox: its output is
 * data, and a line that is not one of ours is dropped). */
export function parseDriverLine(text: string): DriverLine | undefined {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (!object(v)) return undefined;
  if (v.ready === true) return { ready: true };
  if (typeof v.id !== "number") return undefined;
  if (v.done === true) return { id: v.id, done: true };
  if (object(v.line) && typeof v.line.type === "string" && LINE_TYPES.has(v.line.type)) return { id: v.id, line: v.line as OutputLine };
  return undefined;
}
