// The agent's structured logs: one line per event, JSON by default where nobody reads the output
// on a terminal (`--log-format json`: {time, level, msg, component, ...fields}, one object per
// line, for a collector), text for a person at a TTY. Ids go in fields (`sandboxId`), never into
// the message, so a collector can filter on them. Neutral ground: the agent, the drivers and the
// work queue log through here; the format is set once, by main.ts.

export type LogLevel = "debug" | "info" | "warn" | "error";
export type LogFormat = "json" | "text";
export type LogFields = Record<string, unknown>;

export interface Logger {
  debug(msg: string, fields?: LogFields): void;
  info(msg: string, fields?: LogFields): void;
  warn(msg: string, fields?: LogFields): void;
  error(msg: string, fields?: LogFields): void;
  /** The same logger with these fields on every line. */
  with(fields: LogFields): Logger;
}

interface Sink {
  /** Until set, chosen at the first line: text on a terminal. Not at load, where a process started
   * from a startup snapshot (the runtime's, controllers/runtime/snapshot.ts) would keep the
   * snapshot build's stdout's answer. */
  format?: LogFormat;
  write(line: string, level: LogLevel): void;
  now(): Date;
}

const defaultWrite = (line: string, level: LogLevel) => (level === "error" || level === "warn" ? process.stderr : process.stdout).write(`${line}\n`);

const sink: Sink = {
  write: defaultWrite,
  now: () => new Date(),
};

/** Sees every line before it is formatted (the agent keeps each sandbox's lines for E2B's logs
 * routes: controllers/agent/sandbox-logs.ts). */
export type LogTap = (level: LogLevel, component: string, msg: string, fields: LogFields, time: Date) => void;
const taps = new Set<LogTap>();

/** Adds a tap; returns its removal. */
export function tapLogs(tap: LogTap): () => void {
  taps.add(tap);
  return () => void taps.delete(tap);
}

/** Names the trace a line belongs to from its fields (the reconciler: a line about a sandbox while
 * it is brought to a traced intent), so a line written anywhere in that work carries `traceId`. */
export type LogTraceSource = (fields: LogFields) => string | undefined;
const traceSources = new Set<LogTraceSource>();

/** Adds a trace source; returns its removal. */
export function traceLogsBy(source: LogTraceSource): () => void {
  traceSources.add(source);
  return () => void traceSources.delete(source);
}

function withTraceId(fields: LogFields): LogFields {
  if (fields.traceId !== undefined) return fields;
  for (const source of traceSources) {
    const traceId = source(fields);
    if (traceId) return { ...fields, traceId };
  }
  return fields;
}

/** Sets the format (and, for tests, where lines go and the clock) for every logger. */
export function configureLogs(opts: { format?: LogFormat; write?: (line: string, level: LogLevel) => void; now?: () => Date }): void {
  if (opts.format) sink.format = opts.format;
  if (opts.write) sink.write = opts.write;
  if (opts.now) sink.now = opts.now;
}

export function parseLogFormat(v: string | undefined): LogFormat | undefined {
  if (v === undefined) return undefined;
  if (v === "json" || v === "text") return v;
  throw new Error(`--log-format must be json or text, not ${JSON.stringify(v)}`);
}

/** An Error becomes its message (and stack at debug-worthy depth is left to the message). */
function plain(v: unknown): unknown {
  return v instanceof Error ? v.message : v;
}

export function formatLine(format: LogFormat, time: Date, level: LogLevel, component: string, msg: string, fields: LogFields): string {
  if (format === "json") {
    const out: LogFields = { time: time.toISOString(), level, msg, component };
    for (const [k, v] of Object.entries(fields)) if (v !== undefined && !(k in out)) out[k] = plain(v);
    return JSON.stringify(out);
  }
  let line = `${time.toISOString()} ${level.toUpperCase().padEnd(5)} [${component}] ${msg}`;
  for (const [k, v] of Object.entries(fields)) if (v !== undefined) line += ` ${k}=${typeof v === "string" ? (/[\s"=]/.test(v) ? JSON.stringify(v) : v) : JSON.stringify(plain(v))}`;
  return line;
}

export function logger(component: string, base: LogFields = {}): Logger {
  const emit = (level: LogLevel) => (msg: string, fields: LogFields = {}) => {
    const all = withTraceId({ ...base, ...fields });
    const time = sink.now();
    for (const tap of taps) tap(level, component, msg, all, time);
    sink.format ??= process.stdout.isTTY ? "text" : "json";
    sink.write(formatLine(sink.format, time, level, component, msg, all), level);
  };
  return {
    debug: emit("debug"),
    info: emit("info"),
    warn: emit("warn"),
    error: emit("error"),
    with: (fields) => logger(component, { ...base, ...fields }),
  };
}
