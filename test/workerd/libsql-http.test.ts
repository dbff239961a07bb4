// The sandbox index's writes straight over libSQL's HTTP API (durable-objects/store/libsql-http.ts),
// against the real sqld the tier runs: rows land, a stale revision changes nothing, and a failed
// statement is an error for the caller (whose outbox then sends the row again), never a silent loss.
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { executeOverHttp } from "../../durable-objects/store/libsql-http.ts";
import { applyIndexBatch, getIndexRow, type IndexRow } from "../../durable-objects/store/sandbox-index.ts";
import { getDb } from "../../durable-objects/store/db.ts";
import { unique } from "./helpers.ts";

const TEAM = unique("team");

function row(id: string, rev: number, phase = "Running"): IndexRow {
  return {
    id,
    teamId: TEAM,
    keyId: "key",
    templateId: "base",
    alias: null,
    state: "running",
    phase,
    metadata: { tag: "libsql-http", "quote\"d": "a\nb" },
    startedAt: 1_700_000_000_123,
    endAt: 1_700_000_300_123,
    cpuCount: 2,
    memoryMB: 512,
    diskSizeMB: 1024,
    envdVersion: "0.2.0",
    rev,
  };
}

describe("index writes over libSQL's HTTP API", () => {
  it("upserts whole rows, and an older revision never overwrites a newer one", async () => {
    const [a, b] = [unique("sbx"), unique("sbx")];
    await applyIndexBatch(env, [{ kind: "upsert", row: row(a, 2) }, { kind: "upsert", row: row(b, 1) }]);
    expect(await getIndexRow(getDb(env), a)).toEqual(row(a, 2, "Running"));
    await applyIndexBatch(env, [{ kind: "upsert", row: { ...row(a, 1), phase: "Pending" } }, { kind: "upsert", row: { ...row(b, 2), phase: "Paused" } }]);
    expect((await getIndexRow(getDb(env), a))?.phase).toBe("Running");
    expect((await getIndexRow(getDb(env), b))?.phase).toBe("Paused");
  });

  it("a statement libSQL refuses is an error with its message", async () => {
    await expect(executeOverHttp(env, [{ sql: "INSERT INTO no_such_table (id) VALUES (?)", args: ["x"] }])).rejects.toThrow(/no_such_table/);
  });

  it("an unreachable libSQL is an error", async () => {
    await expect(executeOverHttp({ LIBSQL_URL: "http://127.0.0.1:9" }, [{ sql: "SELECT 1", args: [] }])).rejects.toThrow();
  });
});
