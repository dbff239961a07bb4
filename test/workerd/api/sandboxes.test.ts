// create → claim → ready → kill end to end: routes, PoolDO, SandboxGroupDO and ClusterDO inside workerd,
// a scripted agent on the other end of the real WebSocket protocol, the index in a real sqld.
import { env } from "cloudflare:workers";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sandboxHandle } from "../../../durable-objects/sandbox/stub.ts";
import type { ScriptedAgent } from "../../support/scripted-agent.ts";
import { call, createTeam, expectError, expectStatus, secondKey, startAgent, unique, type TestTeam } from "../helpers.ts";

let team: TestTeam;
let agent: ScriptedAgent;

beforeAll(async () => {
  team = await createTeam(unique("sbx"), { replicas: 2 });
  agent = await startAgent(team.cluster);
  await agent.waitUntil(() => agent.running().length >= 2);
});
afterAll(() => agent.disconnect());

async function create(body: Record<string, unknown> = {}, key = team.key, path = "/v2/sandboxes") {
  return expectStatus(call(path, { key, body: { templateID: team.template, ...body } }), 201);
}

describe("create", () => {
  it("claims a warm member and answers the exact Sandbox shape", async () => {
    const sbx = await create({ metadata: { app: "create-shape" }, envVars: { FOO: "bar" } });
    expect(Object.keys(sbx).sort()).toEqual(["clientID", "domain", "envdAccessToken", "envdVersion", "sandboxID", "templateID", "trafficAccessToken"]);
    expect(sbx).toMatchObject({ templateID: team.template, envdVersion: "0.6.4", trafficAccessToken: null, domain: null });
    expect(sbx.sandboxID).toMatch(/^[a-z0-9]{20}$/);
    expect(sbx.envdAccessToken).toMatch(/^[0-9a-f]{48}$/);
    // The agent re-initialised the claimed member with this claim's token and env vars.
    const intent = agent.sandboxes.get(sbx.sandboxID)!.intent;
    expect(intent).toMatchObject({ owner: { kind: "sandbox" }, envdAccessToken: sbx.envdAccessToken, envVars: { FOO: "bar" }, desired: { state: "running" } });
  });

  it("creates on demand when the pool is empty, v1 route included", async () => {
    const ids = new Set<string>();
    for (let i = 0; i < 4; i++) ids.add((await create({ timeout: 60 }, team.key, "/sandboxes")).sandboxID);
    expect(ids.size).toBe(4);
  });

  it("returns detail with state, timestamps, metadata and lifecycle", async () => {
    const before = Date.now();
    const sbx = await create({ timeout: 120, metadata: { who: "detail" }, autoPause: true, autoResume: { enabled: true } });
    const info = await expectStatus(call(`/sandboxes/${sbx.sandboxID}`, { key: team.key }), 200);
    expect(info).toMatchObject({
      sandboxID: sbx.sandboxID,
      templateID: team.template,
      state: "running",
      cpuCount: 1,
      memoryMB: 512,
      diskSizeMB: 1024,
      envdVersion: "0.6.4",
      envdAccessToken: sbx.envdAccessToken,
      metadata: { who: "detail" },
      lifecycle: { onTimeout: "pause", autoResume: true },
      allowInternetAccess: null,
    });
    const endAt = Date.parse(info.endAt);
    expect(endAt - Date.parse(info.startedAt)).toBeGreaterThanOrEqual(119_000);
    expect(Date.parse(info.startedAt)).toBeGreaterThanOrEqual(before - 1000);
  });

  it("applies the openkruise extensions and strips them from metadata", async () => {
    const sbx = await create({ metadata: { "e2b.agents.kruise.io/never-timeout": "true", "label:tier": "gold", plain: "x" } });
    const info = await expectStatus(call(`/sandboxes/${sbx.sandboxID}`, { key: team.key }), 200);
    expect(info.metadata).toEqual({ "label:tier": "gold", plain: "x" });
    expect(info.endAt).toBe("0001-01-01T00:00:00Z");
    expect(agent.sandboxes.get(sbx.sandboxID)!.intent.labels).toEqual({ tier: "gold" });
  });

  it("changes the claimed member in place: image and CPU reach the agent's intent, the CPU shows in detail", async () => {
    const sbx = await create({ metadata: { "e2b.agents.kruise.io/image": "ghcr.io/acme/python:3.13", "e2b.agents.kruise.io/cpu-request": "1500m", "e2b.agents.kruise.io/cpu-limit": "2", keep: "me" } });
    expect(agent.sandboxes.get(sbx.sandboxID)!.intent.inplaceUpdate).toEqual({ image: "ghcr.io/acme/python:3.13", cpuCount: 2 });
    const info = await expectStatus(call(`/sandboxes/${sbx.sandboxID}`, { key: team.key }), 200);
    expect(info).toMatchObject({ cpuCount: 2, metadata: { keep: "me" } });
    // Later intents of the same sandbox (a pause here) still carry it, so a recreated pod gets it too.
    await expectStatus(call(`/sandboxes/${sbx.sandboxID}/pause`, { key: team.key, body: {} }), 204);
    await agent.waitUntil(() => agent.sandboxes.get(sbx.sandboxID)?.phase === "Paused");
    expect(agent.sandboxes.get(sbx.sandboxID)!.intent.inplaceUpdate).toEqual({ image: "ghcr.io/acme/python:3.13", cpuCount: 2 });
    // Only the request given: it is the CPU; a plain create carries no in-place change.
    const req = await create({ metadata: { "e2b.agents.kruise.io/cpu-request": "500m" } });
    expect(agent.sandboxes.get(req.sandboxID)!.intent.inplaceUpdate).toEqual({ cpuCount: 0.5 });
    const plain = await create();
    expect(agent.sandboxes.get(plain.sandboxID)!.intent.inplaceUpdate).toBeUndefined();
  });

  it("refuses a bad image, a bad CPU quantity and memory with 400 JSON", async () => {
    const bad = (metadata: Record<string, string>, message: RegExp) => expectError(call("/v2/sandboxes", { key: team.key, body: { templateID: team.template, metadata } }), 400, message);
    await bad({ "e2b.agents.kruise.io/image": "Python:3.13" }, /not a docker image reference/);
    await bad({ "e2b.agents.kruise.io/image": "python:" }, /not a docker image reference/);
    await bad({ "e2b.agents.kruise.io/image": "a b" }, /not a docker image reference/);
    for (const q of ["0", "-1", "two", "1.5x", "", "0.0001", "100000"]) await bad({ "e2b.agents.kruise.io/cpu-limit": q }, /not a positive CPU quantity/);
    await bad({ "e2b.agents.kruise.io/cpu-request": "3", "e2b.agents.kruise.io/cpu-limit": "2" }, /must not exceed/);
    await bad({ "e2b.agents.kruise.io/memory": "1Gi" }, /memory cannot be changed in place/);
  });

  it("answers 404 for an unknown template and 400 for invalid bodies", async () => {
    await expectError(call("/v2/sandboxes", { key: team.key, body: { templateID: "nope" } }), 404, /nope/);
    await expectError(call("/v2/sandboxes", { key: team.key, raw: "{not json" }), 400, /JSON/);
    await expectError(call("/v2/sandboxes", { key: team.key, body: { templateID: 5 } }), 400);
    await expectError(call("/v2/sandboxes", { key: team.key, body: { templateID: team.template, timeout: -1 } }), 400);
    await expectError(call("/v2/sandboxes", { key: team.key, body: { templateID: team.template, timeout: 10_000_000 } }), 400);
    await expectError(call("/v2/sandboxes", { key: team.key, body: { templateID: team.template, timeout: 1.5 } }), 400);
    await expectError(call("/v2/sandboxes", { key: team.key, body: { templateID: team.template, metadata: { "agents.kruise.io/owner": "me" } } }), 400, /reserved/);
    await expectError(call("/v2/sandboxes", { key: team.key, body: { templateID: team.template, metadata: { "e2b.agents.kruise.io/csi-volume-name": "x" } } }), 400, /not supported/);
    await expectError(call("/v2/sandboxes", { key: team.key, body: { templateID: team.template, autoResume: { enabled: true } } }), 400, /autoPause/);
    await expectError(call("/v2/sandboxes", { key: team.key, body: [] }), 400);
    await expectError(call("/v2/sandboxes", { key: team.key, raw: "" }), 400);
  });

  it("answers 413 for an oversized body", async () => {
    await expectError(call("/v2/sandboxes", { key: team.key, raw: JSON.stringify({ templateID: team.template, metadata: { big: "x".repeat(400_000) } }) }), 413);
  });
});

