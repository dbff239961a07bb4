// E2B's sandbox logs routes: v1 (`start`, `limit`; `logs` lines and `logEntries`) and v2 (`cursor`,
// `limit`, `direction`, `level`, `search`; `logs` entries). Validation here, the work in the
// operation; another team's sandbox is E2B's 404. The same query reads the proxy's network audit of
// the sandbox (`GET /sandboxes/{id}/network/audit`, schema/api/network-audit.ts): v2's parameters,
// `level=warn` for the refused requests only; records with `timestamp` in ms (the next `cursor`).
import type { Context } from "hono";
import { parseLogsQueryV1, parseLogsQueryV2, type SandboxLogEntry } from "../../schema/api/sandbox-logs.ts";
import { auditEntry } from "../../schema/api/network-audit.ts";
import { sandboxNotFoundMessage } from "../../schema/errors.ts";
import { SANDBOX_ID_PATTERN } from "../../schema/protocol/ids.ts";
import { sandboxLogs } from "../../durable-objects/operations/sandbox-logs.ts";
import { ApiError } from "../api-error.ts";
import type { AppEnv } from "../env.ts";
import { accessOf } from "./stubs.ts";

function entry(e: SandboxLogEntry) {
  return { timestamp: new Date(e.timestamp).toISOString(), level: e.level, message: e.message, fields: e.fields };
}

/** One line per entry, as E2B's v1 `logs` (a JSON object of the message and fields). */
function line(e: SandboxLogEntry) {
  return { timestamp: new Date(e.timestamp).toISOString(), line: JSON.stringify({ level: e.level, msg: e.message, ...e.fields }) };
}

export function sandboxLogsRoute(version: "v1" | "v2" | "audit") {
  return async (c: Context<AppEnv>) => {
    const id = c.req.param("id") ?? "";
    const query = version === "v1" ? parseLogsQueryV1(c.req.query()) : { ...parseLogsQueryV2(c.req.query()), ...(version === "audit" ? { stream: "audit" as const } : {}) };
    if (!SANDBOX_ID_PATTERN.test(id)) throw new ApiError("sandbox_not_found", sandboxNotFoundMessage(id));
    const res = await sandboxLogs(c.env, id, accessOf(c.get("caller")), query);
    if (!res.ok) throw res.error.code === "sandbox_not_found" ? new ApiError("sandbox_not_found", sandboxNotFoundMessage(id)) : ApiError.from(res.error);
    if (version === "audit") return c.json({ records: res.entries.map(auditEntry) });
    if (version === "v2") return c.json({ logs: res.entries.map(entry) });
    return c.json({ logs: res.entries.map(line), logEntries: res.entries.map(entry) });
  };
}
