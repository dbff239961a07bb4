// GET /admin/metrics inside workerd with the scripted agent on the real agent link: admin only,
// Prometheus text that an independent parser reads, and counts that follow what was done through
// the public API (creates, a refused create, a pause and a connect that resumes).
import { exports } from "cloudflare:workers";
import { afterAll, describe, expect, it, vi } from "vitest";
import { EdgeMetricsDO } from "../../durable-objects/metrics/metrics-do.ts";
import type { ScriptedAgent } from "../support/scripted-agent.ts";
import { parsePrometheus, value, type Scrape } from "../support/prometheus-text.ts";
import { waitFor } from "../support/wait-for.ts";
import { ADMIN_KEY, call, createTeam, expectError, expectStatus, startAgent, unique } from "./helpers.ts";

const agents: ScriptedAgent[] = [];
afterAll(() => agents.forEach((a) => a.disconnect()));

async function scrape(): Promise<Scrape> {
  const res = await call("/admin/metrics");
  expect(res.status).toBe(200);
  expect(res.headers.get("content-type")).toMatch(/^text\/plain; version=0\.0\.4/);
  return parsePrometheus(await res.text());
}

describe("/admin/metrics", () => {
  it("needs the admin key: 401 without a key, 403 with a team's", async () => {
    await expectError(call("/admin/metrics", { key: null }), 401);
    const team = await createTeam(unique("m-auth"));
    await expectError(call("/admin/metrics", { key: team.key }), 403);
  });

  it("counts creates, claims, refusals by code, per-stage latency and a resume", async () => {
    const team = await createTeam(unique("m-count"));
    agents.push(await startAgent(team.cluster));
    const before = await scrape();
    const create = (templateID: string) => call("/v2/sandboxes", { key: team.key, body: { templateID, timeout: 300 } });
    const made = await Promise.all([0, 1, 2].map(async () => (await expectStatus(create(team.template), 201)).sandboxID as string));
    await expectError(create(`${team.template}-missing`), 404);
    await expectStatus(call(`/sandboxes/${made[0]}/pause`, { key: team.key, body: {} }), 204);
    await expectStatus(call(`/v2/sandboxes/${made[0]}/connect`, { key: team.key, body: { timeout: 60 } }), 201);
    const after = await scrape();

    const delta = (name: string, labels: Record<string, string> = {}) => value(after, name, labels) - value(before, name, labels);
    expect(after.types.get("edge_sandbox_creates_total")).toBe("COUNTER");
    expect(delta("edge_sandbox_creates_total", { result: "ok" })).toBe(3);
    expect(delta("edge_sandbox_creates_total", { result: "template_not_found" })).toBe(1);
    expect(delta("edge_errors_total", { code: "template_not_found" })).toBe(1);
    // The team's pool has no warm members: every claim makes a new sandbox.
    expect(delta("edge_pool_claims_total", { stock: "cold" })).toBe(3);
    expect(delta("edge_sandbox_wakeups_total", { via: "connect" })).toBe(1);
    expect(delta("edge_http_requests_total", { route: "/v2/sandboxes", method: "POST", status: "201" })).toBe(3);
    expect(after.types.get("edge_http_request_duration_ms")).toBe("HISTOGRAM");
    expect(delta("edge_http_request_duration_ms_count", { route: "/v2/sandboxes", method: "POST" })).toBe(4);
    expect(after.types.get("edge_create_stage_duration_ms")).toBe("HISTOGRAM");
    for (const stage of ["claim", "start"]) {
      expect(delta("edge_create_stage_duration_ms_count", { stage })).toBe(3);
      expect(delta("edge_create_stage_duration_ms_bucket", { stage, le: "+Inf" })).toBe(3);
    }
    expect(delta("edge_create_stage_duration_ms_count", { stage: "template" })).toBe(4);
    // A create is one Durable Object call from the Worker: the team's quota object claims and
    // hands the member to its group itself.
    expect(delta("edge_do_call_duration_ms_count", { object: "team_quota", method: "create" })).toBe(3);
    expect(delta("edge_do_call_duration_ms_count", { object: "team_quota", method: "claim" })).toBe(0);
    expect(delta("edge_do_call_duration_ms_count", { object: "sandbox_group", method: "create" })).toBe(0);
    // Bounded labels: no series names a sandbox.
    for (const s of after.samples) for (const v of Object.values(s.labels)) expect(made).not.toContain(v);
  });

  it("counts a claim from the pool's warm stock as warm", async () => {
    const team = await createTeam(unique("m-warm"), { replicas: 1 });
    const agent = await startAgent(team.cluster);
    agents.push(agent);
    await agent.waitUntil(() => agent.running().length === 1);
    const [member] = agent.running();
    const s = agent.sandboxes.get(member!)!;
    agent.report({ sandboxId: member!, generation: s.generation, phase: "Running", ready: true, endpoint: { runtime: `http://${member}.scripted.invalid:49983` }, revision: s.intent.template?.revision, observedAt: Date.now() });
    await waitFor(async () => (await expectStatus(call(`/admin/teams/${team.name}/templates/${team.template}`), 200)).pool.available === 1);
    const before = await scrape();
    const made = await expectStatus(call("/v2/sandboxes", { key: team.key, body: { templateID: team.template, timeout: 300 } }), 201);
    expect(made.sandboxID).toBe(member);
    const after = await scrape();
    expect(value(after, "edge_pool_claims_total", { stock: "warm" }) - value(before, "edge_pool_claims_total", { stock: "warm" })).toBe(1);
  });
});

describe("/admin/metrics after a scrape whose client left mid-flush", () => {
  // workerd ties the isolate's flush (a call to EdgeMetricsDO) to the request that started it: a
  // scrape cancelled while its flush is in flight takes the call with it, and the call never
  // answers. The isolate must still flush and scrape (durable-objects/metrics/edge-metrics.ts).
  it("answers the next scrape", async () => {
    await scrape();
    await expectStatus(call("/teams", { key: ADMIN_KEY }), 200); // counted, not yet flushed (FLUSH_MS)
    // EdgeMetricsDO's `add` held until `release` (the object runs in the test's isolate).
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    const real = EdgeMetricsDO.prototype.add;
    const adds = vi.spyOn(EdgeMetricsDO.prototype, "add").mockImplementation(async function (this: EdgeMetricsDO, delta) {
      await held;
      return real.call(this, delta);
    });
    try {
      const gone = new AbortController();
      const first = exports.default.fetch("http://edge.test/admin/metrics", { headers: { "x-api-key": ADMIN_KEY }, signal: gone.signal });
      first.catch(() => undefined);
      await waitFor(() => adds.mock.calls.length >= 1, { what: "the first scrape's flush", timeoutMs: 5000 });
      gone.abort();
      await expect(first).rejects.toThrow();
    } finally {
      adds.mockRestore();
      release();
    }
    const second = await Promise.race([call("/admin/metrics"), sleep(15_000).then(() => "no answer within 15000 ms")]);
    expect(second).toBeInstanceOf(Response);
    expect((second as Response).status).toBe(200);
  }, 30_000);
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