describe("ownership", () => {
  const ids = (list: { sandboxID: string }[]) => list.map((s) => s.sandboxID);

  it("hides another team's sandbox as 404 with E2B's message, and lets the admin see it", async () => {
    const sbx = await create();
    const stranger = await createTeam(unique("stranger"));
    const msg = `Sandbox "${sbx.sandboxID}" doesn't exist or you don't have access to it`;
    await expectError(call(`/sandboxes/${sbx.sandboxID}`, { key: stranger.key }), 404, msg);
    await expectError(call(`/sandboxes/${sbx.sandboxID}`, { key: stranger.key, method: "DELETE" }), 404, msg);
    await expectError(call(`/sandboxes/${sbx.sandboxID}/pause`, { key: stranger.key, body: {} }), 404, msg);
    await expectError(call(`/v2/sandboxes/${sbx.sandboxID}/connect`, { key: stranger.key, body: {} }), 404, msg);
    await expectError(call(`/sandboxes/${sbx.sandboxID}/timeout`, { key: stranger.key, body: { timeout: 30 } }), 404, msg);
    expect(ids(await expectStatus(call("/v2/sandboxes", { key: stranger.key }), 200))).not.toContain(sbx.sandboxID);
    expect(ids(await expectStatus(call("/sandboxes", { key: stranger.key }), 200))).not.toContain(sbx.sandboxID);
    await expectStatus(call(`/sandboxes/${sbx.sandboxID}`), 200);
    await expectError(call("/sandboxes/Not-An-Id", { key: team.key }), 404);
  });

  it("belongs to the team: another key of it gets, lists, pauses, connects to and kills it", async () => {
    const sbx = await create({ timeout: 60 });
    const other = await secondKey(team);
    expect((await expectStatus(call(`/sandboxes/${sbx.sandboxID}`, { key: other }), 200)).sandboxID).toBe(sbx.sandboxID);
    const page = await call("/v2/sandboxes", { key: other });
    expect(ids(await expectStatus(page, 200))).toContain(sbx.sandboxID);
    expect(Number(page.headers.get("x-total-running"))).toBeGreaterThanOrEqual(1);
    expect(ids(await expectStatus(call("/sandboxes", { key: other }), 200))).toContain(sbx.sandboxID);
    await expectStatus(call(`/sandboxes/${sbx.sandboxID}/timeout`, { key: other, body: { timeout: 90 } }), 204);
    await expectStatus(call(`/sandboxes/${sbx.sandboxID}/pause`, { key: other, body: {} }), 204);
    await agent.waitUntil(() => agent.sandboxes.get(sbx.sandboxID)?.phase === "Paused");
    expect(ids(await expectStatus(call("/v2/sandboxes?state=paused", { key: other }), 200))).toContain(sbx.sandboxID);
    await expectStatus(call(`/v2/sandboxes/${sbx.sandboxID}/connect`, { key: other, body: { timeout: 30 } }), 201);
    await expectStatus(call(`/sandboxes/${sbx.sandboxID}`, { key: other, method: "DELETE" }), 204);
    await expectError(call(`/sandboxes/${sbx.sandboxID}`, { key: team.key }), 404);
  });

  it("outlives the key that created it: after that key is deleted, another key of the team lists and kills it", async () => {
    const creator = await expectStatus(call("/api-keys", { key: team.key, body: { name: "short-lived" } }), 201);
    const sbx = await create({ timeout: 60 }, creator.key);
    const survivor = await secondKey(team);
    await expectStatus(call(`/api-keys/${creator.id}`, { key: survivor, method: "DELETE" }), 204);
    await expectError(call("/v2/sandboxes", { key: creator.key }), 401);
    expect(ids(await expectStatus(call("/v2/sandboxes", { key: survivor }), 200))).toContain(sbx.sandboxID);
    // The creating key stays an attribute of what is stored.
    expect((await sandboxHandle(env, sbx.sandboxID).inspect())?.spec.keyId).toBe(creator.id);
    await expectStatus(call(`/sandboxes/${sbx.sandboxID}`, { key: survivor, method: "DELETE" }), 204);
    expect(ids(await expectStatus(call("/v2/sandboxes", { key: survivor }), 200))).not.toContain(sbx.sandboxID);
  });
});

