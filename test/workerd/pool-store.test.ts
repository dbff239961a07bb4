// The pool's SQLite rows inside a real Durable Object: a members table written before members
// remembered having been ready is extended on load, its available rows counting as once ready, and
// a member that stopped being ready keeps that across a reload (the rolling update relies on it).
import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import type { PoolDO } from "../../durable-objects/pool/pool-do.ts";
import { openPoolStore } from "../../durable-objects/pool/store.ts";
import type { SandboxId } from "../../schema/protocol/index.ts";
import { unique } from "./helpers.ts";

describe("pool store", () => {
  it("extends an older members table and keeps readyOnce across a reload", async () => {
    const stub = env.POOL.get(env.POOL.idFromName(unique("store")));
    await runInDurableObject(stub, (_i: PoolDO, state) => {
      const sql = state.storage.sql;
      sql.exec(`CREATE TABLE members (id TEXT PRIMARY KEY, state TEXT NOT NULL, revision TEXT NOT NULL, generation INTEGER NOT NULL,
        created_at INTEGER NOT NULL, endpoint TEXT, ord INTEGER NOT NULL)`);
      sql.exec("INSERT INTO members VALUES ('old-a', 'available', 'r1', 1, 1, NULL, 0), ('old-c', 'creating', 'r1', 1, 2, NULL, 1)");
      const store = openPoolStore(sql);
      expect(store.loadMembers().map((m) => [m.id, m.readyOnce])).toEqual([["old-a", true], ["old-c", false]]);
      // old-a stops being ready: creating again, but once ready.
      store.updateMember({ id: "old-a" as SandboxId, state: "creating", revision: "r1", generation: 1, createdAt: 1, endpoint: null, readyOnce: true, slot: 2 });
      expect(openPoolStore(sql).loadMembers().map((m) => [m.id, m.state, m.readyOnce])).toEqual([["old-c", "creating", false], ["old-a", "creating", true]]);
    });
  });
});
