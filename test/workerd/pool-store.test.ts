// The pool's SQLite rows inside a real Durable Object: a members table written before members
// remembered having been ready is extended on load, its available rows counting as once ready, and
// a member that stopped being ready keeps that across a reload (the rolling update relies on it).
// A reloaded pool reads its available members a page at a time, in their stored order: its first
// claim reads the same rows from a pool of 100 as from one of 4,000.
import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import type { Member } from "../../durable-objects/pool/machine.ts";
import type { PoolDO } from "../../durable-objects/pool/pool-do.ts";
import type { Claimed } from "../../durable-objects/pool/rpc.ts";
import { openPoolStore, type MemberWrite } from "../../durable-objects/pool/store.ts";
import { TemplateSpec } from "../../schema/api/template.ts";
import type { SandboxId } from "../../schema/protocol/index.ts";
import { unique } from "./helpers.ts";

const ALL = Number.MAX_SAFE_INTEGER;

function member(id: string, slot: number, state: Member["state"] = "available"): Member {
  return { id: id as SandboxId, state, revision: "r1", generation: 1, createdAt: 1, endpoint: state === "available" ? { runtime: `http://${id}:49983` } : null, slot };
}

/** A pool object with `n` available members m0000… stored oldest first, then restarted. */
async function storedPool(n: number, name = unique(`cold${n}`)): Promise<DurableObjectStub<PoolDO>> {
  const stub = env.POOL.get(env.POOL.idFromName(name));
  await runInDurableObject(stub, (_i: PoolDO, state) => {
    const store = openPoolStore(state.storage.sql);
    store.saveConfig({ teamId: name, templateId: "base", revision: "r1", cluster: name, spec: TemplateSpec.parse({ replicas: n }) });
    store.insertMembers(Array.from({ length: n }, (_, i) => member(`m${String(i).padStart(4, "0")}`, i)));
    store.saveQueueSizes([{ state: "available", revision: "r1", n }]);
  });
  await runInDurableObject(stub, (_i: PoolDO, state) => state.abort("scripted: the pool is evicted")).catch(() => undefined);
  // A fresh stub reaches the restarted object, which loads what was stored.
  return env.POOL.get(env.POOL.idFromName(name));
}

/** The rows SQLite read for the statements `fn` ran in this object. */
async function rowsRead(stub: DurableObjectStub<PoolDO>, fn: (pool: PoolDO) => Promise<unknown>): Promise<{ rows: number; result: unknown }> {
  return runInDurableObject(stub, async (instance: PoolDO, state) => {
    const sql = state.storage.sql;
    const real = sql.exec.bind(sql);
    const cursors: SqlStorageCursor<Record<string, SqlStorageValue>>[] = [];
    sql.exec = ((query: string, ...bindings: unknown[]) => {
      const c = real(query, ...bindings);
      cursors.push(c);
      return c;
    }) as typeof sql.exec;
    try {
      const result = await fn(instance);
      return { rows: cursors.reduce((n, c) => n + c.rowsRead, 0), result };
    } finally {
      sql.exec = real;
    }
  });
}

