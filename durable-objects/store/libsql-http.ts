// Statements sent straight to libSQL's HTTP API: one Hrana-over-HTTP request (`/v2/pipeline`),
// each statement an `execute` of its own, then `close`. For the hot path's writes that need no
// transaction and read nothing back: the sandbox index's batched upserts (sandbox-index.ts),
// written once per batch of creates by ClusterDO and SandboxIndexDO. @libsql/client's `batch`
// did the same work in a stream per call (BEGIN/COMMIT steps, its own JSON writer, a promise
// limiter, and an Error built with its stack to close the stream), ~6 % of the edge's sampled CPU
// per warm create (notes s18-claim); the feature skeleton writes its index rows this way.
// A URL this cannot take as it is (ws:, a path, credentials, query parameters other than libsql's
// `tls`) goes through the client as before.
import type { InValue } from "@libsql/client/web";
import { getDb } from "./db.ts";

export interface HttpStatement {
  sql: string;
  args: readonly InValue[];
}

interface LibsqlEnv {
  LIBSQL_URL: string;
  LIBSQL_AUTH_TOKEN?: string;
}

type HranaValue = { type: "null" } | { type: "integer"; value: string } | { type: "float"; value: number } | { type: "text"; value: string };
type HranaResult = { type: "ok" } | { type: "error"; error?: { message?: string; code?: string } };

const pipelines = new Map<string, string | null>();

/** The `/v2/pipeline` URL of a libSQL URL, or null when it is one to leave to the client. */
export function pipelineUrl(libsqlUrl: string): string | null {
  let url = pipelines.get(libsqlUrl);
  if (url === undefined) {
    url = parsePipelineUrl(libsqlUrl);
    pipelines.set(libsqlUrl, url);
  }
  return url;
}

function parsePipelineUrl(raw: string): string | null {
  let u: URL;
  try {
    u = new URL(raw);
  } catch {
    return null;
  }
  if (u.username || u.password || (u.pathname !== "/" && u.pathname !== "") || u.hash) return null;
  for (const key of u.searchParams.keys()) if (key !== "tls") return null;
  const tls = u.searchParams.get("tls");
  let scheme: string;
  if (u.protocol === "libsql:") {
    if (tls !== null && tls !== "0" && tls !== "1") return null;
    scheme = tls === "0" ? "http:" : "https:";
  } else if ((u.protocol === "http:" || u.protocol === "https:") && tls === null) scheme = u.protocol;
  else return null;
  return `${scheme}//${u.host}/v2/pipeline`;
}

/**
 * Runs `statements` in one request, each committed on its own (a statement is atomic, the
 * request is not); throws when the request or any statement failed.
 */
export async function executeOverHttp(env: LibsqlEnv, statements: readonly HttpStatement[]): Promise<void> {
  if (statements.length === 0) return;
  const url = pipelineUrl(env.LIBSQL_URL);
  if (url === null) {
    await getDb(env).$client.batch(statements.map((s) => ({ sql: s.sql, args: [...s.args] })), "write");
    return;
  }
  const headers: Record<string, string> = { "content-type": "application/json" };
  if (env.LIBSQL_AUTH_TOKEN) headers.authorization = `Bearer ${env.LIBSQL_AUTH_TOKEN}`;
  const requests: object[] = statements.map((s) => ({ type: "execute", stmt: { sql: s.sql, args: s.args.map(hranaValue) } }));
  requests.push({ type: "close" });
  const res = await fetch(url, { method: "POST", headers, body: JSON.stringify({ baton: null, requests }) });
  const text = await res.text();
  if (!res.ok) throw new Error(`libSQL: HTTP ${res.status}: ${text.slice(0, 300)}`);
  let results: HranaResult[] | undefined;
  try {
    results = (JSON.parse(text) as { results?: HranaResult[] }).results;
  } catch {
    // reported below
  }
  if (!Array.isArray(results) || results.length < statements.length) throw new Error(`libSQL: an answer without a result per statement: ${text.slice(0, 300)}`);
  for (let i = 0; i < statements.length; i++) {
    const r = results[i]!;
    if (r.type !== "ok") throw new Error(`libSQL: ${r.error?.code ? `${r.error.code}: ` : ""}${r.error?.message ?? JSON.stringify(r).slice(0, 300)}`);
  }
}

/** A bound value as Hrana's JSON encoding has it (integers as decimal strings, 64-bit exact). */
function hranaValue(v: InValue): HranaValue {
  if (v === null || v === undefined) return { type: "null" };
  if (typeof v === "string") return { type: "text", value: v };
  if (typeof v === "number") {
    if (Number.isSafeInteger(v)) return { type: "integer", value: String(v) };
    if (Number.isFinite(v)) return { type: "float", value: v };
    throw new RangeError("Only finite numbers can be bound");
  }
  if (typeof v === "bigint") return { type: "integer", value: v.toString() };
  if (typeof v === "boolean") return { type: "integer", value: v ? "1" : "0" };
  if (v instanceof Date) return { type: "float", value: v.valueOf() };
  throw new TypeError(`Unsupported bound value: ${typeof v}`);
}
