// SandboxGroupDO: sandbox timers (one alarm per group), the gateway's RPCs (route, wake), and
// the delivery of intents when ClusterDO fails or stalls, with the scripted agent.
import { env } from "cloudflare:workers";
import { runInDurableObject } from "cloudflare:test";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { getDb } from "../../../durable-objects/store/db.ts";
import { getIndexRow, getKilledRow, TOMBSTONE_PHASE } from "../../../durable-objects/store/sandbox-index.ts";
import type { ClusterDO } from "../../../durable-objects/cluster/cluster-do.ts";
import type { SandboxGroupDO } from "../../../durable-objects/sandbox/sandbox-group-do.ts";
import { sandboxGroupOf, sandboxGroupStub, sandboxHandle } from "../../../durable-objects/sandbox/stub.ts";
import type { IndexOp } from "../../../durable-objects/store/sandbox-index.ts";
import type { Intent, Observation } from "../../../schema/protocol/index.ts";
import type { ScriptedAgent } from "../../support/scripted-agent.ts";
import { call, createTeam, expectError, expectStatus, holdTurnWrites, releaseTurnWrites, startAgent, unique, type TestTeam } from "../helpers.ts";
import { waitFor } from "../../support/wait-for.ts";

let team: TestTeam;
let agent: ScriptedAgent;

beforeAll(async () => {
  team = await createTeam(unique("sdo"));
  agent = await startAgent(team.cluster);
});
afterAll(() => agent.disconnect());

function stub(id: string) {
  return sandboxHandle(env, id);
}

async function create(body: Record<string, unknown> = {}): Promise<string> {
  return (await expectStatus(call("/v2/sandboxes", { key: team.key, body: { templateID: team.template, ...body } }), 201)).sandboxID;
}

/** Sets a 0 s timeout: the DO's one alarm is due now and fires on its own. */
async function expire(id: string): Promise<void> {
  const before = await stub(id).inspect();
  await expectStatus(call(`/sandboxes/${id}/timeout`, { key: team.key, body: { timeout: 0 } }), 204);
  await waitFor(async () => (await stub(id).inspect())?.generation !== before?.generation);
}

/** Creates sandboxes until two share a group (36 groups: at most 37 creates). */
async function sameGroupPair(body: Record<string, unknown> = {}): Promise<[string, string]> {
  const byGroup = new Map<string, string>();
  for (;;) {
    const id = await create(body);
    const other = byGroup.get(sandboxGroupOf(id));
    if (other) return [other, id];
    byGroup.set(sandboxGroupOf(id), id);
  }
}

/**
 * What a group's ClusterDO calls do for one sandbox's intents: "fail" (throws before reaching
 * ClusterDO), "lost" (ClusterDO takes it, the answer is lost), "die" (the group's instance is reset
 * once its row write committed, before the intent left), "taken-die" (ClusterDO takes it and
 * answers, then the instance is reset before it applied the answer), "stale" (ClusterDO answers that it
 * already holds this generation or a newer one: seq 0), a delay in ms, or undefined (as is).
 */
type Script = (intent: Intent) => "fail" | "lost" | "die" | "taken-die" | "stale" | number | undefined;

/** Puts `script` between the sandbox's group and ClusterDO (null: removes it). */
async function scriptCluster(sandboxId: string, script: Script | null): Promise<void> {
  await runInDurableObject(sandboxGroupStub(env, sandboxId), (instance: SandboxGroupDO, state) => {
    type Enqueue = (intents: Intent[], opts: unknown) => Promise<unknown>;
    const group = instance as unknown as { cluster?: (name: string) => { enqueue: Enqueue } };
    if (!script) {
      delete group.cluster;
      return;
    }
    const real = (Object.getPrototypeOf(instance) as { cluster: (name: string) => { enqueue: Enqueue } }).cluster;
    group.cluster = (name) => {
      const cluster = real.call(instance, name);
      return {
        enqueue: async (intents, opts) => {
          const what = intents[0]?.sandboxId === sandboxId ? script(intents[0]) : undefined;
          if (what === "fail") throw new Error("scripted: ClusterDO unreachable");
          if (what === "stale") return { ok: true, seqs: intents.map(() => 0), connected: true, acks: [], timedOut: false };
          if (what === "die") {
            await new Promise((r) => setTimeout(r, 50));
            state.abort("scripted: the group restarts");
          }
          if (typeof what === "number") await new Promise((r) => setTimeout(r, what));
          const res = await cluster.enqueue(intents, opts);
          if (what === "lost") throw new Error("scripted: the answer was lost");
          if (what === "taken-die") {
            await new Promise((r) => setTimeout(r, 200));
            state.abort("scripted: the group restarts");
          }
          return res;
        },
      };
    };
  });
}

type IndexWrite = (ops: IndexOp[]) => Promise<{ ok: true } | { ok: false; error: string }>;

