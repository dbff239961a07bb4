// The edge's structured logs: one JSON object per line (time, level, msg, component, traceId when
// the line belongs to a request or traced call, then fields), as the agent's are
// (controllers/lib/log.ts), so one collector reads both. workerd hands console output to its log.
import { currentTraceId } from "./edge-tracing.ts";

type Level = "info" | "warn" | "error";

function plain(v: unknown): unknown {
  return v instanceof Error ? (v.stack ?? v.message) : v;
}

function emit(level: Level, component: string, msg: string, fields: Record<string, unknown>): void {
  const line: Record<string, unknown> = { time: new Date().toISOString(), level, msg, component };
  const traceId = currentTraceId();
  if (traceId) line.traceId = traceId;
  for (const [k, v] of Object.entries(fields)) if (v !== undefined && !(k in line)) line[k] = plain(v);
  const text = JSON.stringify(line);
  if (level === "info") console.log(text);
  else if (level === "warn") console.warn(text);
  else console.error(text);
}

export interface EdgeLogger {
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
}

export function edgeLogger(component: string): EdgeLogger {
  return {
    info: (msg, fields = {}) => emit("info", component, msg, fields),
    warn: (msg, fields = {}) => emit("warn", component, msg, fields),
    error: (msg, fields = {}) => emit("error", component, msg, fields),
  };
}
