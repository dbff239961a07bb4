// Metrics routes, and E2B's routes this server does not serve (a 501 naming them, after the key
// check). The scripted agent has no runtime behind its ingress, so a running sandbox's sample is
// absent here (the e2e test reads real figures through the real ingress).
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { E2B_ROUTES } from "../../../schema/api/e2b-routes.gen.ts";
import type { ScriptedAgent } from "../../support/scripted-agent.ts";
import { call, createTeam, expectError, expectStatus, startAgent, unique, type TestTeam } from "../helpers.ts";

let team: TestTeam;
let other: TestTeam;
let agent: ScriptedAgent;
let own: string;

beforeAll(async () => {
  team = await createTeam(unique("unsup"), { replicas: 1 });
  other = await createTeam(unique("unsup-other"), { cluster: team.cluster });
  agent = await startAgent(team.cluster);
  await agent.waitUntil(() => agent.running().length >= 1);
  own = (await expectStatus(call("/v2/sandboxes", { key: team.key, body: { templateID: team.template } }), 201)).sandboxID;
});
afterAll(() => agent.disconnect());

describe("E2B routes this server does not serve", () => {
  const routes: [method: string, path: string][] = [
    ["GET", "/volumes"],
    ["POST", "/volumes"],
    ["PATCH", "/templates/t1"],
    ["POST", "/templates/t1/builds/b1"],
    ["GET", "/teams/t1/metrics"],
    ["POST", "/access-tokens"],
  ];
  for (const [method, path] of routes) {
    it(`${method} ${path} is a 501 that names it, after the key check`, async () => {
      const res = await call(path, { key: team.key, method, body: method === "GET" || method === "DELETE" ? undefined : {} });
      expect(res.status).toBe(501);
      const body = (await res.json()) as { code: number; message: string };
      expect(body.code).toBe(501);
      expect(body.message).toMatch(new RegExp(`^${method} /\\S+ is not supported by this server yet$`));
      await expectError(call(path, { key: null, method, body: method === "GET" || method === "DELETE" ? undefined : {} }), 401);
    });
  }

  it("a path outside E2B's API stays a 404, and a served route is not shadowed", async () => {
    await expectError(call("/no/such/route", { key: team.key }), 404, /not found/);
    await expectStatus(call(`/sandboxes/${own}`, { key: team.key }), 200);
  });
});