/** Puts `write` in front of the team's ClusterDO's own index writer (which it is given); returns the undo. */
async function scriptClusterIndex(write: (ops: IndexOp[], real: IndexWrite) => ReturnType<IndexWrite>): Promise<() => Promise<void>> {
  const cluster = env.CLUSTER.get(env.CLUSTER.idFromName(team.cluster));
  type Queue = { writer: () => { write: IndexWrite } };
  let real: Queue["writer"] | undefined;
  await runInDurableObject(cluster, (instance: ClusterDO) => {
    const queue = (instance as unknown as { indexQueue: Queue }).indexQueue;
    const writer = queue.writer;
    real = writer;
    queue.writer = () => ({ write: (ops) => write(ops, (o) => writer().write(o)) });
  });
  return () =>
    runInDurableObject(cluster, (instance: ClusterDO) => {
      (instance as unknown as { indexQueue: Queue }).indexQueue.writer = real!;
    });
}

describe("timers", () => {
  it("kills at the end of life (onTimeout kill)", async () => {
    const id = await create({ timeout: 60 });
    await expire(id);
    await expectError(call(`/sandboxes/${id}`, { key: team.key }), 404);
    await agent.waitUntil(() => !agent.sandboxes.has(id));
    // The agent confirmed the deletion: the DO forgets the sandbox and its index row goes.
    await waitFor(async () => (await stub(id).inspect()) === null);
    await waitFor(async () => (await getIndexRow(getDb(env), id)) === undefined);
  });

  it("pauses at the end of life with autoPause, keeping memory unless autoPauseMemory is false", async () => {
    const frozen = await create({ timeout: 60, autoPause: true });
    const stopped = await create({ timeout: 60, autoPause: true, autoPauseMemory: false });
    await expire(frozen);
    await expire(stopped);
    await agent.waitUntil(() => agent.sandboxes.get(frozen)?.phase === "Paused" && agent.sandboxes.get(stopped)?.phase === "Paused");
    expect(agent.sandboxes.get(frozen)!.intent.desired.pauseStrategy).toBe("Freeze");
    expect(agent.sandboxes.get(stopped)!.intent.desired.pauseStrategy).toBe("Stop");
    expect((await expectStatus(call(`/sandboxes/${frozen}`, { key: team.key }), 200)).state).toBe("paused");
    expect((await stub(frozen).inspect())?.conditions).toContainEqual(expect.objectContaining({ type: "SandboxPaused", status: "True", reason: "FreezePauseSucceed" }));
  });

  it("deletes a paused sandbox when its retention ends", async () => {
    const id = await create({ timeout: 60, metadata: { "e2b.agents.kruise.io/reserve-paused-sandbox-duration": "1ms" } });
    await expectStatus(call(`/sandboxes/${id}/pause`, { key: team.key, body: {} }), 204);
    await waitFor(async () => (await call(`/sandboxes/${id}`, { key: team.key })).status === 404);
    await agent.waitUntil(() => !agent.sandboxes.has(id));
  });
});

describe("sandbox groups", () => {
  it("a create answers only once its row is written: with the group's writes held back, the 201 waits for them", async () => {
    // Every group's end-of-turn writes run 300 ms late: a create that answered before them would
    // be lost by the restart right after its 201.
    const groups = "abcdefghijklmnopqrstuvwxyz0123456789".split("");
    const hold = (on: boolean) =>
      Promise.all(groups.map((g) => runInDurableObject(sandboxGroupStub(env, g), (instance: SandboxGroupDO) => (on ? holdTurnWrites(instance) : releaseTurnWrites(instance)))));
    await hold(true);
    try {
      const id = await create({ timeout: 600 });
      await runInDurableObject(sandboxGroupStub(env, id), (_instance: SandboxGroupDO, state) => {
        state.abort("scripted: the group restarts");
      }).catch(() => undefined);
      expect((await stub(id).inspect())?.phase).toBe("Running");
    } finally {
      await hold(false);
    }
  });

  it("concurrent creates and kills answer once their rows are written: all hold after their groups restart", async () => {
    // A group's row writes of one turn share a commit; each answer waits for it. 40 creates over
    // 36 groups: some share one (and a turn).
    const restart = async (ids: string[]) => {
      for (const one of new Map(ids.map((id) => [sandboxGroupOf(id), id])).values()) {
        await runInDurableObject(sandboxGroupStub(env, one), (_instance: SandboxGroupDO, state) => {
          state.abort("scripted: the group restarts");
        }).catch(() => undefined);
      }
    };
    const ids = await Promise.all(Array.from({ length: 40 }, () => create({ timeout: 600 })));
    expect(new Set(ids).size).toBe(40);
    await restart(ids);
    for (const id of ids) expect((await stub(id).inspect())?.phase).toBe("Running");
    const killed = ids.slice(0, 20);
    await Promise.all(killed.map((id) => expectStatus(call(`/sandboxes/${id}`, { key: team.key, method: "DELETE" }), 204)));
    await restart(killed);
    for (const id of killed) await expectError(call(`/sandboxes/${id}`, { key: team.key }), 404);
    for (const id of ids.slice(20)) expect((await expectStatus(call(`/sandboxes/${id}`, { key: team.key }), 200)).state).toBe("running");
    // 40 creates, 36 restarts and 20 kills (each kill also frees its quota slot): past vitest's 5 s
    // default on this shared 2-core machine when the whole tier runs.
  }, 20_000);

  it("one group's alarm serves each of its sandboxes: one expiring leaves the other running, and the alarm re-arms", async () => {
    const [first, second] = await sameGroupPair({ timeout: 600 });
    await expire(first);
    await expectError(call(`/sandboxes/${first}`, { key: team.key }), 404);
    expect((await expectStatus(call(`/sandboxes/${second}`, { key: team.key }), 200)).state).toBe("running");
    expect((await stub(second).inspect())?.phase).toBe("Running");
    await expire(second);
    await expectError(call(`/sandboxes/${second}`, { key: team.key }), 404);
  });

  it("a claim's confirming observation still reaches the sandbox when it brings a new endpoint", async () => {
    // Every observation of this agent names a new endpoint: the one after the claim's applied ack
    // differs from what the pool knew, so it must not be taken for a mere confirmation.
    const moving = await createTeam(unique("sdo-ep"), { replicas: 1 });
    const reported = new Map<string, number>();
    const endpointOf = (id: string, k: number) => ({ runtime: `http://${id}-${k}.scripted.invalid:49983` });
    const movingAgent = await startAgent(moving.cluster, {
      endpoint: (id) => {
        reported.set(id, (reported.get(id) ?? 0) + 1);
        return endpointOf(id, reported.get(id)!);
      },
    });
    try {
      await waitFor(async () => movingAgent.running().length === 1);
      await waitFor(async () => (await expectStatus(call(`/admin/teams/${moving.name}/templates/${moving.template}`), 200)).pool.available === 1);
      const id = (await expectStatus(call("/v2/sandboxes", { key: moving.key, body: { templateID: moving.template } }), 201)).sandboxID as string;
      await waitFor(async () => (reported.get(id) ?? 0) >= 2);
      await waitFor(async () => {
        const r = await stub(id).route();
        return r.ok && r.route.endpoint?.runtime === endpointOf(id, reported.get(id)!).runtime;
      });
    } finally {
      movingAgent.disconnect();
    }
  });
});

