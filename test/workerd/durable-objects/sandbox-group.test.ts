// Sandbox timers (one alarm per SandboxGroupDO) and the gateway's RPCs (route, wake), with the
// scripted agent.
import { env } from "cloudflare:workers";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { getDb } from "../../../functions/store/db.ts";
import { sandboxStub } from "../../../functions/api/stubs.ts";
import { getIndexRow } from "../../../functions/store/sandbox-index.ts";
import { sandboxGroupOf } from "../../../durable-objects/sandbox/sandbox-group-do.ts";
import type { ScriptedAgent } from "../../support/scripted-agent.ts";
import { call, createTeam, expectError, expectStatus, startAgent, unique, type TestTeam } from "../helpers.ts";

let team: TestTeam;
let agent: ScriptedAgent;

beforeAll(async () => {
  team = await createTeam(unique("sdo"));
  agent = await startAgent(team.cluster);
});
afterAll(() => agent.disconnect());

function stub(id: string) {
  return sandboxStub(env, id);
}

async function create(body: Record<string, unknown> = {}): Promise<string> {
  return (await expectStatus(call("/v2/sandboxes", { key: team.key, body: { templateID: team.template, ...body } }), 201)).sandboxID;
}

/** Sets a 0 s timeout: the DO's one alarm is due now and fires on its own. */
async function expire(id: string): Promise<void> {
  const before = await stub(id).inspect();
  await expectStatus(call(`/sandboxes/${id}/timeout`, { key: team.key, body: { timeout: 0 } }), 204);
  await eventually(async () => (await stub(id).inspect())?.generation !== before?.generation);
}

async function eventually(check: () => Promise<boolean>, ms = 5_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error("condition not reached in time");
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe("timers", () => {
  it("kills at the end of life (onTimeout kill)", async () => {
    const id = await create({ timeout: 60 });
    await expire(id);
    await expectError(call(`/sandboxes/${id}`, { key: team.key }), 404);
    await agent.waitUntil(() => !agent.sandboxes.has(id));
    // The agent confirmed the deletion: the DO forgets the sandbox and its index row goes.
    await eventually(async () => (await stub(id).inspect()) === null);
    await eventually(async () => (await getIndexRow(getDb(env), id)) === undefined);
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
    await eventually(async () => (await call(`/sandboxes/${id}`, { key: team.key })).status === 404);
    await agent.waitUntil(() => !agent.sandboxes.has(id));
  });
});

describe("sandbox groups", () => {
  it("one group's alarm serves each of its sandboxes: one expiring leaves the other running, and the alarm re-arms", async () => {
    // 36 groups (first character of the id): at most 37 creates give two in the same group.
    const byGroup = new Map<string, string>();
    let pair: [string, string] | null = null;
    while (!pair) {
      const id = await create({ timeout: 600 });
      const other = byGroup.get(sandboxGroupOf(id));
      if (other) pair = [other, id];
      else byGroup.set(sandboxGroupOf(id), id);
    }
    const [first, second] = pair;
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
      await eventually(async () => movingAgent.running().length === 1);
      await eventually(async () => (await expectStatus(call(`/admin/teams/${moving.name}/templates/${moving.template}`), 200)).pool.available === 1);
      const id = (await expectStatus(call("/v2/sandboxes", { key: moving.key, body: { templateID: moving.template } }), 201)).sandboxID as string;
      await eventually(async () => (reported.get(id) ?? 0) >= 2);
      await eventually(async () => {
        const r = await stub(id).route();
        return r.ok && r.route.endpoint?.runtime === endpointOf(id, reported.get(id)!).runtime;
      });
    } finally {
      movingAgent.disconnect();
    }
  });

  it("the per-sandbox address (SANDBOX.idFromName) answers route, wake and inspect from the group", async () => {
    const id = await create();
    const address = env.SANDBOX.get(env.SANDBOX.idFromName(id));
    expect(await address.route()).toEqual(await stub(id).route());
    expect(await address.inspect()).toEqual(await stub(id).inspect());
    expect(await address.wake()).toMatchObject({ ok: true, resumed: false });
    expect(await env.SANDBOX.get(env.SANDBOX.idFromName("neverexisted")).route()).toMatchObject({ ok: false, error: { code: "sandbox_not_found" } });
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
        autoResume: false,
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
