// Team quotas from the cluster over the agent link (schema/protocol/crd-sync.ts `quotas`, the
// annotations of the team's Namespace): ClusterDO applies them through the admin API's operation,
// only for a cluster bound to the team; and the CRD frames are bounded (a frame
// past a bound is a protocol error naming the bound).
import { exports } from "cloudflare:workers";
import { afterAll, describe, expect, it } from "vitest";
import { MAX_ENV_VARS, MAX_METADATA_ENTRIES } from "../../schema/api/limits.ts";
import { CrdLink } from "../support/crd-link.ts";
import { fetchTransport, ScriptedAgent } from "../support/scripted-agent.ts";
import { call, createTeam, expectStatus, unique } from "./helpers.ts";

const agents: ScriptedAgent[] = [];
afterAll(() => agents.forEach((a) => a.disconnect()));

async function connect(cluster: string): Promise<{ agent: ScriptedAgent; crd: CrdLink }> {
  const agent = new ScriptedAgent();
  const crd = new CrdLink();
  await crd.connect(agent, fetchTransport((url, init) => exports.default.fetch(url, init) as never, "test-cluster-token", cluster));
  agents.push(agent);
  return { agent, crd };
}

const quota = async (team: string) => expectStatus(call(`/admin/teams/${team}/quota`), 200);

describe("team quotas over the agent link", () => {
  it("the edge advertises quotas in welcome", async () => {
    const agent = new ScriptedAgent();
    agents.push(agent);
    const welcome = await agent.connect(fetchTransport((url, init) => exports.default.fetch(url, init) as never, "test-cluster-token", unique("q-feat")));
    expect(welcome.features).toContain("quotas");
  });

  it("a quota from the team's cluster is the team's quota (the admin API shows it) and a create over it gets 429; removing it returns to the defaults", async () => {
    const team = await createTeam(unique("q-set"));
    const { crd } = await connect(team.cluster);
    const defaults = (await quota(team.name)).limits;
    expect(await crd.call("quotas", { namespace: team.name, limits: { runningSandboxes: 1, vcpus: 8 } })).toMatchObject({ result: "applied" });
    expect(await quota(team.name)).toMatchObject({ limits: { runningSandboxes: 1, vcpus: 8 }, overrides: { runningSandboxes: 1, vcpus: 8 } });

    await expectStatus(call("/v2/sandboxes", { key: team.key, body: { templateID: team.template } }), 201);
    const over = await call("/v2/sandboxes", { key: team.key, body: { templateID: team.template } });
    expect(over.status).toBe(429);
    expect(await over.json()).toEqual({ code: 429, message: `team "${team.name}" has 1 of 1 running sandboxes (quota runningSandboxes)` });

    expect(await crd.call("quotas", { namespace: team.name, limits: {} })).toMatchObject({ result: "applied" });
    expect((await quota(team.name)).limits).toEqual(defaults);
  });

  it("the paused-sandboxes quota from the team's cluster bounds the team's pauses (429 naming it)", async () => {
    const team = await createTeam(unique("q-paused"));
    const { crd } = await connect(team.cluster);
    expect(await crd.call("quotas", { namespace: team.name, limits: { pausedSandboxes: 1 } })).toMatchObject({ result: "applied" });
    expect(await quota(team.name)).toMatchObject({ limits: { pausedSandboxes: 1 }, overrides: { pausedSandboxes: 1 } });
    const ids = await Promise.all([0, 1].map(async () => (await expectStatus(call("/v2/sandboxes", { key: team.key, body: { templateID: team.template } }), 201)).sandboxID as string));
    await expectStatus(call(`/sandboxes/${ids[0]}/pause`, { key: team.key, body: {} }), 204);
    const over = await call(`/sandboxes/${ids[1]}/pause`, { key: team.key, body: {} });
    expect(over.status).toBe(429);
    expect(await over.json()).toEqual({ code: 429, message: `team "${team.name}" has 1 of 1 paused sandboxes (quota pausedSandboxes)` });
  });

  it("a cluster not bound to the team may not set its quota", async () => {
    const team = await createTeam(unique("q-own"));
    const { crd } = await connect(unique("q-other"));
    const reply = await crd.call("quotas", { namespace: team.name, limits: { runningSandboxes: 1000 } });
    expect(reply).toMatchObject({ result: "rejected", code: "forbidden" });
    expect(reply.message).toContain(`team ${team.name} is not bound to cluster`);
    expect((await quota(team.name)).overrides).toEqual({});
    // Nor a team that does not exist (it would be created by nothing).
    expect(await crd.call("quotas", { namespace: unique("q-none"), limits: { runningSandboxes: 1 } })).toMatchObject({ result: "rejected", code: "forbidden" });
  });

  it("a namespace without quota annotations does not wipe a quota the admin API set", async () => {
    const team = await createTeam(unique("q-admin"));
    await expectStatus(call(`/admin/teams/${team.name}/quota`, { method: "PUT", body: { runningSandboxes: 3 } }), 200);
    const { crd } = await connect(team.cluster);
    expect(await crd.call("quotas", { namespace: team.name, limits: {} })).toMatchObject({ result: "applied" });
    expect((await quota(team.name)).overrides).toEqual({ runningSandboxes: 3 });
  });

  it("an invalid limit is a protocol error and changes nothing", async () => {
    const team = await createTeam(unique("q-bad"));
    const { agent } = await connect(team.cluster);
    agent.sendRaw(JSON.stringify({ type: "quotas", items: [{ id: "x", namespace: team.name, limits: { runningSandboxes: -1 } }] }));
    await agent.waitUntil(() => agent.closed !== null);
    expect(agent.closed?.code).toBe(4400);
    expect((await quota(team.name)).overrides).toEqual({});
  });
});

describe("CRD frames are bounded", () => {
  const claim = (ns: string, extra: Record<string, unknown>) => ({ type: "claims", items: [{ id: "c", namespace: ns, claim: { name: "c", uid: "u" }, templateName: "t", replicas: 1, ...extra }] });
  const many = (n: number, v = "x") => Object.fromEntries(Array.from({ length: n }, (_, i) => [`K${i}`, v]));

  async function refused(frame: unknown): Promise<string> {
    const { agent } = await connect(unique("bounds"));
    agent.sendRaw(JSON.stringify(frame));
    await agent.waitUntil(() => agent.closed !== null);
    expect(agent.closed?.code).toBe(4400);
    return agent.errors.join("; ");
  }

  it("a claim with more env vars, labels or annotations than an E2B create may have is refused naming the limit", async () => {
    const ns = unique("bnd");
    expect(await refused(claim(ns, { envVars: many(MAX_ENV_VARS + 1) }))).toContain(`at most ${MAX_ENV_VARS} env vars`);
    expect(await refused(claim(ns, { labels: many(MAX_METADATA_ENTRIES + 1) }))).toContain(`at most ${MAX_METADATA_ENTRIES} labels`);
    expect(await refused(claim(ns, { annotations: { k: "v".repeat(5000) } }))).toContain("annotations");
  });

  it("a frame with too many items, or an over-long uid, is refused", async () => {
    const ns = unique("bnd-items");
    const items = Array.from({ length: 65 }, (_, i) => ({ id: `r${i}`, sandboxId: "abc", namespace: "t", action: "kill", generation: 1 }));
    expect(await refused({ type: "requests", items })).toContain("at most 64 items per frame");
    expect(await refused({ type: "sandboxsets", items: [{ id: "s", namespace: ns, name: "n", uid: "u".repeat(300), generation: 1, spec: {} }] })).toContain("items[0]");
  });
});
