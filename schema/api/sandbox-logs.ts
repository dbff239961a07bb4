// E2B's sandbox logs (`GET /sandboxes/{id}/logs`, `GET /v2/sandboxes/{id}/logs`): the query the
// edge accepts, the entries the agent keeps and answers with, and their bounds. Entries travel over
// the agent link (schema/protocol/messages.ts) and are rendered to E2B's shapes by the edge.
import { z } from "zod";
import { ApiError } from "../errors.ts";

export const LOG_LEVELS = ["debug", "info", "warn", "error"] as const;
export const LogLevelSchema = z.enum(LOG_LEVELS);
export type SandboxLogLevel = z.infer<typeof LogLevelSchema>;

/** E2B's page size bound (the v2 spec's maximum, and its default). */
export const MAX_LOGS_LIMIT = 1000;
/** The v2 `search` parameter's bound (the spec's). */
export const MAX_LOG_SEARCH_LENGTH = 256;
/** What one entry may carry: its message, and up to this many fields of bounded keys and values. */
export const MAX_LOG_MESSAGE_LENGTH = 2048;
export const MAX_LOG_FIELDS = 16;
export const MAX_LOG_FIELD_KEY_LENGTH = 64;
export const MAX_LOG_FIELD_VALUE_LENGTH = 512;

/** What the edge asks the agent for: entries from `start` (ms) on (forward, oldest first) or up to
 * it (backward, newest first), at least `level`, containing `search`. */
export const SandboxLogsQuerySchema = z.object({
  start: z.number().int().nonnegative().optional(),
  limit: z.number().int().min(0).max(MAX_LOGS_LIMIT),
  direction: z.enum(["forward", "backward"]).default("forward"),
  level: LogLevelSchema.optional(),
  search: z.string().max(MAX_LOG_SEARCH_LENGTH).optional(),
  /** Which of the sandbox's records: its logs (default), or the proxy's audit of its inspected
   * requests (schema/api/network-audit.ts). */
  stream: z.enum(["logs", "audit"]).optional(),
});
export type SandboxLogsQuery = z.infer<typeof SandboxLogsQuerySchema>;

export const SandboxLogEntrySchema = z.object({
  /** ms since the epoch */
  timestamp: z.number().int().nonnegative(),
  level: LogLevelSchema,
  message: z.string().max(MAX_LOG_MESSAGE_LENGTH),
  fields: z
    .record(z.string().max(MAX_LOG_FIELD_KEY_LENGTH), z.string().max(MAX_LOG_FIELD_VALUE_LENGTH))
    .refine((f) => Object.keys(f).length <= MAX_LOG_FIELDS, `at most ${MAX_LOG_FIELDS} fields`),
});
export type SandboxLogEntry = z.infer<typeof SandboxLogEntrySchema>;

/** A non-negative integer query parameter, or a 400 naming it. */
function intParam(name: string, v: string | undefined, max = Number.MAX_SAFE_INTEGER): number | undefined {
  if (v === undefined || v === "") return undefined;
  if (!/^\d{1,16}$/.test(v) || Number(v) > max) throw new ApiError("bad_request", `${name} must be an integer between 0 and ${max}`);
  return Number(v);
}

/** v1: `start` (ms) and `limit` (default 1000; more than the bound is cut to it, as v1 sets none). */
export function parseLogsQueryV1(q: Record<string, string | undefined>): SandboxLogsQuery {
  const limit = intParam("limit", q.limit);
  return { start: intParam("start", q.start), limit: Math.min(limit ?? MAX_LOGS_LIMIT, MAX_LOGS_LIMIT), direction: "forward" };
}

/** v2: `cursor` (ms), `limit` (0–1000), `direction`, `level`, `search`, as E2B's spec bounds them. */
export function parseLogsQueryV2(q: Record<string, string | undefined>): SandboxLogsQuery {
  const direction = q.direction ?? "forward";
  if (direction !== "forward" && direction !== "backward") throw new ApiError("bad_request", "direction must be forward or backward");
  const level = q.level;
  if (level !== undefined && !(LOG_LEVELS as readonly string[]).includes(level)) throw new ApiError("bad_request", `level must be one of ${LOG_LEVELS.join(", ")}`);
  if (q.search !== undefined && q.search.length > MAX_LOG_SEARCH_LENGTH) throw new ApiError("bad_request", `search must be at most ${MAX_LOG_SEARCH_LENGTH} characters`);
  return {
    start: intParam("cursor", q.cursor),
    limit: intParam("limit", q.limit, MAX_LOGS_LIMIT) ?? MAX_LOGS_LIMIT,
    direction,
    ...(level ? { level: level as SandboxLogLevel } : {}),
    ...(q.search ? { search: q.search } : {}),
  };
}
