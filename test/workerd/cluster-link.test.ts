// The agent link end to end inside workerd: the Worker's route, ClusterDO's hibernatable
// WebSocket session, the outbox (seq, ack, redelivery) and the inventory diff, driven by the
// scripted agent over a real WebSocket.
import { runInDurableObject } from "cloudflare:test";
import { env, exports } from "cloudflare:workers";
import type { ClusterDO } from "../../durable-objects/cluster/cluster-do.ts";
import { describe, expect, it } from "vitest";
import { IntentSchema, PING_FRAME, PONG_FRAME, type Intent } from "../../schema/protocol/index.ts";
import { clusterTokenFor } from "../../schema/protocol/cluster-token.ts";
import { fetchTransport, ScriptedAgent } from "../support/scripted-agent.ts";
import { holdTurnWrites } from "./helpers.ts";
import { waitFor } from "../support/wait-for.ts";

const TOKEN = "test-cluster-token";
const link = (cluster: string, token = TOKEN) => fetchTransport((url, init) => exports.default.fetch(url, init), token, cluster);
const cluster = (name: string) => env.CLUSTER.get(env.CLUSTER.idFromName(name));

function intent(id: string, generation: number, state: "running" | "deleted" = "running"): Intent {
  return IntentSchema.parse({
    sandboxId: id,
    generation,
    owner: { kind: "sandbox" },
    desired: { state },
    template: { id: "base", revision: "r1" },
    issuedAt: Date.now(),
  });
}

describe("agent link route", () => {
  it("refuses a wrong cluster token with a 401 JSON error", async () => {
    const res = await exports.default.fetch("http://edge.test/agent/v1/connect", {
      headers: { Upgrade: "websocket", Authorization: "Bearer nope" },
    });
    expect(res.status).toBe(401);
    expect(await res.json()).toMatchObject({ code: 401 });
  });

  it("refuses a missing token and a request that is not an upgrade", async () => {
    const none = await exports.default.fetch("http://edge.test/agent/v1/connect", { headers: { Upgrade: "websocket" } });
    expect(none.status).toBe(401);
    const plain = await exports.default.fetch("http://edge.test/agent/v1/connect", { headers: { Authorization: `Bearer ${await clusterTokenFor(TOKEN, "local")}` } });
    expect(plain.status).toBe(426);
  });

  it("a cluster's token links only as that cluster: another cluster's token and the edge's root are refused, and the real agent keeps its session", async () => {
    const real = new ScriptedAgent({ agentId: "real" });
    await real.connect(link("c-victim"));
    const asVictim = (token: string) => exports.default.fetch("http://edge.test/agent/v1/connect?cluster=c-victim", { headers: { Upgrade: "websocket", Authorization: `Bearer ${token}` } });
    for (const [token, message] of [[await clusterTokenFor(TOKEN, "c-thief"), "invalid cluster token"], [TOKEN, expect.stringContaining("npm run cluster-token")]] as const) {
      const res = await asVictim(token);
      expect(res.status).toBe(401);
      // An agent still holding the edge's own token (every cluster did before) is told what to hold.
      expect(await res.json()).toMatchObject({ code: 401, message });
    }
    expect(await cluster("c-victim").status()).toMatchObject({ connected: true, agentId: "real" });
    expect(real.closed).toBeNull();
    // The cluster's own token is taken (its session replaces the first, as a redial does).
    const res = await asVictim(await clusterTokenFor(TOKEN, "c-victim"));
    expect(res.status).toBe(101);
    res.webSocket?.accept();
    res.webSocket?.close(1000, "done");
  });

  it("rejects an agent speaking another protocol version", async () => {
    const agent = new ScriptedAgent({ protocol: 99 });
    await expect(agent.connect(link("c-version"))).rejects.toThrow(/4400|protocol_version/);
    expect(agent.errors.join()).toMatch(/protocol_version/);
  });

  it("closes the session when a frame arrives before hello", async () => {
    const ws = await link("c-order")();
    const closed = new Promise<number | undefined>((r) => ws.addEventListener("close", (ev) => r(ev.code)));
    ws.send(JSON.stringify({ type: "heartbeat", at: Date.now(), sandboxes: 0 }));
    expect(await closed).toBe(4400);
  });
});