describe("lifecycle", () => {
  it("pauses (204), refuses a second pause with 409, resumes on connect (201), then connects (200)", async () => {
    const sbx = await create({ timeout: 60 });
    await expectStatus(call(`/sandboxes/${sbx.sandboxID}/pause`, { key: team.key, body: {} }), 204);
    await agent.waitUntil(() => agent.sandboxes.get(sbx.sandboxID)?.phase === "Paused");
    const again = await expectStatus(call(`/sandboxes/${sbx.sandboxID}/pause`, { key: team.key, body: {} }), 409);
    expect(again.code).toBe(409);
    const info = await expectStatus(call(`/sandboxes/${sbx.sandboxID}`, { key: team.key }), 200);
    expect(info.state).toBe("paused");
    const paused = await expectStatus(call("/v2/sandboxes?state=paused", { key: team.key }), 200);
    expect(paused.map((s: { sandboxID: string }) => s.sandboxID)).toContain(sbx.sandboxID);

    const resumed = await expectStatus(call(`/v2/sandboxes/${sbx.sandboxID}/connect`, { key: team.key, body: { timeout: 10 } }), 201);
    expect(resumed).toMatchObject({ sandboxID: sbx.sandboxID, envdAccessToken: sbx.envdAccessToken });
    const after = await expectStatus(call(`/sandboxes/${sbx.sandboxID}`, { key: team.key }), 200);
    expect(after.state).toBe("running");
    // Resume floors the lifetime at 300 s even though 10 s was asked.
    expect(Date.parse(after.endAt) - Date.now()).toBeGreaterThan(290_000);

    await expectStatus(call(`/v2/sandboxes/${sbx.sandboxID}/connect`, { key: team.key, body: {} }), 200);
  });

  it("extends but never shortens on connect; setTimeout overwrites", async () => {
    const sbx = await create({ timeout: 300 });
    const endAt = async () => Date.parse((await expectStatus(call(`/sandboxes/${sbx.sandboxID}`, { key: team.key }), 200)).endAt);
    const initial = await endAt();
    await expectStatus(call(`/v2/sandboxes/${sbx.sandboxID}/connect`, { key: team.key, body: { timeout: 10 } }), 200);
    expect(await endAt()).toBe(initial);
    await expectStatus(call(`/sandboxes/${sbx.sandboxID}/connect`, { key: team.key, body: { timeout: 600 } }), 200);
    expect(await endAt()).toBeGreaterThan(initial + 250_000);
    await expectStatus(call(`/sandboxes/${sbx.sandboxID}/timeout`, { key: team.key, body: { timeout: 30 } }), 204);
    expect(await endAt()).toBeLessThan(Date.now() + 31_000);
    await expectStatus(call(`/sandboxes/${sbx.sandboxID}/refreshes`, { key: team.key, body: { duration: 120 } }), 204);
    expect(await endAt()).toBeGreaterThan(Date.now() + 100_000);
    await expectError(call(`/sandboxes/${sbx.sandboxID}/timeout`, { key: team.key, body: {} }), 400);
    await expectError(call(`/sandboxes/${sbx.sandboxID}/connect`, { key: team.key, body: {} }), 400, /timeout/);
  });

  it("deprecated /resume: 409 while running, 201 after a pause", async () => {
    const sbx = await create();
    await expectError(call(`/sandboxes/${sbx.sandboxID}/resume`, { key: team.key, body: {} }), 409);
    await expectStatus(call(`/sandboxes/${sbx.sandboxID}/pause`, { key: team.key, body: { memory: false } }), 204);
    expect(agent.sandboxes.get(sbx.sandboxID)!.intent.desired).toEqual({ state: "paused", pauseStrategy: "Stop" });
    await expectStatus(call(`/sandboxes/${sbx.sandboxID}/resume`, { key: team.key, body: { timeout: 60 } }), 201);
  });

  it("kills (204): the sandbox is gone for every route, and a second kill is 404", async () => {
    const sbx = await create({ metadata: { kill: "me" } });
    await expectStatus(call(`/sandboxes/${sbx.sandboxID}`, { key: team.key, method: "DELETE" }), 204);
    await agent.waitUntil(() => !agent.sandboxes.has(sbx.sandboxID));
    await expectError(call(`/sandboxes/${sbx.sandboxID}`, { key: team.key, method: "DELETE" }), 404);
    await expectError(call(`/sandboxes/${sbx.sandboxID}`, { key: team.key }), 404);
    await expectError(call(`/v2/sandboxes/${sbx.sandboxID}/connect`, { key: team.key, body: {} }), 404);
    const listed = await expectStatus(call("/v2/sandboxes?metadata=kill%3Dme", { key: team.key }), 200);
    expect(listed).toEqual([]);
  });
});