describe("gateway RPCs", () => {
  it("route() reports where a sandbox lives and its tokens; not found once killed", async () => {
    const sbx = await expectStatus(call("/v2/sandboxes", { key: team.key, body: { templateID: team.template, network: { allowPublicTraffic: false } } }), 201);
    expect(sbx.trafficAccessToken).toMatch(/^[0-9a-f]{48}$/);
    await agent.waitUntil(() => agent.sandboxes.get(sbx.sandboxID)?.phase === "Running");
    const r = await stub(sbx.sandboxID).route();
    expect(r).toEqual({
      ok: true,
      route: {
        sandboxId: sbx.sandboxID,
        teamId: expect.any(String),
        state: "running",
        phase: "Running",
        cluster: team.cluster,
        endpoint: { runtime: `http://${sbx.sandboxID}.scripted.invalid:49983` },
        envdAccessToken: sbx.envdAccessToken,
        trafficAccessToken: sbx.trafficAccessToken,
        allowPublicTraffic: false,
        maskRequestHost: null,
        autoResume: false,
        restarting: false,
      },
    });
    await expectStatus(call(`/sandboxes/${sbx.sandboxID}`, { key: team.key, method: "DELETE" }), 204);
    expect(await stub(sbx.sandboxID).route()).toMatchObject({ ok: false, error: { code: "sandbox_not_found" } });
    expect(await stub("neverexisted").route()).toMatchObject({ ok: false, error: { code: "sandbox_not_found" } });
  });

  it("wake() resumes a paused sandbox with autoResume and returns once it runs", async () => {
    const id = await create({ autoPause: true, autoResume: { enabled: true } });
    await expectStatus(call(`/sandboxes/${id}/pause`, { key: team.key, body: {} }), 204);
    const woke = await stub(id).wake();
    expect(woke).toMatchObject({ ok: true, resumed: true, route: { state: "running", phase: "Running" } });
    expect(agent.sandboxes.get(id)?.phase).toBe("Running");
    expect(await stub(id).wake()).toMatchObject({ ok: true, resumed: false });
  });

  it("wake() refuses a paused sandbox without autoResume", async () => {
    const id = await create();
    await expectStatus(call(`/sandboxes/${id}/pause`, { key: team.key, body: {} }), 204);
    expect(await stub(id).wake()).toMatchObject({ ok: false, error: { code: "conflict" } });
  });
});