describe("ClusterDO session", () => {
  it("answers the raw ping with pong and shows the agent in status", async () => {
    const ws = await link("c-ping")();
    const frames: string[] = [];
    ws.addEventListener("message", (ev) => frames.push(String(ev.data)));
    ws.send(JSON.stringify({ type: "hello", protocol: 1, agentId: "pinger", driver: "local", isolation: "bwrap+cgroup", ingress: { url: "http://127.0.0.1:7777" }, inventory: [] }));
    ws.send(PING_FRAME);
    const end = Date.now() + 2_000;
    while (!frames.includes(PONG_FRAME) && Date.now() < end) await new Promise((r) => setTimeout(r, 5));
    expect(frames).toContain(PONG_FRAME);
    expect(JSON.parse(frames.find((f) => f.includes("welcome"))!)).toMatchObject({ type: "welcome", heartbeatIntervalMs: expect.any(Number) });
    expect(await cluster("c-ping").status()).toMatchObject({
      cluster: "c-ping",
      connected: true,
      agentId: "pinger",
      driver: "local",
      isolation: "bwrap+cgroup",
      ingressUrl: "http://127.0.0.1:7777",
    });
    ws.close(1000, "done");
  });

  it("a second connection replaces the first, which is closed", async () => {
    const first = new ScriptedAgent({ agentId: "first" });
    await first.connect(link("c-replace"));
    const second = new ScriptedAgent({ agentId: "second" });
    await second.connect(link("c-replace"));
    await first.waitUntil(() => first.closed !== null);
    expect(first.closed?.code).toBe(4000);
    await cluster("c-replace").enqueue([intent("sbxrepl", 1)], { awaitAckMs: 2_000 });
    await second.waitUntil(() => second.running().includes("sbxrepl"));
    expect(first.received).toEqual([]);
  });
});

describe("ClusterDO liveness", () => {
  it("closes a session silent for three heartbeat intervals (4408), not a recent one", async () => {
    const agent = new ScriptedAgent({ ping: false });
    const welcome = await agent.connect(link("c-silent"));
    const c = cluster("c-silent");
    expect(await c.sweep(Date.now() + welcome.heartbeatIntervalMs)).toEqual({ ok: true, closed: false });
    expect(await c.sweep(Date.now() + 4 * welcome.heartbeatIntervalMs)).toEqual({ ok: true, closed: true });
    await agent.waitUntil(() => agent.closed !== null);
    expect(agent.closed?.code).toBe(4408);
    expect(agent.errors.join()).toMatch(/heartbeat_timeout/);
    expect((await c.status()).connected).toBe(false);
    // The agent redials and gets its session back.
    await agent.connect(link("c-silent"));
    expect((await c.status()).connected).toBe(true);
  });
});