describe("an agent that acks a create as accepted and starts it later", () => {
  it("answers 201 only once the sandbox runs, so the gateway can serve it at once", async () => {
    const slow = await createTeam(unique("slowstart"));
    const slowAgent = await startAgent(slow.cluster, { readyDelayMs: 400 });
    try {
      const sbx = await expectStatus(call("/v2/sandboxes", { key: slow.key, body: { templateID: slow.template } }), 201);
      expect(slowAgent.received.find((r) => r.intent.sandboxId === sbx.sandboxID)).toBeDefined();
      const route = await sandboxHandle(env, sbx.sandboxID).route();
      expect(route).toMatchObject({ ok: true, route: { phase: "Running" } });
    } finally {
      slowAgent.disconnect();
    }
  });

  it("answers 504 and kills the sandbox when it does not run within the create's bound", async () => {
    const slow = await createTeam(unique("neverstart"));
    const slowAgent = await startAgent(slow.cluster, { readyDelayMs: 5_000 });
    try {
      const res = call("/v2/sandboxes", { key: slow.key, body: { templateID: slow.template, metadata: { "e2b.agents.kruise.io/wait-ready-timeout-seconds": "1" } } });
      expect(await expectStatus(res, 504)).toMatchObject({ error_code: "sandbox_placement_timeout", message: expect.stringContaining("1000 ms") });
      const [first] = slowAgent.received;
      await slowAgent.waitUntil(() => slowAgent.received.some((r) => r.intent.sandboxId === first!.intent.sandboxId && r.intent.desired.state === "deleted"));
      expect(await expectStatus(call("/v2/sandboxes", { key: slow.key }), 200)).toEqual([]);
    } finally {
      slowAgent.disconnect();
    }
  });
});

describe("no agent", () => {
  it("answers 504 sandbox_placement_timeout when no cluster takes the sandbox in time, and forgets it", async () => {
    const lonely = await createTeam(unique("noagent"));
    const res = await call("/v2/sandboxes", {
      key: lonely.key,
      body: { templateID: lonely.template, metadata: { "e2b.agents.kruise.io/wait-ready-timeout-seconds": "1" } },
    });
    const body = await expectStatus(res, 504);
    expect(body).toMatchObject({ code: 504, error_code: "sandbox_placement_timeout" });
    expect(await expectStatus(call("/v2/sandboxes", { key: lonely.key }), 200)).toEqual([]);
  });
});
