// PoolDO inside workerd with the scripted agent on the other end of the real agent link: warm
// members are created through ClusterDO, become available from observations, are claimed
// once each (also under a 200-way burst), and are rolled to a new revision.
import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import type { PoolDO } from "../../durable-objects/pool/pool-do.ts";
import { describe, expect, it } from "vitest";
import type { Claimed } from "../../durable-objects/pool/rpc.ts";
import { sandboxHandle } from "../../functions/api/stubs.ts";
import { TemplateSpec } from "../../schema/api/template.ts";
import { IntentSchema } from "../../schema/protocol/index.ts";
import { holdTurnWrites, startAgent, unique } from "./helpers.ts";
import { waitFor } from "../support/wait-for.ts";

function poolOf(name: string) {
  return env.POOL.get(env.POOL.idFromName(`team-${name}/base`));
}

function config(name: string, replicas: number, revision = "r1", spec: Record<string, unknown> = {}) {
  return { teamId: `team-${name}`, templateId: "base", revision, cluster: name, spec: TemplateSpec.parse({ replicas, ...spec }) };
}

describe("PoolDO", () => {
  it("creates replicas members through the agent and counts them available once observed ready", async () => {
    const name = unique("p-warm");
    const agent = await startAgent(name);
    const pool = poolOf(name);
    const res = await pool.configure(config(name, 5));
    expect(res).toMatchObject({ ok: true, status: { replicas: 5, creating: 5 } });
    await agent.waitUntil(() => agent.running().length === 5);
    for (const { intent } of agent.received) expect(intent).toMatchObject({ owner: { kind: "pool", id: `team-${name}/base` }, generation: 1, template: { revision: "r1" } });
    await waitFor(async () => (await pool.status()).available === 5);
  });

  it("claims a ready member with its endpoint, then replenishes", async () => {
    const name = unique("p-claim");
    const agent = await startAgent(name);
    const pool = poolOf(name);
    await pool.configure(config(name, 2));
    await waitFor(async () => (await pool.status()).available === 2);
    const c = await pool.claim();
    expect(c).toMatchObject({ ok: true, warm: true, state: "available", cluster: name, revision: "r1", generation: 1 });
    const claimed = c as Claimed;
    expect(claimed.endpoint?.runtime).toContain(claimed.sandboxId);
    expect(agent.running()).toContain(claimed.sandboxId);
    await agent.waitUntil(() => agent.running().length === 3);
    await waitFor(async () => (await pool.status()).available === 2);
    expect(await pool.status()).toMatchObject({ claimed: 1 });
  });

  it("a claimed member's observations stop reaching the pool once its sandbox group owns it", async () => {
    const name = unique("p-owner");
    const agent = await startAgent(name);
    const pool = poolOf(name);
    await pool.configure(config(name, 1));
    await waitFor(async () => (await pool.status()).available === 1);
    const c = (await pool.claim()) as Claimed;
    // The claiming side takes ownership with a newer generation; a later Failed report for it
    // must not make the pool delete it.
    const cluster = env.CLUSTER.get(env.CLUSTER.idFromName(name));
    const claimIntent = IntentSchema.parse({ sandboxId: c.sandboxId, generation: 2, owner: { kind: "sandbox" }, desired: { state: "running" }, template: c.template, issuedAt: Date.now() });
    await cluster.enqueue([claimIntent], { awaitAckMs: 2_000 });
    agent.report({ sandboxId: c.sandboxId, generation: 2, phase: "Failed", ready: false, observedAt: Date.now() });
    await waitFor(async () => (await pool.status()).available === 1);
    expect(agent.received.filter((r) => r.intent.sandboxId === c.sandboxId && r.intent.desired.state === "deleted")).toEqual([]);
  });

  it("concurrent claims answer once stored: after a restart none is handed out again and the refills are known", async () => {
    // Concurrent claims share one commit at the end of the turn; each answers after it.
    const name = unique("p-restart");
    const agent = await startAgent(name);
    await poolOf(name).configure(config(name, 8));
    await waitFor(async () => (await poolOf(name).status()).available === 8);
    const first = (await Promise.all(Array.from({ length: 6 }, () => poolOf(name).claim()))) as Claimed[];
    expect(first.every((c) => c.ok && c.warm)).toBe(true);
    await runInDurableObject(poolOf(name), (_instance: PoolDO, state) => {
      state.abort("scripted: the pool restarts");
    }).catch(() => undefined);
    // A fresh stub reaches the restarted object, which loads what the claims stored.
    expect(await poolOf(name).status()).toMatchObject({ claimed: 6 });
    await waitFor(async () => (await poolOf(name).status()).available === 8);
    const rest = (await Promise.all(Array.from({ length: 8 }, () => poolOf(name).claim()))) as Claimed[];
    const ids = [...first, ...rest].map((c) => c.sandboxId);
    expect(new Set(ids).size).toBe(14);
    expect(rest.every((c) => c.ok && c.warm)).toBe(true);
    // The 6 refills asked for before the restart were not asked for again under new ids.
    await waitFor(async () => (await poolOf(name).status()).available === 8);
    expect(agent.running()).toHaveLength(22);
  });

  it("a claim answers only once it is stored: with the pool's writes held back, a restart after it hands out no member twice", async () => {
    const name = unique("p-held");
    await startAgent(name);
    await poolOf(name).configure(config(name, 3));
    await waitFor(async () => (await poolOf(name).status()).available === 3);
    // The pool's end-of-turn writes run 300 ms late: a claim that answered before them would
    // come back unclaimed after the restart.
    await runInDurableObject(poolOf(name), (instance: PoolDO) => holdTurnWrites(instance));
    const first = (await poolOf(name).claim()) as Claimed;
    await runInDurableObject(poolOf(name), (_instance: PoolDO, state) => {
      state.abort("scripted: the pool restarts");
    }).catch(() => undefined);
    const rest = (await Promise.all(Array.from({ length: 3 }, () => poolOf(name).claim()))) as Claimed[];
    expect(rest.map((c) => c.sandboxId)).not.toContain(first.sandboxId);
  });

  it("refuses a claim before it is configured, with a typed error", async () => {
    const res = await poolOf(unique("p-none")).claim();
    expect(res).toMatchObject({ ok: false, error: { code: "template_not_found" } });
  });

  it("200 concurrent claims against 100 warm members give 200 distinct sandboxes, the rest on demand", async () => {
    const name = unique("p-burst");
    const agent = await startAgent(name);
    const pool = poolOf(name);
    await pool.configure(config(name, 100));
    await waitFor(async () => (await pool.status()).available === 100);
    const warm = new Set(agent.running());
    const results = await Promise.all(Array.from({ length: 200 }, () => pool.claim()));
    const ok = results.flatMap((r) => (r.ok ? [r] : []));
    expect(ok).toHaveLength(200);
    const ids = new Set<string>(ok.map((r) => r.sandboxId));
    expect(ids.size).toBe(200);
    // Every warm member was handed out exactly once; the other 100 were replenishments still
    // creating or freshly minted ids, none of them a warm member again.
    expect(ok.filter((r) => r.state === "available").map((r) => r.sandboxId).sort()).toEqual([...warm].sort());
    for (const r of ok.filter((x) => x.state !== "available")) expect(warm.has(r.sandboxId)).toBe(false);
    // The pool refills to 100 unclaimed members, none of them a claimed one.
    await waitFor(async () => (await pool.status()).available === 100);
    const stillPooled = agent.running().filter((id) => !ids.has(id));
    expect(stillPooled.length).toBeGreaterThanOrEqual(100);
    expect(await pool.status()).toMatchObject({ claimed: 200 - (await pool.status()).createdOnDemand });
  }, 60_000);

  it("rolls unclaimed members to a new revision within updateStrategy.maxUnavailable", async () => {
    const name = unique("p-roll");
    const agent = await startAgent(name);
    const pool = poolOf(name);
    await pool.configure(config(name, 4));
    await waitFor(async () => (await pool.status()).available === 4);
    const old = new Set(agent.running());
    await pool.configure(config(name, 4, "r2", { updateStrategy: { maxUnavailable: 1 } }));
    await waitFor(async () => (await pool.status()).updatedAvailable === 4);
    expect(agent.running().filter((id) => old.has(id))).toEqual([]);
    const creates = agent.received.filter((r) => r.intent.template?.revision === "r2");
    expect(creates).toHaveLength(4);
    expect(await pool.status()).toMatchObject({ revision: "r2", available: 4, creating: 0 });
  });

  it("scales down by deleting unclaimed members, and destroy deletes the rest", async () => {
    const name = unique("p-scale");
    const agent = await startAgent(name);
    const pool = poolOf(name);
    await pool.configure(config(name, 3));
    await agent.waitUntil(() => agent.running().length === 3);
    await pool.configure(config(name, 1));
    await agent.waitUntil(() => agent.running().length === 1);
    await pool.destroy();
    await agent.waitUntil(() => agent.running().length === 0);
    expect(await pool.status()).toMatchObject({ configured: false, available: 0, creating: 0 });
  });

  it("unclaimed members have no sandbox state (no object, no row), also once deleted unclaimed", async () => {
    const name = unique("p-rows");
    const agent = await startAgent(name);
    const pool = poolOf(name);
    await pool.configure(config(name, 3));
    await agent.waitUntil(() => agent.running().length === 3);
    const members = agent.running();
    for (const id of members) expect(await sandboxHandle(env, id).inspect()).toBeNull();
    await pool.configure(config(name, 1));
    await agent.waitUntil(() => agent.running().length === 1);
    for (const id of members) expect(await sandboxHandle(env, id).inspect()).toBeNull();
    await pool.destroy();
  });

  it("moving the template to another cluster deletes the members there and warms up on the new one", async () => {
    const name = unique("p-move");
    const other = `${name}-b`;
    const oldAgent = await startAgent(name);
    const newAgent = await startAgent(other);
    const pool = poolOf(name);
    await pool.configure(config(name, 2));
    await oldAgent.waitUntil(() => oldAgent.running().length === 2);
    await pool.configure({ ...config(name, 2), cluster: other });
    await oldAgent.waitUntil(() => oldAgent.running().length === 0);
    await newAgent.waitUntil(() => newAgent.running().length === 2);
    await waitFor(async () => (await pool.status()).available === 2);
    expect(newAgent.received.every((r) => r.intent.desired.state === "running")).toBe(true);
  });

  it("replaces a member the agent reports Failed, and one whose create it rejects", async () => {
    const name = unique("p-fail");
    let rejectOnce = true;
    const agent = await startAgent(name, {
      reject: (i) => {
        if (!rejectOnce || i.desired.state !== "running") return undefined;
        rejectOnce = false;
        return "image not found";
      },
    });
    const pool = poolOf(name);
    await pool.configure(config(name, 2));
    // One create was rejected: the pool learns it as Failed and sends a replacement.
    await waitFor(async () => (await pool.status()).available === 2);
    const creates = agent.received.filter((r) => r.intent.desired.state === "running");
    expect(creates).toHaveLength(3);
    const [victim] = agent.running();
    agent.report({ sandboxId: victim!, generation: 1, phase: "Failed", ready: false, reason: "OOMKilled", observedAt: Date.now() });
    await agent.waitUntil(() => agent.received.some((r) => r.intent.sandboxId === victim && r.intent.desired.state === "deleted"));
    await waitFor(async () => (await pool.status()).available === 2);
    expect(agent.running()).not.toContain(victim);
  });
});