describe("every route of E2B's OpenAPI spec (schema/api/e2b-routes.gen.ts, checked against it in unit)", () => {
  // Served or a 501 naming it; never the router's "Route … not found", which an SDK reads as the
  // sandbox or template being gone. Path parameters: the caller's own sandbox (an unknown one for
  // DELETE, which would end it), placeholders for the rest.
  const unknownSandbox = "nosuchsandbox0000000";
  for (const [method, path] of E2B_ROUTES) {
    it(`${method} ${path}`, async () => {
      const url = path.replace(/\{(\w+)\}/g, (_, name: string) => (name === "sandboxID" ? (method === "DELETE" ? unknownSandbox : own) : `x${name.toLowerCase()}1`));
      const res = await call(url, { key: team.key, method, body: method === "GET" || method === "DELETE" ? undefined : {} });
      const text = await res.text();
      expect(text).not.toMatch(/^\{"code":404,"message":"Route /);
      if (res.status === 501) expect(JSON.parse(text)).toEqual({ code: 501, message: `${method} ${path} is not supported by this server yet` });
    });
  }
});

describe("validation messages name the rejected value", () => {
  const cases: [what: string, body: Record<string, unknown>, message: string][] = [
    ["a negative timeout", { timeout: -5 }, "timeout -5"],
    ["a templateID that is not a string", { templateID: 42 }, "templateID 42"],
    ["a boolean extension", { metadata: { "e2b.agents.kruise.io/never-timeout": "maybe" } }, '"maybe"'],
    ["a duration extension", { metadata: { "e2b.agents.kruise.io/reserve-paused-sandbox-duration": "3 days" } }, '"3 days"'],
    ["a CPU extension", { metadata: { "e2b.agents.kruise.io/cpu-limit": "lots" } }, '"lots"'],
  ];
  for (const [what, body, message] of cases) {
    it(what, async () => {
      const res = await call("/v2/sandboxes", { key: team.key, body: { templateID: team.template, ...body } });
      expect(res.status).toBe(400);
      expect(((await res.json()) as { message: string }).message).toContain(message);
    });
  }
});

describe("metrics", () => {
  it("is a 404 for another team's or an unknown sandbox, and 401 without a key", async () => {
    await expectError(call(`/sandboxes/${own}/metrics`, { key: other.key }), 404, /doesn't exist or you don't have access/);
    await expectError(call("/sandboxes/nosuchsandbox0000000/metrics", { key: team.key }), 404);
    await expectError(call(`/sandboxes/${own}/metrics`, { key: null }), 401);
  });

  it("rejects a malformed or inverted window", async () => {
    await expectError(call(`/sandboxes/${own}/metrics?start=yesterday`, { key: team.key }), 400, /start/);
    await expectError(call(`/sandboxes/${own}/metrics?start=200&end=100`, { key: team.key }), 400, /after end/);
  });

  it("answers a list for the caller's sandbox even when its runtime cannot be reached", async () => {
    expect(await expectStatus(call(`/sandboxes/${own}/metrics`, { key: team.key }), 200)).toEqual([]);
  });

  it("batch: an object keyed by the ids the caller may see, and needs sandbox_ids", async () => {
    expect(await expectStatus(call(`/sandboxes/metrics?sandbox_ids=${own},nosuchsandbox0000000`, { key: other.key }), 200)).toEqual({ sandboxes: {} });
    await expectError(call("/sandboxes/metrics", { key: team.key }), 400, /sandbox_ids/);
    // "metrics" is not taken for a sandbox id by GET /sandboxes/:id.
    await expectStatus(call(`/sandboxes/metrics?sandbox_ids=${own}`, { key: team.key }), 200);
  });

  it("a paused sandbox has no points and is not woken", async () => {
    const id = (await expectStatus(call("/v2/sandboxes", { key: team.key, body: { templateID: team.template, autoPause: true, autoResume: { enabled: true } } }), 201)).sandboxID;
    await expectStatus(call(`/sandboxes/${id}/pause`, { key: team.key, body: {} }), 204);
    await agent.waitUntil(() => agent.sandboxes.get(id)?.phase === "Paused");
    expect(await expectStatus(call(`/sandboxes/${id}/metrics`, { key: team.key }), 200)).toEqual([]);
    expect((await expectStatus(call(`/sandboxes/${id}`, { key: team.key }), 200)).state).toBe("paused");
    expect(agent.sandboxes.get(id)!.intent.desired.state).not.toBe("running");
  });
});

describe("metrics from a runtime that answers badly (a tenant's pod runtime; review24 edge F8)", () => {
  it("is no sample (200 []), not a 500, and an oversized answer is not read whole", async () => {
    for (const [kind, ingressUrl] of Object.entries(inject("badRuntimes"))) {
      const bad = await createTeam(unique(`badrt-${kind.toLowerCase()}`));
      const badAgent = await startAgent(bad.cluster, { ingressUrl });
      try {
        const sbx = await expectStatus(call("/v2/sandboxes", { key: bad.key, body: { templateID: bad.template } }), 201);
        expect({ kind, points: await expectStatus(call(`/sandboxes/${sbx.sandboxID}/metrics`, { key: bad.key }), 200) }).toEqual({ kind, points: [] });
        expect({ kind, many: await expectStatus(call(`/sandboxes/metrics?sandbox_ids=${sbx.sandboxID}`, { key: bad.key }), 200) }).toEqual({ kind, many: { sandboxes: {} } });
      } finally {
        badAgent.disconnect();
      }
    }
  });
});
