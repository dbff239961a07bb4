// Audit records of the traffic-proxy's L7 inspection (controllers/traffic/l7/handler.ts): one per
// inspected request, kept by the sandbox's agent beside its logs (bounded, on its disk) and read
// through `GET /sandboxes/{id}/network/audit` (functions/api/network-audit.ts). Who, where, which
// rule, status and bytes: never headers, bodies, queries or secrets.
import { z } from "zod";
import type { SandboxLogEntry } from "./sandbox-logs.ts";

export interface NetworkAuditRecord {
  sandbox: string;
  host: string;
  method: string;
  /** Without the query. */
  path: string;
  /** The rules that decided (comma-separated), or the L4 rule that let the connection out. */
  rule: string;
  status: number;
  bytesOut: number;
  bytesIn: number;
  /** The MCP tools a JSON-RPC body called (comma-separated). */
  tool?: string;
  /** True when the proxy answered itself (blocked, rate limited, a denied tool) and sent nothing on. */
  refused: boolean;
}

/** One record as the API answers it. */
export const NetworkAuditEntry = z.object({
  timestamp: z.number(),
  host: z.string(),
  method: z.string(),
  path: z.string(),
  rule: z.string(),
  status: z.number(),
  bytesOut: z.number(),
  bytesIn: z.number(),
  tool: z.string().optional(),
  refused: z.boolean(),
});
export type NetworkAuditEntry = z.infer<typeof NetworkAuditEntry>;

/** The fields a record is kept as (a sandbox log entry's string fields). */
export function auditFields(r: NetworkAuditRecord): Record<string, string> {
  return { host: r.host, method: r.method, path: r.path, rule: r.rule, status: String(r.status), bytesOut: String(r.bytesOut), bytesIn: String(r.bytesIn), ...(r.tool ? { tool: r.tool } : {}), refused: String(r.refused) };
}

/** A kept entry back as a record. */
export function auditEntry(e: SandboxLogEntry): NetworkAuditEntry {
  const f = e.fields;
  const n = (k: string) => Number(f[k] ?? 0) || 0;
  return { timestamp: e.timestamp, host: f.host ?? "", method: f.method ?? "", path: f.path ?? "", rule: f.rule ?? "", status: n("status"), bytesOut: n("bytesOut"), bytesIn: n("bytesIn"), ...(f.tool ? { tool: f.tool } : {}), refused: f.refused === "true" };
}
