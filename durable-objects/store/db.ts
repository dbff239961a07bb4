// The libSQL connection the Worker uses: `@libsql/client/web` over HTTP (sqld locally, Turso in
// production), one client per isolate and URL so connections are reused across requests. The
// client's own concurrency limit (default 20) is lifted: a request queued behind another
// request's query waits on I/O it does not own, which workerd cancels as a hung request.
import { createClient, type Client } from "@libsql/client/web";
import type { LibSQLDatabase } from "drizzle-orm/libsql";
import { drizzle } from "drizzle-orm/libsql/web";

/** drizzle over the client; `$client` is there for the few statements written out by hand. */
export type Db = LibSQLDatabase & { $client: Client };

const clients = new Map<string, Db>();

export function getDb(env: { LIBSQL_URL: string; LIBSQL_AUTH_TOKEN?: string }): Db {
  const key = `${env.LIBSQL_URL}\n${env.LIBSQL_AUTH_TOKEN ?? ""}`;
  let db = clients.get(key);
  if (!db) {
    const client = createClient({ url: env.LIBSQL_URL, authToken: env.LIBSQL_AUTH_TOKEN, concurrency: 100_000 });
    client.transaction = refuseInteractiveTransaction;
    db = drizzle({ client });
    clients.set(key, db);
  }
  return db;
}

/**
 * No interactive transactions (drizzle's `db.transaction()` is one): the sqld we run allows one
 * SQLite connection at a time (scripts/lib/sqld.ts says why), so a transaction holds the only
 * connection across round trips and every other request of every isolate waits behind it; one
 * that awaits another libSQL request inside it stalls until sqld's 60 s connection timeout fails
 * it. Several statements that must commit together go in one `batch` (one request, one implicit
 * transaction).
 */
async function refuseInteractiveTransaction(): Promise<never> {
  throw new Error("interactive libSQL transactions are not used here: send the statements as one batch (durable-objects/store/db.ts)");
}

/** A statement as `executeOne` takes it: positional arguments of the types the index row has. */
export interface OneStatement {
  sql: string;
  args: (string | number | boolean | null)[];
}

/**
 * One statement in one HTTP request of its own, for the create path's index upsert (ClusterDO
 * sends one per batch of creates, a few rows each under load): a Hrana pipeline (execute, close)
 * posted straight to the server when the URL is plain http(s) or libsql (TLS), as the client
 * itself would send it; through the client otherwise. The client's stream machinery around that
 * one request (its encoder, a stream object, an Error made to close it) cost ~50 µs of the
 * isolate's time per request (bench/claim-profile.ts). Throws on any failure, as the client does.
 */
export async function executeOne(env: { LIBSQL_URL: string; LIBSQL_AUTH_TOKEN?: string }, stmt: OneStatement): Promise<void> {
  const base = pipelineBase(env.LIBSQL_URL);
  if (base === null) {
    await getDb(env).$client.execute(stmt);
    return;
  }
  const args = stmt.args.map(hranaValue);
  const headers: Record<string, string> = { "content-type": "application/json" };
  if (env.LIBSQL_AUTH_TOKEN) headers.authorization = `Bearer ${env.LIBSQL_AUTH_TOKEN}`;
  const res = await fetch(`${base}/v2/pipeline`, {
    method: "POST",
    headers,
    body: JSON.stringify({ requests: [{ type: "execute", stmt: { sql: stmt.sql, args, want_rows: false } }, { type: "close" }] }),
  });
  const text = await res.text();
  if (!res.ok) throw new Error(`libSQL: HTTP ${res.status}: ${text.slice(0, 300)}`);
  const first = (JSON.parse(text) as { results?: { type: string; error?: { message?: string } }[] }).results?.[0];
  if (first?.type !== "ok") throw new Error(`libSQL: ${first?.error?.message ?? text.slice(0, 300)}`);
}

/** The HTTP base of a libSQL URL the pipeline can be posted to, or null (WebSocket, or options in
 * the URL: those go through the client, which knows them). */
export function pipelineBase(url: string): string | null {
  const m = /^(https?|libsql):\/\/([^/?#]+)\/?$/.exec(url);
  if (!m) return null;
  return `${m[1] === "libsql" ? "https" : m[1]}://${m[2]}`;
}

/** A value as Hrana's JSON carries it, as the client encodes it (numbers as floats: the column's
 * affinity stores a whole one as an integer; booleans as 1 and 0). */
function hranaValue(v: string | number | boolean | null): { type: string; value?: string | number } {
  if (v === null) return { type: "null" };
  if (typeof v === "string") return { type: "text", value: v };
  if (typeof v === "boolean") return { type: "integer", value: v ? "1" : "0" };
  if (!Number.isFinite(v)) throw new RangeError("Only finite numbers can be passed as arguments");
  return { type: "float", value: v };
}