describe("intent delivery", () => {
  it("one sandbox's timer work stalled on ClusterDO does not hold another sandbox's timeout in its group", async () => {
    const [stalled, other] = await sameGroupPair({ timeout: 600 });
    await scriptCluster(stalled, (i) => (i.desired.state === "deleted" ? 8_000 : undefined));
    try {
      await expectStatus(call(`/sandboxes/${other}/timeout`, { key: team.key, body: { timeout: 1 } }), 204);
      await expectStatus(call(`/sandboxes/${stalled}/timeout`, { key: team.key, body: { timeout: 0 } }), 204);
      await waitFor(async () => (await stub(stalled).inspect())?.phase === "Terminating");
      // `other` ends 1 s later, long before the stalled kill's enqueue returns.
      await agent.waitUntil(() => !agent.sandboxes.has(other), 4_000);
      expect(agent.sandboxes.has(stalled)).toBe(true);
    } finally {
      await scriptCluster(stalled, null);
    }
    await agent.waitUntil(() => !agent.sandboxes.has(stalled), 10_000);
  }, 20_000);

  it("a kill ClusterDO did not take is retried, even when an older intent's enqueue succeeds after it", async () => {
    const id = await create({ timeout: 600 });
    await expectStatus(call(`/sandboxes/${id}/pause`, { key: team.key, body: {} }), 204);
    await agent.waitUntil(() => agent.sandboxes.get(id)?.phase === "Paused");
    // The resume (connect) is slow to reach ClusterDO; the kill sent meanwhile fails to reach it once.
    let kills = 0;
    await scriptCluster(id, (i) => (i.desired.state === "running" ? 1_000 : i.desired.state === "deleted" && kills++ === 0 ? "fail" : undefined));
    try {
      const connecting = call(`/sandboxes/${id}/connect`, { key: team.key, body: { timeout: 60 } });
      await waitFor(async () => (await stub(id).inspect())?.phase === "Resuming");
      await expectStatus(call(`/sandboxes/${id}`, { key: team.key, method: "DELETE" }), 204);
      await connecting;
      // The resume reached the agent after the kill failed: only the kill's retry stops it.
      await agent.waitUntil(() => !agent.sandboxes.has(id), 8_000);
      expect(kills).toBeGreaterThan(1);
    } finally {
      await scriptCluster(id, null);
    }
  }, 15_000);

  it("a create whose intent ClusterDO took but whose answer was lost leaves a kill that deletes the claimed member", async () => {
    const lossy = await createTeam(unique("sdo-lost"), { replicas: 1 });
    const lossyAgent = await startAgent(lossy.cluster);
    try {
      await waitFor(async () => lossyAgent.running().length === 1);
      const [member] = lossyAgent.running();
      await scriptCluster(member!, (i) => (i.desired.state === "running" ? "lost" : undefined));
      try {
        const res = await call("/v2/sandboxes", { key: lossy.key, body: { templateID: lossy.template } });
        expect(res.status).toBeGreaterThanOrEqual(500);
        await res.body?.cancel();
        // Before the fix the row was purged at once: the member ran on with nobody owning it.
        await lossyAgent.waitUntil(() => !lossyAgent.sandboxes.has(member!), 6_000);
        expect(await stub(member!).route()).toMatchObject({ ok: false, error: { code: "sandbox_not_found" } });
      } finally {
        await scriptCluster(member!, null);
      }
    } finally {
      lossyAgent.disconnect();
    }
  }, 15_000);

  it("a create whose group restarts before its intent left is listed once the new instance sends it", async () => {
    // The create's index row travels only with its intent (no outbox row of its own): the row's
    // undelivered intent stands for it, and its redelivery must write the row too.
    const dying = await createTeam(unique("sdo-die"), { replicas: 1 });
    const dyingAgent = await startAgent(dying.cluster);
    const tag = unique("die");
    try {
      await waitFor(async () => dyingAgent.running().length === 1);
      const [member] = dyingAgent.running();
      let died = 0;
      await scriptCluster(member!, (i) => (i.desired.state === "running" && died++ === 0 ? "die" : undefined));
      const metadata = { tag, "e2b.agents.kruise.io/wait-ready-timeout-seconds": "1" };
      await call("/v2/sandboxes", { key: dying.key, body: { templateID: dying.template, timeout: 600, metadata } }).then((r) => r.body?.cancel(), () => undefined);
      expect(died).toBe(1);
      await waitFor(async () => (await stub(member!).inspect())?.phase === "Running", 8_000);
      await waitFor(async () => {
        const listed = await expectStatus(call(`/v2/sandboxes?metadata=tag%3D${tag}`, { key: dying.key }), 200);
        return listed.length === 1 && listed[0].sandboxID === member;
      }, 8_000);
    } finally {
      dyingAgent.disconnect();
    }
  }, 20_000);

  it("a create whose intent ClusterDO drops as stale (seq 0) is not taken for acknowledged", async () => {
    const stale = await createTeam(unique("sdo-stale"), { replicas: 1 });
    const staleAgent = await startAgent(stale.cluster);
    try {
      await waitFor(async () => staleAgent.running().length === 1);
      const [member] = staleAgent.running();
      await scriptCluster(member!, (i) => (i.desired.state === "running" ? "stale" : undefined));
      try {
        await expectError(call("/v2/sandboxes", { key: stale.key, body: { templateID: stale.template } }), 504);
      } finally {
        await scriptCluster(member!, null);
      }
    } finally {
      staleAgent.disconnect();
    }
  });

  it("a group that restarts before applying the claim's ack gets the observation ClusterDO held back as its repeat", async () => {
    const held = await createTeam(unique("sdo-held"), { replicas: 1 });
    const heldAgent = await startAgent(held.cluster);
    try {
      await waitFor(async () => heldAgent.running().length === 1);
      const [member] = heldAgent.running();
      await scriptCluster(member!, (i) => (i.desired.state === "running" ? "taken-die" : undefined));
      const metadata = { "e2b.agents.kruise.io/wait-ready-timeout-seconds": "1" };
      await call("/v2/sandboxes", { key: held.key, body: { templateID: held.template, metadata } }).then((r) => r.body?.cancel(), () => undefined);
      // The new instance re-sends the claim's intent from its row; ClusterDO answers seq 0 and
      // routes the Running observation it had not routed.
      expect((await stub(member!).inspect())?.phase).toBe("Pending");
      await waitFor(async () => (await stub(member!).inspect())?.phase === "Running", 8_000);
    } finally {
      heldAgent.disconnect();
    }
  }, 15_000);

  it("a warm claim is Running in its stored row before the create answers: a group restart right after the 201 does not leave it Pending", async () => {
    // ClusterDO holds back the Running observation that only repeats the claim's applied ack, so
    // a row written after the answer (to spare a commit) would come back Pending, and the gateway
    // would refuse the sandbox until the claim was re-sent, or for good once ClusterDO forgot it.
    const warm = await createTeam(unique("sdo-warm"), { replicas: 2 });
    const warmAgent = await startAgent(warm.cluster);
    try {
      await warmAgent.waitUntil(() => warmAgent.running().length >= 2);
      const id = (await expectStatus(call("/v2/sandboxes", { key: warm.key, body: { templateID: warm.template, timeout: 600 } }), 201)).sandboxID;
      await runInDurableObject(sandboxGroupStub(env, id), (_instance: SandboxGroupDO, state) => {
        state.abort("scripted: the group restarts");
      }).catch(() => undefined);
      expect((await stub(id).inspect())?.phase).toBe("Running");
    } finally {
      warmAgent.disconnect();
    }
  });

  it("a group that restarts right after a create answered, before the Running row was written, finds it Running again", async () => {
    const metadata = { "e2b.agents.kruise.io/wait-ready-timeout-seconds": "1" };
    const id = await create({ timeout: 600, metadata });
    await runInDurableObject(sandboxGroupStub(env, id), (_instance: SandboxGroupDO, state) => {
      state.abort("scripted: the group restarts");
    }).catch(() => undefined);
    // The row still said Pending with the claim undelivered: the alarm re-sends it, ClusterDO
    // answers that it holds that generation and routes the Running observation it held back.
    await waitFor(async () => (await stub(id).inspect())?.phase === "Running", 8_000);
    expect((await expectStatus(call(`/sandboxes/${id}`, { key: team.key }), 200)).state).toBe("running");
  }, 15_000);

  it("an intent whose group restarts before ClusterDO took it is sent by the new instance", async () => {
    const id = await create({ timeout: 600 });
    // The pause never leaves this instance, which goes away (a restart) once its row is written.
    await scriptCluster(id, (i) => (i.desired.state === "paused" ? "die" : undefined));
    await call(`/sandboxes/${id}/pause`, { key: team.key, body: {} }).then((r) => r.body?.cancel(), () => undefined);
    expect((await stub(id).inspect())?.phase).toBe("Pausing");
    await agent.waitUntil(() => agent.sandboxes.get(id)?.phase === "Paused", 8_000);
  }, 15_000);

  it("an observation that moved the endpoint while the claim's ack was awaited voids the ack's confirmation", async () => {
    // The agent reports the re-init at a new endpoint before its (delayed) ack; it then reports
    // the member's first endpoint again, which must reach the sandbox.
    const moving = await createTeam(unique("sdo-back"), { replicas: 1 });
    const calls = new Map<string, number>();
    const endpointOf = (id: string, k: number) => ({ runtime: `http://${id}-${k}.scripted.invalid:49983` });
    const movingAgent = await startAgent(moving.cluster, {
      ackDelayMs: 100,
      endpoint: (id) => {
        calls.set(id, (calls.get(id) ?? 0) + 1);
        return endpointOf(id, calls.get(id)!);
      },
    });
    try {
      await waitFor(async () => movingAgent.running().length === 1);
      await waitFor(async () => (await expectStatus(call(`/admin/teams/${moving.name}/templates/${moving.template}`), 200)).pool.available === 1);
      const id = (await expectStatus(call("/v2/sandboxes", { key: moving.key, body: { templateID: moving.template } }), 201)).sandboxID as string;
      expect(calls.get(id)).toBe(2);
      const generation = movingAgent.sandboxes.get(id)!.generation;
      movingAgent.report({ sandboxId: id, generation, phase: "Running", ready: true, endpoint: endpointOf(id, 1), observedAt: Date.now() });
      await waitFor(async () => {
        const r = await stub(id).route();
        return r.ok && r.route.endpoint?.runtime === endpointOf(id, 1).runtime;
      });
    } finally {
      movingAgent.disconnect();
    }
  }, 10_000);
});