describe("pool store", () => {
  it("extends an older members table and keeps readyOnce across a reload", async () => {
    const stub = env.POOL.get(env.POOL.idFromName(unique("store")));
    await runInDurableObject(stub, (_i: PoolDO, state) => {
      const sql = state.storage.sql;
      sql.exec(`CREATE TABLE members (id TEXT PRIMARY KEY, state TEXT NOT NULL, revision TEXT NOT NULL, generation INTEGER NOT NULL,
        created_at INTEGER NOT NULL, endpoint TEXT, ord INTEGER NOT NULL)`);
      sql.exec("INSERT INTO members VALUES ('old-a', 'available', 'r1', 1, 1, NULL, 0), ('old-c', 'creating', 'r1', 1, 2, NULL, 1)");
      const store = openPoolStore(sql);
      const inv = store.loadInventory();
      expect(inv.creating.map((m) => [m.id, m.readyOnce])).toEqual([["old-c", false]]);
      expect(inv.available).toEqual([{ revision: "r1", size: 1 }]);
      expect(store.availablePage("r1", -1, ALL, 10).map((m) => [m.id, m.readyOnce])).toEqual([["old-a", true]]);
      // old-a stops being ready: creating again, but once ready.
      store.updateMember({ ...member("old-a", inv.nextSlot, "creating"), readyOnce: true });
      store.saveQueueSizes([{ state: "creating", revision: "r1", n: 2 }]);
      const again = openPoolStore(sql).loadInventory();
      expect(again.creating.map((m) => [m.id, m.state, m.readyOnce])).toEqual([["old-c", "creating", false], ["old-a", "creating", true]]);
      expect(again.available).toEqual([]);
    });
  });

  it("counts an older table's members once and gives equal tickets of different loads an order", async () => {
    const stub = env.POOL.get(env.POOL.idFromName(unique("store-tickets")));
    await runInDurableObject(stub, (_i: PoolDO, state) => {
      const sql = state.storage.sql;
      sql.exec(`CREATE TABLE members (id TEXT PRIMARY KEY, state TEXT NOT NULL, revision TEXT NOT NULL, generation INTEGER NOT NULL,
        created_at INTEGER NOT NULL, endpoint TEXT, ord INTEGER NOT NULL, ready_once INTEGER NOT NULL DEFAULT 0)`);
      sql.exec("INSERT INTO members VALUES ('b', 'available', 'r1', 1, 1, NULL, 7, 1), ('a', 'available', 'r1', 1, 1, NULL, 0, 1), ('c', 'available', 'r1', 1, 1, NULL, 0, 1)");
      const store = openPoolStore(sql);
      const inv = store.loadInventory();
      expect(inv.available).toEqual([{ revision: "r1", size: 3 }]);
      const page = store.availablePage("r1", -1, ALL, 10);
      expect(page.map((m) => m.id)).toEqual(["a", "c", "b"]);
      expect(new Set(page.map((m) => m.slot)).size).toBe(3);
      expect(inv.nextSlot).toBeGreaterThan(Math.max(...page.map((m) => m.slot)));
    });
  });

  it("a pool reloaded after claims, refills and observations counts its queues as they were", async () => {
    const name = unique("cold-counts");
    const evict = async () => {
      await runInDurableObject(env.POOL.get(env.POOL.idFromName(name)), (_i: PoolDO, state) => state.abort("scripted: the pool is evicted")).catch(() => undefined);
      return env.POOL.get(env.POOL.idFromName(name));
    };
    const stub = await storedPool(100, name);
    // Concurrent claims: their writes, the queue sizes among them, share the turn's commit.
    await runInDurableObject(stub, (instance: PoolDO) => Promise.all(Array.from({ length: 10 }, () => instance.claim())));
    expect(await (await evict()).status()).toMatchObject({ available: 90, creating: 10, claimed: 10 });
    await runInDurableObject(await evict(), async (instance: PoolDO) => {
      await instance.observe({ sandboxId: "m0050" as SandboxId, generation: 1, phase: "Running", ready: false, endpoint: { runtime: "http://m0050:49983" }, observedAt: Date.now() });
      await instance.observe({ sandboxId: "m0060" as SandboxId, generation: 1, phase: "Deleted", ready: false, endpoint: null, observedAt: Date.now() });
    });
    expect(await (await evict()).status()).toMatchObject({ available: 88, creating: 12 });
  });

  it("a reloaded pool's first claim reads the same rows from 4,000 members as from 100, and hands out the oldest", async () => {
    const small = await rowsRead(await storedPool(100), (p) => p.claim());
    const large = await rowsRead(await storedPool(4_000), (p) => p.claim());
    expect((small.result as Claimed).sandboxId).toBe("m0000");
    expect((large.result as Claimed).sandboxId).toBe("m0000");
    // Reading every member (the whole table, sorted) is ≥ 4,000 rows; a page is 64.
    expect(large.rows).toBe(small.rows);
    expect(large.rows).toBeLessThan(200);
  });

  it("a reloaded pool reads the members a batch of observations names, not its whole stock", async () => {
    const stub = await storedPool(4_000);
    const named = Array.from({ length: 100 }, (_, i) => `m${String(i * 40).padStart(4, "0")}`);
    // What an agent's hello reports of each: running, ready, at the endpoint stored (no change).
    const batch = named.map((id) => ({ sandboxId: id as SandboxId, generation: 1, phase: "Running" as const, ready: true, endpoint: { runtime: `http://${id}:49983` }, observedAt: Date.now() }));
    const { rows, result } = await rowsRead(stub, (p) => p.observeBatch(batch));
    expect(result).toEqual({ ok: true, applied: 100 });
    expect(rows).toBeLessThan(400);
    expect(await stub.status()).toMatchObject({ available: 4_000, creating: 0 });
  });

  it("a reloaded pool hands out its members in their stored order, then those queued after the load", async () => {
    const stub = await storedPool(150);
    const ids = await runInDurableObject(stub, async (instance: PoolDO) => {
      const out: string[] = [];
      // Past two pages, with a member of the third page observed (read by id) before its turn and
      // one of them gone meanwhile.
      await instance.observe({ sandboxId: "m0140" as SandboxId, generation: 1, phase: "Deleted", ready: false, endpoint: null, observedAt: Date.now() });
      await instance.observe({ sandboxId: "m0145" as SandboxId, generation: 1, phase: "Running", ready: true, endpoint: { runtime: "http://moved:49983" }, observedAt: Date.now() });
      for (let i = 0; i < 150; i++) out.push(((await instance.claim()) as Claimed).sandboxId);
      return out;
    });
    const stored = Array.from({ length: 150 }, (_, i) => `m${String(i).padStart(4, "0")}`).filter((id) => id !== "m0140");
    expect(ids.slice(0, 149)).toEqual(stored);
    expect(await stub.status()).toMatchObject({ available: 0, claimed: 150 });
  });

  it("writes a turn's member writes in a few statements, storing what the same writes one by one store", async () => {
    const rows = (sql: SqlStorage) => ({
      members: sql.exec("SELECT * FROM members ORDER BY id").toArray(),
      counts: sql.exec("SELECT * FROM member_counts WHERE n > 0 ORDER BY state, revision").toArray(),
    });
    const stored = async (write: (store: ReturnType<typeof openPoolStore>) => void) =>
      runInDurableObject(env.POOL.get(env.POOL.idFromName(unique("writes"))), (_i: PoolDO, state) => {
        const store = openPoolStore(state.storage.sql);
        store.loadInventory();
        store.insertMembers(Array.from({ length: 30 }, (_, i) => member(`a${String(i).padStart(2, "0")}`, i)));
        store.saveQueueSizes([{ state: "available", revision: "r1", n: 30 }, { state: "creating", revision: "r0", n: 4 }]);
        write(store);
        return rows(state.storage.sql);
      });
    // A turn of claims: each deletes its member and inserts a replacement (more than one
    // statement's parameters allow), and one member of an earlier claim is updated.
    const turn: MemberWrite[] = [];
    for (let i = 0; i < 20; i++) turn.push({ op: "delete", ids: [`a${String(i).padStart(2, "0")}`] }, { op: "insert", members: [member(`c${String(i).padStart(2, "0")}`, 100 + i, "creating")] });
    turn.push({ op: "update", member: { ...member("a25", 200), readyOnce: true } });
    // The same with a member named twice (inserted, then deleted and inserted again): in order.
    const repeated: MemberWrite[] = [...turn, { op: "delete", ids: ["c03"] }, { op: "insert", members: [member("c03", 300)] }, { op: "delete", ids: ["c04"] }];
    const sizes = [{ state: "available" as const, revision: "r1", n: 10 }, { state: "creating" as const, revision: "r1", n: 20 }];
    for (const writes of [turn, repeated]) {
      const batched = await stored((store) => (store.writeMembers(writes), store.saveQueueSizes(sizes)));
      const oneByOne = await stored((store) => (writes.forEach((w) => store.writeMembers([w])), store.saveQueueSizes(sizes)));
      expect(batched).toEqual(oneByOne);
      // The queue of revision r0 is gone from the sizes: a load no longer counts it.
      expect(batched.counts).toEqual([{ state: "available", revision: "r1", n: 10 }, { state: "creating", revision: "r1", n: 20 }]);
    }
    const last = await stored((store) => store.writeMembers(repeated));
    expect(last.members.map((m) => m.id)).toEqual([...Array.from({ length: 10 }, (_, i) => `a${20 + i}`), ...Array.from({ length: 20 }, (_, i) => `c${String(i).padStart(2, "0")}`).filter((id) => id !== "c04")]);
    expect(last.members.find((m) => m.id === "c03")).toMatchObject({ state: "available", ord: 300 });
  });
});

