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
    db = drizzle({ client: createClient({ url: env.LIBSQL_URL, authToken: env.LIBSQL_AUTH_TOKEN, concurrency: 100_000 }) });
    clients.set(key, db);
  }
  return db;
}