describe("lost calls are retried, memory is bounded", () => {
  it("an index batch that fails once is written again (the index does not keep the old end of life)", async () => {
    const id = await create({ timeout: 600 });
    let failures = 0;
    await runInDurableObject(sandboxGroupStub(env, id), (instance: SandboxGroupDO) => {
      type Write = (ops: IndexOp[]) => Promise<{ ok: true } | { ok: false; error: string }>;
      const group = instance as unknown as { indexWriter?: () => { write: Write } };
      const real = (Object.getPrototypeOf(instance) as { indexWriter: () => { write: Write } }).indexWriter.call(instance);
      group.indexWriter = () => ({
        write: async (ops) => {
          const ours = ops.some((o) => o.kind === "upsert" && o.row.id === id);
          if (ours && failures++ === 0) return { ok: false, error: "scripted: libSQL unreachable" };
          return real.write(ops);
        },
      });
    });
    try {
      await expectStatus(call(`/sandboxes/${id}/timeout`, { key: team.key, body: { timeout: 3_000 } }), 204);
      expect(failures).toBeGreaterThan(1);
      expect((await getIndexRow(getDb(env), id))?.endAt).toBe((await stub(id).inspect())?.endAt);
    } finally {
      await runInDurableObject(sandboxGroupStub(env, id), (instance: SandboxGroupDO) => {
        delete (instance as unknown as { indexWriter?: unknown }).indexWriter;
      });
    }
  });

  it("a create's index row travels with its intent: listed at once though every group's own index calls fail", async () => {
    type Write = (ops: IndexOp[]) => Promise<{ ok: true } | { ok: false; error: string }>;
    // A sandbox's group is only known from its id, which the create picks: break them all.
    const groups = [..."abcdefghijklmnopqrstuvwxyz0123456789"].map((c) => sandboxGroupStub(env, c));
    let refused = 0;
    for (const g of groups) {
      await runInDurableObject(g, (instance: SandboxGroupDO) => {
        (instance as unknown as { indexWriter?: () => { write: Write } }).indexWriter = () => ({
          write: async () => {
            refused++;
            return { ok: false, error: "scripted: the group's index path is down" };
          },
        });
      });
    }
    try {
      const id = await create({ timeout: 600, metadata: { carried: "yes" } });
      const listed = await expectStatus(call("/v2/sandboxes?metadata=carried%3Dyes", { key: team.key }), 200);
      expect(listed.map((s: { sandboxID: string }) => s.sandboxID)).toEqual([id]);
      expect(refused).toBe(0);
    } finally {
      for (const g of groups) {
        await runInDurableObject(g, (instance: SandboxGroupDO) => {
          delete (instance as unknown as { indexWriter?: unknown }).indexWriter;
        });
      }
    }
  });

  it("a create's carried index row whose answer was lost is not written again after a kill: no ghost row is listed or counted", async () => {
    const tag = unique("ghost");
    let lost = 0;
    // The first batch carrying this create's row commits, but its answer is lost.
    const restore = await scriptClusterIndex(async (ops, real) => {
      const r = await real(ops);
      if (ops.some((o) => o.kind === "upsert" && o.row.metadata?.tag === tag) && lost++ === 0) return { ok: false, error: "scripted: the answer was lost" };
      return r;
    });
    try {
      const created = call("/v2/sandboxes", { key: team.key, body: { templateID: team.template, timeout: 600, metadata: { tag } } });
      // The row is listable as soon as it commits, so the client can kill it before the create answers.
      let id: string | undefined;
      await waitFor(async () => {
        const listed = await expectStatus(call(`/v2/sandboxes?metadata=tag%3D${tag}`, { key: team.key }), 200);
        id = listed[0]?.sandboxID;
        return id !== undefined;
      });
      await expectStatus(call(`/sandboxes/${id}`, { key: team.key, method: "DELETE" }), 204);
      await created;
      await waitFor(async () => (await stub(id!).inspect()) === null, 8_000);
      // Longer than any retry of the lost batch would wait.
      await new Promise((r) => setTimeout(r, 1_500));
      expect(await getIndexRow(getDb(env), id!)).toBeUndefined();
      const page = await call(`/v2/sandboxes?metadata=tag%3D${tag}`, { key: team.key });
      expect(await page.json()).toEqual([]);
    } finally {
      await restore();
    }
  }, 20_000);

  it("a kill's index row travels with its intent: unlisted once answered though every group's own index calls fail", async () => {
    const tag = unique("killcarried");
    const id = await create({ timeout: 600, metadata: { tag } });
    const listed = async () => (await expectStatus(call(`/v2/sandboxes?metadata=tag%3D${tag}`, { key: team.key }), 200)).map((s: { sandboxID: string }) => s.sandboxID);
    expect(await listed()).toEqual([id]);
    const groups = [..."abcdefghijklmnopqrstuvwxyz0123456789"].map((c) => sandboxGroupStub(env, c));
    // The kill's own row (its tombstone) must not need them.
    let refusedKillRows = 0;
    for (const g of groups) {
      await runInDurableObject(g, (instance: SandboxGroupDO) => {
        (instance as unknown as { indexWriter?: () => { write: IndexWrite } }).indexWriter = () => ({
          write: async (ops) => {
            if (ops.some((o) => o.row.id === id && o.row.state === "killed")) refusedKillRows++;
            return { ok: false, error: "scripted: the group's index path is down" };
          },
        });
      });
    }
    try {
      await expectStatus(call(`/sandboxes/${id}`, { key: team.key, method: "DELETE" }), 204);
      expect(await listed()).toEqual([]);
      await expectError(call(`/sandboxes/${id}`, { key: team.key }), 404);
      expect(refusedKillRows).toBe(0);
    } finally {
      for (const g of groups) {
        await runInDurableObject(g, (instance: SandboxGroupDO) => {
          delete (instance as unknown as { indexWriter?: unknown }).indexWriter;
        });
      }
    }
    await waitFor(async () => (await stub(id).inspect()) === null && (await getIndexRow(getDb(env), id)) === undefined, 10_000);
    expect(await listed()).toEqual([]);
  }, 20_000);

  it("a kill ClusterDO did not take is unlisted once answered (its carried row is written before the answer)", async () => {
    const tag = unique("killfail");
    const id = await create({ timeout: 600, metadata: { tag } });
    let failed = 0;
    await scriptCluster(id, (i) => (i.desired.state === "deleted" && failed++ === 0 ? "fail" : undefined));
    try {
      await expectStatus(call(`/sandboxes/${id}`, { key: team.key, method: "DELETE" }), 204);
      expect(await expectStatus(call(`/v2/sandboxes?metadata=tag%3D${tag}`, { key: team.key }), 200)).toEqual([]);
      expect(failed).toBe(1);
      await agent.waitUntil(() => !agent.sandboxes.has(id), 10_000);
    } finally {
      await scriptCluster(id, null);
    }
  }, 20_000);

  it("a kill whose group restarts before its intent left is unlisted once the new instance sends it, before the destroy", async () => {
    // The kill's index row travels only with its intent: the row's undelivered intent stands for
    // it, and its redelivery must write the row too. The agent holds the kill, so the destroy's
    // tombstone cannot stand in for that row.
    const holding = await createTeam(unique("sdo-killdie"));
    const holdingAgent = await startAgent(holding.cluster, { hold: (i) => i.desired.state === "deleted" });
    const tag = unique("killdie");
    try {
      const id = (await expectStatus(call("/v2/sandboxes", { key: holding.key, body: { templateID: holding.template, timeout: 600, metadata: { tag } } }), 201)).sandboxID as string;
      const listed = async () => (await expectStatus(call(`/v2/sandboxes?metadata=tag%3D${tag}`, { key: holding.key }), 200)).length;
      expect(await listed()).toBe(1);
      let died = 0;
      await scriptCluster(id, (i) => (i.desired.state === "deleted" && died++ === 0 ? "die" : undefined));
      await call(`/sandboxes/${id}`, { key: holding.key, method: "DELETE" }).then((r) => r.body?.cancel(), () => undefined);
      expect(died).toBe(1);
      await holdingAgent.waitUntil(() => holdingAgent.held.has(id), 10_000);
      await waitFor(async () => (await listed()) === 0, 8_000);
      await expectError(call(`/sandboxes/${id}`, { key: holding.key }), 404);
      expect(holdingAgent.sandboxes.get(id)?.phase).toBe("Running");
      holdingAgent.release(id);
      await holdingAgent.waitUntil(() => !holdingAgent.sandboxes.has(id), 10_000);
      await waitFor(async () => (await stub(id).inspect()) === null, 8_000);
      expect(await listed()).toBe(0);
    } finally {
      holdingAgent.disconnect();
    }
  }, 25_000);

  it("a kill writes the sandbox's tombstone with its intent: gone from the index at the answer, and its destroy writes nothing more", async () => {
    // The agent holds the delete, so the answer comes before the destroy.
    const holding = await createTeam(unique("sdo-tomb"));
    const holdingAgent = await startAgent(holding.cluster, { hold: (i) => i.desired.state === "deleted" });
    try {
      const id = (await expectStatus(call("/v2/sandboxes", { key: holding.key, body: { templateID: holding.template, timeout: 600 } }), 201)).sandboxID as string;
      let groupWrites = 0;
      await runInDurableObject(sandboxGroupStub(env, id), (instance: SandboxGroupDO) => {
        const real = (Object.getPrototypeOf(instance) as { indexWriter: () => { write: IndexWrite } }).indexWriter.call(instance);
        (instance as unknown as { indexWriter?: () => { write: IndexWrite } }).indexWriter = () => ({
          write: async (ops) => {
            if (ops.some((o) => o.row.id === id)) groupWrites++;
            return real.write(ops);
          },
        });
      });
      try {
        await expectStatus(call(`/sandboxes/${id}`, { key: holding.key, method: "DELETE" }), 204);
        await holdingAgent.waitUntil(() => holdingAgent.held.has(id), 10_000);
        // Before the destroy, the index row is already the tombstone (state killed, so its team
        // still reads its logs), not a row of a sandbox being deleted.
        expect(holdingAgent.sandboxes.get(id)?.phase).toBe("Running");
        expect(await getIndexRow(getDb(env), id)).toBeUndefined();
        expect(await getKilledRow(getDb(env), id)).toMatchObject({ state: "killed", phase: TOMBSTONE_PHASE });
        holdingAgent.release(id);
        await holdingAgent.waitUntil(() => !holdingAgent.sandboxes.has(id), 10_000);
        await waitFor(async () => (await stub(id).inspect()) === null, 8_000);
        // Longer than the group's index queue would take: the destroy wrote nothing.
        await new Promise((r) => setTimeout(r, 500));
        expect(groupWrites).toBe(0);
        expect(await getKilledRow(getDb(env), id)).toMatchObject({ state: "killed", phase: TOMBSTONE_PHASE });
      } finally {
        await runInDurableObject(sandboxGroupStub(env, id), (instance: SandboxGroupDO) => {
          delete (instance as unknown as { indexWriter?: unknown }).indexWriter;
        });
      }
    } finally {
      holdingAgent.disconnect();
    }
  }, 25_000);

  it("a kill whose index writes all fail (libSQL away between the kill and the destroy) is unlisted once libSQL is back, and stays so", async () => {
    const tag = unique("killaway");
    const id = await create({ timeout: 600, metadata: { tag } });
    let down = true;
    let groupWrites = 0;
    const restore = await scriptClusterIndex(async (ops, real) => (down && ops.some((o) => o.row.id === id) ? { ok: false, error: "scripted: libSQL away" } : real(ops)));
    const group = sandboxGroupStub(env, id);
    await runInDurableObject(group, (instance: SandboxGroupDO) => {
      const own = instance as unknown as { indexWriter?: () => { write: IndexWrite } };
      const realGroup = (Object.getPrototypeOf(instance) as { indexWriter: () => { write: IndexWrite } }).indexWriter.call(instance);
      own.indexWriter = () => ({
        write: async (ops) => {
          if (down && ops.some((o) => o.row.id === id)) {
            groupWrites++;
            return { ok: false, error: "scripted: libSQL away" };
          }
          return realGroup.write(ops);
        },
      });
    });
    try {
      await expectStatus(call(`/sandboxes/${id}`, { key: team.key, method: "DELETE" }), 204);
      await agent.waitUntil(() => !agent.sandboxes.has(id), 10_000);
      await waitFor(async () => (await stub(id).inspect()) === null, 8_000);
      expect(groupWrites).toBeGreaterThan(0);
      down = false;
      await waitFor(async () => (await getIndexRow(getDb(env), id)) === undefined, 10_000);
      expect(await expectStatus(call(`/v2/sandboxes?metadata=tag%3D${tag}`, { key: team.key }), 200)).toEqual([]);
      await expectError(call(`/sandboxes/${id}`, { key: team.key }), 404);
      // Longer than any late resend would wait: nothing brings it back.
      await new Promise((r) => setTimeout(r, 1_500));
      expect(await expectStatus(call(`/v2/sandboxes?metadata=tag%3D${tag}`, { key: team.key }), 200)).toEqual([]);
      expect(await getIndexRow(getDb(env), id)).toBeUndefined();
    } finally {
      await restore();
      await runInDurableObject(group, (instance: SandboxGroupDO) => {
        delete (instance as unknown as { indexWriter?: unknown }).indexWriter;
      });
    }
  }, 30_000);

  it("observations whose group call fails once still reach the sandbox", async () => {
    const id = await create();
    const cluster = env.CLUSTER.get(env.CLUSTER.idFromName(team.cluster));
    let failures = 0;
    await runInDurableObject(cluster, (instance: ClusterDO) => {
      type Group = { observeBatch(o: Observation[]): Promise<unknown> };
      const real = (Object.getPrototypeOf(instance) as { group: (id: string) => Group }).group;
      (instance as unknown as { group?: (id: string) => Group }).group = (sandboxId) => ({
        observeBatch: async (observations) => {
          if (observations.some((o) => o.sandboxId === id) && failures++ === 0) throw new Error("scripted: group unreachable");
          return real.call(instance, sandboxId).observeBatch(observations);
        },
      });
    });
    try {
      const moved = { runtime: `http://${id}-moved.scripted.invalid:49983` };
      const generation = agent.sandboxes.get(id)!.generation;
      agent.report({ sandboxId: id, generation, phase: "Running", ready: true, endpoint: moved, observedAt: Date.now() });
      await waitFor(async () => {
        const r = await stub(id).route();
        return r.ok && r.route.endpoint?.runtime === moved.runtime;
      });
      expect(failures).toBeGreaterThan(1);
    } finally {
      await runInDurableObject(cluster, (instance: ClusterDO) => {
        delete (instance as unknown as { group?: unknown }).group;
      });
    }
  });

  it("a group keeps a bounded number of idle sandboxes in memory and reloads the others from their rows", async () => {
    const [first, second] = await sameGroupPair({ timeout: 600 });
    const slots = () => runInDurableObject(sandboxGroupStub(env, first), (i: SandboxGroupDO) => (i as unknown as { slots: { size: number } }).slots.size);
    await runInDurableObject(sandboxGroupStub(env, first), (i: SandboxGroupDO) => {
      (i as unknown as { slots: { maxSlots: number } }).slots.maxSlots = 1;
    });
    try {
      await expectStatus(call(`/sandboxes/${first}/timeout`, { key: team.key, body: { timeout: 900 } }), 204);
      const endAt = (await stub(first).inspect())?.endAt;
      expect((await stub(second).route()).ok).toBe(true);
      expect(await slots()).toBeLessThanOrEqual(1);
      expect((await stub(first).inspect())?.endAt).toBe(endAt);
      expect((await expectStatus(call(`/sandboxes/${second}`, { key: team.key }), 200)).state).toBe("running");
      expect(await slots()).toBeLessThanOrEqual(1);
    } finally {
      await runInDurableObject(sandboxGroupStub(env, first), (i: SandboxGroupDO) => {
        (i as unknown as { slots: { maxSlots: number } }).slots.maxSlots = 1_000;
      });
    }
  });
});