describe("ClusterDO outbox", () => {
  it("delivers an intent and reports the agent's ack to an awaiting enqueue", async () => {
    const agent = new ScriptedAgent();
    const welcome = await agent.connect(link("c-ack"));
    expect(welcome).toMatchObject({ type: "welcome", protocol: 1, cluster: "c-ack" });
    const res = await cluster("c-ack").enqueue([intent("sbxack1", 1)], { awaitAckMs: 2_000 });
    expect(res).toMatchObject({ ok: true, connected: true, timedOut: false });
    if (!res.ok) return;
    expect(res.acks).toEqual([expect.objectContaining({ sandboxId: "sbxack1", generation: 1, seq: res.seqs[0] })]);
    await agent.waitUntil(() => agent.running().includes("sbxack1"));
    expect((await cluster("c-ack").status()).pending).toBe(0);
  });

  it("drops an intent that is not newer than the sandbox's current generation", async () => {
    const agent = new ScriptedAgent();
    await agent.connect(link("c-idem"));
    const first = await cluster("c-idem").enqueue([intent("sbxidem", 2)], { awaitAckMs: 2_000 });
    const again = await cluster("c-idem").enqueue([intent("sbxidem", 2), intent("sbxidem", 1)]);
    expect(first.ok && first.seqs[0]).toBeGreaterThan(0);
    expect(again.ok && again.seqs).toEqual([0, 0]);
    expect(agent.received.filter((r) => r.intent.sandboxId === "sbxidem")).toHaveLength(1);
  });

  it("keeps intents while no agent is connected and redelivers them on hello, in seq order", async () => {
    const c = cluster("c-redeliver");
    const queued = await c.enqueue([intent("sbxred1", 1), intent("sbxred2", 1)]);
    expect(queued).toMatchObject({ ok: true, connected: false });
    const agent = new ScriptedAgent();
    const welcome = await agent.connect(link("c-redeliver"));
    expect(welcome.resync.redelivered).toBe(2);
    await agent.waitUntil(() => agent.running().length === 2);
    expect(agent.received.map((r) => r.intent.sandboxId)).toEqual(["sbxred1", "sbxred2"]);
    await agent.waitUntil(() => agent.received.length === 2);
    // Acked: a reconnect does not deliver them again.
    await waitFor(async () => (await c.status()).pending === 0);
    agent.disconnect();
    const again = new ScriptedAgent({ inventory: [] });
    await waitFor(async () => !(await c.status()).connected);
    const w2 = await again.connect(link("c-redeliver"));
    expect(w2.resync.redelivered).toBe(0);
    // ...but the agent lost both sandboxes (empty inventory), so they are recreated.
    expect(w2.resync.recreated).toBe(2);
    await again.waitUntil(() => again.running().length === 2);
  });

  it("answers concurrent enqueues once their intents are stored, in order: all survive a restart", async () => {
    // Concurrent enqueues share one outbox write at the end of the turn; each answers after it.
    const c = cluster("c-batched");
    const answers = await Promise.all([
      c.enqueue([intent("sbxbat1", 1)]),
      c.enqueue([intent("sbxbat1", 2)]),
      c.enqueue([intent("sbxbat2", 1), intent("sbxbat3", 1)]),
      c.enqueue([intent("sbxbat3", 1)]),
    ]);
    expect(answers.map((a) => a.ok && a.seqs.every((s) => s > 0))).toEqual([true, true, true, false]);
    await runInDurableObject(c, (_instance: ClusterDO, state) => {
      state.abort("scripted: the cluster object restarts");
    }).catch(() => undefined);
    // A stub of the aborted instance stays broken: a fresh one reaches the restarted object.
    expect((await cluster("c-batched").status()).pending).toBe(3);
    const agent = new ScriptedAgent();
    const welcome = await agent.connect(link("c-batched"));
    expect(welcome.resync.redelivered).toBe(3);
    await agent.waitUntil(() => agent.received.length === 3);
    // The superseded generation 1 of sbxbat1 is not delivered; the rest come in seq order.
    expect(agent.received.map((r) => `${r.intent.sandboxId}@${r.intent.generation}`)).toEqual(["sbxbat1@2", "sbxbat2@1", "sbxbat3@1"]);
  });

  it("an enqueue answers only once its intent is stored: with the writes held back, it survives a restart", async () => {
    const c = cluster("c-held");
    // ClusterDO's end-of-turn writes run 300 ms late: an enqueue that answered before them would
    // be lost by the restart right after its answer.
    await runInDurableObject(c, (instance: ClusterDO) => holdTurnWrites(instance));
    expect(await c.enqueue([intent("sbxheld", 1)])).toMatchObject({ ok: true, seqs: [1] });
    await runInDurableObject(c, (_instance: ClusterDO, state) => {
      state.abort("scripted: the cluster object restarts");
    }).catch(() => undefined);
    expect(await cluster("c-held").status()).toMatchObject({ pending: 1, sandboxes: 1 });
  });

  it("unacked intents survive a dropped connection and arrive after reconnect", async () => {
    const c = cluster("c-unacked");
    const agent = new ScriptedAgent({ ackDelayMs: 60_000, readyDelayMs: 60_000, observe: false });
    await agent.connect(link("c-unacked"));
    await c.enqueue([intent("sbxunack", 1)]);
    await agent.waitUntil(() => agent.received.length === 1);
    agent.disconnect();
    await waitFor(async () => !(await c.status()).connected);
    const next = new ScriptedAgent();
    const welcome = await next.connect(link("c-unacked"));
    expect(welcome.resync.redelivered).toBe(1);
    await next.waitUntil(() => next.running().includes("sbxunack"));
  });

  it("after a restart redelivers exactly the unacked intents of a run acked with holes, and numbers on after it", async () => {
    const c = cluster("c-holes");
    // s3 and s5 are held unacked; s1, s2, s4, s6 are acked (with holes below the last ack).
    const held = new Set(["sbxhole3", "sbxhole5"]);
    const agent = new ScriptedAgent({ hold: (i) => held.has(i.sandboxId), holdAcks: true });
    await agent.connect(link("c-holes"));
    const ids = [1, 2, 3, 4, 5, 6].map((n) => `sbxhole${n}`);
    const queued = await c.enqueue(ids.map((id) => intent(id, 1)));
    expect(queued.ok && queued.seqs).toEqual([1, 2, 3, 4, 5, 6]);
    await waitFor(async () => (await c.status()).pending === 2);
    // The acked rows go in a deferred batch: once it has run, only the held ones are stored.
    const stored = await waitFor(() =>
      runInDurableObject(c, (_i: ClusterDO, state) => {
        const n = state.storage.sql.exec<{ n: number }>("SELECT count(*) AS n FROM outbox").one().n;
        return n < 6 && { n };
      }),
    );
    expect(stored.n).toBe(2);
    agent.disconnect();
    await runInDurableObject(c, (_instance: ClusterDO, state) => {
      state.abort("scripted: the cluster object restarts");
    }).catch(() => undefined);
    const again = cluster("c-holes");
    expect((await again.status()).pending).toBe(2);
    const next = new ScriptedAgent({ inventory: ids.filter((id) => !held.has(id)).map((id) => ({ sandboxId: id, generation: 1, phase: "Running", ready: true, endpoint: null, observedAt: Date.now() })) });
    const welcome = await next.connect(link("c-holes"));
    expect(welcome.resync.redelivered).toBe(2);
    await next.waitUntil(() => next.received.length === 2);
    expect(next.received.map((r) => `${r.seq}:${r.intent.sandboxId}`)).toEqual(["3:sbxhole3", "5:sbxhole5"]);
    await waitFor(async () => (await again.status()).pending === 0);
    // Seqs are never reused, even of rows deleted before the restart.
    const after = await again.enqueue([intent("sbxhole7", 1)]);
    expect(after.ok && after.seqs).toEqual([7]);
  });

  it("reads the observations an ack frame carries: a destroy acked and reported in one frame is forgotten", async () => {
    const c = cluster("c-merged");
    const agent = new ScriptedAgent();
    const welcome = await agent.connect(link("c-merged"));
    expect(welcome.features).toContain("ackObservations");
    await c.enqueue([intent("sbxmerge", 1)], { awaitAckMs: 2_000 });
    await c.enqueue([intent("sbxmerge", 2, "deleted")]);
    // The Deleted observation came only inside the delete's ack frame: read, the sandbox is gone.
    await waitFor(async () => (await c.status()).sandboxes === 0);
    expect(await c.status()).toMatchObject({ sandboxes: 0, pending: 0 });
    expect(agent.sent).toEqual(["ack", "ack"]);
  });

  it("an older agent's separate ack and observations frames still work", async () => {
    const c = cluster("c-unmerged");
    const agent = new ScriptedAgent({ ackObservations: false });
    await agent.connect(link("c-unmerged"));
    await c.enqueue([intent("sbxunmerged", 1)], { awaitAckMs: 2_000 });
    await c.enqueue([intent("sbxunmerged", 2, "deleted")]);
    await waitFor(async () => (await c.status()).sandboxes === 0);
    expect(agent.sent).toEqual(["ack", "observations", "ack", "observations"]);
  });

  it("an ack frame lost with its observations when the link drops: redelivered, acked stale, and the sandbox converges", async () => {
    const c = cluster("c-merged-lost");
    const agent = new ScriptedAgent({ loseNextAck: true });
    await agent.connect(link("c-merged-lost"));
    // The create's ack and Running observation die with the link.
    await c.enqueue([intent("sbxlost", 1)]);
    await agent.waitUntil(() => agent.running().includes("sbxlost"));
    await waitFor(async () => !(await c.status()).connected);
    expect((await c.status()).pending).toBe(1);
    const first = agent.received.length;
    const welcome = await agent.connect(link("c-merged-lost"));
    expect(welcome.resync.redelivered).toBe(1);
    await waitFor(async () => (await c.status()).pending === 0);
    expect(agent.received.slice(first).map((r) => r.intent.generation)).toEqual([1]);
    // The destroy's ack and Deleted observation die with the link too: the next hello's inventory
    // lacks the sandbox, which was to be deleted, so it is forgotten all the same.
    agent.loseNextAck = true;
    await c.enqueue([intent("sbxlost", 2, "deleted")]);
    await agent.waitUntil(() => !agent.sandboxes.has("sbxlost"));
    await waitFor(async () => !(await c.status()).connected);
    expect((await c.status()).sandboxes).toBe(1);
    await agent.connect(link("c-merged-lost"));
    await waitFor(async () => (await c.status()).sandboxes === 0 && (await c.status()).pending === 0);
  });

  it("deletes orphans the agent reports and forgets sandboxes that should be gone", async () => {
    const c = cluster("c-diff");
    const setup = new ScriptedAgent();
    await setup.connect(link("c-diff"));
    await c.enqueue([intent("sbxkeep", 1)], { awaitAckMs: 2_000 });
    await c.enqueue([intent("sbxgone", 1)], { awaitAckMs: 2_000 });
    setup.disconnect();
    await waitFor(async () => !(await c.status()).connected);
    await c.enqueue([intent("sbxgone", 2, "deleted")]);
    const now = Date.now();
    const agent = new ScriptedAgent({
      inventory: [
        { sandboxId: "sbxkeep", generation: 1, phase: "Running", ready: true, observedAt: now },
        { sandboxId: "sbxorphan", generation: 3, phase: "Running", ready: true, observedAt: now },
      ],
    });
    const welcome = await agent.connect(link("c-diff"));
    expect(welcome.resync).toMatchObject({ orphans: 1 });
    await agent.waitUntil(() => agent.received.some((r) => r.intent.sandboxId === "sbxorphan"));
    const orphan = agent.received.find((r) => r.intent.sandboxId === "sbxorphan")!.intent;
    expect(orphan).toMatchObject({ generation: 4, desired: { state: "deleted" }, owner: { kind: "cluster" } });
    // sbxgone was to be deleted and is not in the inventory: done, nothing sent for it.
    expect(agent.received.some((r) => r.intent.sandboxId === "sbxgone")).toBe(false);
    await waitFor(async () => (await c.status()).sandboxes === 1);
  });

  it("diffs an inventory spread over the hello and inventory frames as one (an agent with more sandboxes than a frame holds)", async () => {
    const c = cluster("c-parts");
    const setup = new ScriptedAgent();
    await setup.connect(link("c-parts"));
    for (const id of ["sbxparta", "sbxpartb", "sbxpartc"]) await c.enqueue([intent(id, 1)], { awaitAckMs: 2_000 });
    setup.disconnect();
    await waitFor(async () => !(await c.status()).connected);
    const now = Date.now();
    const running = (sandboxId: string, generation = 1) => ({ sandboxId, generation, phase: "Running" as const, ready: true, observedAt: now });
    // One sandbox per frame: the hello has sbxparta, the orphan and the other two come after it.
    const agent = new ScriptedAgent({ inventoryPart: 1, inventory: [running("sbxparta"), running("sbxpartorphan", 2), running("sbxpartb"), running("sbxpartc")] });
    const welcome = await agent.connect(link("c-parts"));
    expect(agent.sent.filter((t) => t === "inventory")).toHaveLength(3);
    // Those of the later frames count as there (none recreated), and so does their orphan.
    expect(welcome.resync).toMatchObject({ orphans: 1, recreated: 0 });
    await agent.waitUntil(() => agent.received.some((r) => r.intent.sandboxId === "sbxpartorphan"));
    expect(agent.received.filter((r) => r.intent.sandboxId !== "sbxpartorphan")).toEqual([]);
    expect(agent.closed).toBeNull();
  });

  it("closes the session on an inventory frame no hello announced", async () => {
    const ws = await link("c-parts-order")();
    const closed = new Promise<number | undefined>((r) => ws.addEventListener("close", (ev) => r(ev.code)));
    ws.send(JSON.stringify({ type: "inventory", items: [], more: false }));
    expect(await closed).toBe(4400);
  });
});

