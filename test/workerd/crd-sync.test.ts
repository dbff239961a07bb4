// The cluster's custom resources over the agent link inside workerd (schema/protocol/crd-sync.ts):
// a scripted agent sends SandboxSets, kubectl requests and SandboxClaims; ClusterDO applies them
// on the edge (templates and pools of team = namespace, the sandbox's pause/resume/kill, E2B creates)
// and answers each with a reply. The edge stays the authority: stale generations are refused.
import { env, exports } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { sandboxHandle } from "../../durable-objects/sandbox/stub.ts";
import { CLAIM_METADATA_KEY } from "../../schema/protocol/index.ts";
import { CrdLink } from "../support/crd-link.ts";
import { fetchTransport, ScriptedAgent } from "../support/scripted-agent.ts";
import { bindTeam, call, createTeam, expectStatus, unique } from "./helpers.ts";
import { waitFor } from "../support/wait-for.ts";

const link = (cluster: string) => fetchTransport((url, init) => exports.default.fetch(url, init) as never, "test-cluster-token", cluster);

/** A scripted agent of `cluster`, which the admin bound first to the teams `bound` (by default
 * the team named like the cluster, as most tests here use one namespace per cluster). */
async function connect(cluster: string, bound: string[] = [cluster]): Promise<{ agent: ScriptedAgent; crd: CrdLink }> {
  for (const team of bound) await bindTeam(team, cluster);
  const agent = new ScriptedAgent();
  const crd = new CrdLink();
  await crd.connect(agent, link(cluster));
  return { agent, crd };
}

function sandboxSet(namespace: string, name: string, generation: number, spec: Record<string, unknown>, uid = `uid-${name}`) {
  return { namespace, name, uid, generation, spec };
}

/** Templates the team's own key lists (GET /templates). */
async function teamTemplates(key: string): Promise<{ templateID: string; cpuCount: number }[]> {
  return expectStatus(call("/templates", { key }), 200);
}

async function adminTemplate(team: string, id: string): Promise<{ spec: Record<string, unknown>; pool: Record<string, number> } | undefined> {
  const res = await call(`/admin/teams/${team}/templates/${id}`);
  if (res.status === 404) return undefined;
  return expectStatus(res, 200);
}

describe("SandboxSets over the agent link", () => {
  it("the edge advertises the CRD messages in welcome", async () => {
    const agent = new ScriptedAgent();
    const welcome = await agent.connect(link(unique("c-feat")));
    expect(welcome.features).toEqual(expect.arrayContaining(["sandboxsets", "requests", "claims"]));
  });

  it("a SandboxSet becomes the template of team = namespace (a team bound to the cluster), and its pool runs on the sending cluster", async () => {
    const ns = unique("sbs-up");
    const { agent, crd } = await connect(ns);
    const reply = await crd.call("sandboxsets", sandboxSet(ns, "python", 1, { replicas: 2, image: "python:3.12", cpuCount: 2, env: { MODE: "eval" } }));
    expect(reply).toMatchObject({ result: "applied" });

    const key = (await expectStatus(call("/api-keys", { body: { name: "k", teamName: ns } }), 201)).key;
    expect(await teamTemplates(key)).toContainEqual(expect.objectContaining({ templateID: "python", cpuCount: 2 }));
    await agent.waitUntil(() => agent.running().length === 2);
    for (const { intent } of agent.received) {
      expect(intent).toMatchObject({ owner: { kind: "pool" }, team: ns, template: { id: "python", image: "python:3.12" }, envVars: { MODE: "eval" } });
    }
  });

  it("a SandboxSet cannot turn on nestedUserNamespaces (the operator's, through the admin API), nor drop it when the operator set it", async () => {
    const ns = unique("sbs-nested");
    const { crd } = await connect(ns);
    expect(await crd.call("sandboxsets", sandboxSet(ns, "tool", 1, { replicas: 0, nestedUserNamespaces: true }))).toMatchObject({ result: "applied" });
    expect((await adminTemplate(ns, "tool"))!.spec.nestedUserNamespaces).toBeUndefined();
    const admin = (await adminTemplate(ns, "tool"))!;
    await expectStatus(call(`/admin/teams/${ns}/templates/tool`, { method: "PUT", body: { spec: { ...admin.spec, nestedUserNamespaces: true } } }), 200);
    expect(await crd.call("sandboxsets", sandboxSet(ns, "tool", 2, { replicas: 0, cpuCount: 2 }))).toMatchObject({ result: "applied" });
    expect((await adminTemplate(ns, "tool"))!.spec).toMatchObject({ cpuCount: 2, nestedUserNamespaces: true });
  });

  it("an older generation never overwrites a newer one; a re-created object (new uid) starts over", async () => {
    const ns = unique("sbs-gen");
    const { crd } = await connect(ns);
    expect(await crd.call("sandboxsets", sandboxSet(ns, "app", 3, { replicas: 1 }))).toMatchObject({ result: "applied" });
    expect(await crd.call("sandboxsets", sandboxSet(ns, "app", 2, { replicas: 5 }))).toMatchObject({ result: "stale" });
    expect((await adminTemplate(ns, "app"))?.spec.replicas).toBe(1);
    expect(await crd.call("sandboxsets", sandboxSet(ns, "app", 4, { replicas: 0 }))).toMatchObject({ result: "applied" });
    expect((await adminTemplate(ns, "app"))?.spec.replicas).toBe(0);
    // Deleted and re-created under the same name: generation 1 of a new uid is accepted.
    expect(await crd.call("sandboxsets", { namespace: ns, name: "app", uid: "uid-app", deleted: true })).toMatchObject({ result: "applied" });
    expect(await crd.call("sandboxsets", sandboxSet(ns, "app", 4, { replicas: 3 }))).toMatchObject({ result: "stale" });
    expect(await crd.call("sandboxsets", sandboxSet(ns, "app", 1, { replicas: 0, image: "node:22" }, "uid-app-2"))).toMatchObject({ result: "applied" });
    expect((await adminTemplate(ns, "app"))?.spec).toMatchObject({ image: "node:22", cluster: ns });
    // A late delete of the old object does not remove the new one.
    expect(await crd.call("sandboxsets", { namespace: ns, name: "app", uid: "uid-app", deleted: true })).toMatchObject({ result: "stale" });
    expect(await adminTemplate(ns, "app")).toBeDefined();
  });

  it("deleting a SandboxSet removes the template and drains its warm members", async () => {
    const ns = unique("sbs-del");
    const { agent, crd } = await connect(ns);
    await crd.call("sandboxsets", sandboxSet(ns, "gone", 1, { replicas: 2 }));
    await agent.waitUntil(() => agent.running().length === 2);
    expect(await crd.call("sandboxsets", { namespace: ns, name: "gone", uid: "uid-gone", deleted: true })).toMatchObject({ result: "applied" });
    expect(await adminTemplate(ns, "gone")).toBeUndefined();
    await agent.waitUntil(() => agent.running().length === 0);
  });

  it("the namespace's inventory removes what this cluster synced and the namespace no longer has, and nothing else", async () => {
    const ns = unique("sbs-inv");
    const { crd } = await connect(ns);
    await crd.call("sandboxsets", sandboxSet(ns, "keep", 1, {}));
    await crd.call("sandboxsets", sandboxSet(ns, "lost", 1, {}));
    // A template of the same team made through the admin API is not the cluster's to remove.
    await expectStatus(call(`/admin/teams/${ns}/templates/manual`, { method: "PUT", body: { spec: {} } }), 201);
    expect(await crd.call("sandboxsets", { namespace: ns, present: ["keep"] })).toMatchObject({ result: "applied", message: "removed lost" });
    expect(await adminTemplate(ns, "keep")).toBeDefined();
    expect(await adminTemplate(ns, "lost")).toBeUndefined();
    expect(await adminTemplate(ns, "manual")).toBeDefined();
  });

  it("a template whose members run on another cluster is not taken over (nor deleted) by this one", async () => {
    const ns = unique("sbs-own");
    const { crd: a } = await connect(`${ns}-a`, [ns]);
    const { crd: b } = await connect(`${ns}-b`, [ns]);
    expect(await a.call("sandboxsets", sandboxSet(ns, "shared", 1, { image: "a" }))).toMatchObject({ result: "applied" });
    expect(await b.call("sandboxsets", sandboxSet(ns, "shared", 1, { image: "b" }, "uid-b"))).toMatchObject({ result: "rejected", code: "conflict" });
    expect(await b.call("sandboxsets", { namespace: ns, name: "shared", uid: "uid-b", deleted: true })).toMatchObject({ result: "applied" });
    expect((await adminTemplate(ns, "shared"))?.spec).toMatchObject({ cluster: `${ns}-a`, image: "a" });
  });

  it("refuses a spec the edge's template schema refuses (the whole frame is a protocol error)", async () => {
    const ns = unique("sbs-bad");
    const { agent } = await connect(ns);
    agent.sendRaw(JSON.stringify({ type: "sandboxsets", items: [{ id: "x", ...sandboxSet(ns, "bad", 1, { cpuCount: 0 }) }] }));
    await agent.waitUntil(() => agent.closed !== null);
    expect(agent.closed?.code).toBe(4400);
  });
});

describe("kubectl requests over the agent link", () => {
  async function sandboxOn(cluster: string) {
    const team = await createTeam(cluster, { cluster });
    const { agent, crd } = await connect(cluster);
    const created = await expectStatus(call("/v2/sandboxes", { key: team.key, body: { templateID: team.template } }), 201);
    const id = created.sandboxID as string;
    const stub = sandboxHandle(env, id);
    return { team, agent, crd, id, generation: async () => (await stub.inspect())!.generation };
  }

  it("pause, resume and kill go to the sandbox (its group) as the owner would", async () => {
    const s = await sandboxOn(unique("rq"));
    expect(await s.crd.call("requests", { sandboxId: s.id, namespace: s.team.name, action: "pause", generation: await s.generation() })).toMatchObject({ result: "applied" });
    expect((await expectStatus(call(`/sandboxes/${s.id}`, { key: s.team.key }), 200)).state).toBe("paused");
    await s.agent.waitUntil(() => s.agent.sandboxes.get(s.id)?.phase === "Paused");

    expect(await s.crd.call("requests", { sandboxId: s.id, namespace: s.team.name, action: "resume", generation: await s.generation() })).toMatchObject({ result: "applied" });
    expect((await expectStatus(call(`/sandboxes/${s.id}`, { key: s.team.key }), 200)).state).toBe("running");

    expect(await s.crd.call("requests", { sandboxId: s.id, namespace: s.team.name, action: "kill", generation: await s.generation() })).toMatchObject({ result: "applied" });
    expect((await call(`/sandboxes/${s.id}`, { key: s.team.key })).status).toBe(404);
  });

  it("a request made against an older generation is stale and changes nothing", async () => {
    const s = await sandboxOn(unique("rq-stale"));
    const seen = await s.generation();
    await expectStatus(call(`/sandboxes/${s.id}/pause`, { key: s.team.key, body: {} }), 204);
    await expectStatus(call(`/sandboxes/${s.id}/connect`, { key: s.team.key, body: { timeout: 60 } }), 201);
    expect(await s.crd.call("requests", { sandboxId: s.id, namespace: s.team.name, action: "pause", generation: seen })).toMatchObject({ result: "stale" });
    expect((await expectStatus(call(`/sandboxes/${s.id}`, { key: s.team.key }), 200)).state).toBe("running");
  });

  it("deleting a warm pool member drops it from its pool, which replaces it; pausing one is refused", async () => {
    const ns = unique("rq-warm");
    const { agent, crd } = await connect(ns);
    await crd.call("sandboxsets", sandboxSet(ns, "warm", 1, { replicas: 2 }));
    await agent.waitUntil(() => agent.running().length === 2);
    const [victim, other] = agent.running();
    expect(await crd.call("requests", { sandboxId: victim, namespace: ns, action: "pause", generation: 1 })).toMatchObject({ result: "rejected", code: "conflict" });
    expect(await crd.call("requests", { sandboxId: victim, namespace: ns, action: "kill", generation: 1 })).toMatchObject({ result: "applied" });
    await agent.waitUntil(() => !agent.sandboxes.has(victim!) && agent.running().length === 2);
    expect(agent.running()).toContain(other);
    await waitFor(async () => (await adminTemplate(ns, "warm"))?.pool.available === 2);
  });

  it("a request from a Sandbox in another namespace than the sandbox's team is refused as not found and changes nothing", async () => {
    const s = await sandboxOn(unique("rq-ns"));
    const other = unique("rq-ns-b");
    const at = await s.generation();
    const hook = { prePause: { exec: { command: ["sh", "-c", "exit 3"] } } };
    expect(await s.crd.call("requests", { sandboxId: s.id, namespace: other, action: "lifecycle", generation: at, lifecycle: hook })).toMatchObject({ result: "rejected", code: "sandbox_not_found" });
    expect(await s.crd.call("requests", { sandboxId: s.id, namespace: other, action: "pause", generation: at })).toMatchObject({ result: "rejected", code: "sandbox_not_found" });
    expect(await s.crd.call("requests", { sandboxId: s.id, namespace: other, action: "kill", generation: at })).toMatchObject({ result: "rejected", code: "sandbox_not_found" });
    expect((await expectStatus(call(`/sandboxes/${s.id}`, { key: s.team.key }), 200)).state).toBe("running");
    expect((await sandboxHandle(env, s.id).inspect())!.spec.hooks).toBeUndefined();
  });

  it("a Sandbox in another namespace cannot delete a warm pool member of this one", async () => {
    const ns = unique("rq-warm-ns");
    const { agent, crd } = await connect(ns);
    await createTeam(`${ns}-b`, { cluster: ns });
    await crd.call("sandboxsets", sandboxSet(ns, "warm", 1, { replicas: 1 }));
    await agent.waitUntil(() => agent.running().length === 1);
    const [member] = agent.running();
    expect(await crd.call("requests", { sandboxId: member, namespace: `${ns}-b`, action: "kill", generation: 1 })).toMatchObject({ result: "rejected", code: "sandbox_not_found" });
    expect(agent.running()).toEqual([member]);
  });

  it("a cluster cannot act on another cluster's sandbox, nor on one that does not exist", async () => {
    const s = await sandboxOn(unique("rq-own"));
    const { crd } = await connect(unique("rq-other"));
    expect(await crd.call("requests", { sandboxId: s.id, namespace: s.team.name, action: "kill", generation: await s.generation() })).toMatchObject({ result: "rejected", code: "forbidden" });
    expect(await crd.call("requests", { sandboxId: "nosuchsandbox", namespace: "nosuch", action: "pause", generation: 1 })).toMatchObject({ result: "rejected", code: "sandbox_not_found" });
    expect((await expectStatus(call(`/sandboxes/${s.id}`, { key: s.team.key }), 200)).state).toBe("running");
  });
});

describe("SandboxClaims over the agent link", () => {
  it("claims replicas from the team's pool with the claim's env vars and labels, and never twice", async () => {
    const ns = unique("sbc");
    const { agent, crd } = await connect(ns);
    await crd.call("sandboxsets", sandboxSet(ns, "pool", 1, { replicas: 2 }));
    await agent.waitUntil(() => agent.running().length === 2);
    const claim = { namespace: ns, claim: { name: "batch", uid: "claim-uid-1" }, templateName: "pool", replicas: 3, envVars: { MODE: "eval" }, labels: { purpose: "test" }, annotations: { note: "hi" } };
    const first = await crd.call("claims", claim);
    expect(first).toMatchObject({ result: "applied" });
    expect(first.sandboxIds).toHaveLength(3);
    const claimed = agent.received.filter((r) => first.sandboxIds!.includes(r.intent.sandboxId) && r.intent.owner.kind === "sandbox");
    expect(claimed.length).toBeGreaterThanOrEqual(3);
    for (const { intent } of claimed) expect(intent).toMatchObject({ envVars: { MODE: "eval" }, labels: { purpose: "test" }, team: ns });

    const again = await crd.call("claims", claim);
    expect(again).toMatchObject({ result: "applied" });
    expect([...again.sandboxIds!].sort()).toEqual([...first.sandboxIds!].sort());
    const listed = await expectStatus(call(`/sandboxes?metadata=${encodeURIComponent(`${CLAIM_METADATA_KEY}=claim-uid-1`)}`), 200);
    expect(listed).toHaveLength(3);
    expect(listed[0].metadata).toMatchObject({ note: "hi", "label:purpose": "test" });
  });

  it("a claim on a SandboxSet the team does not have is rejected with template_not_found", async () => {
    const ns = unique("sbc-none");
    const { crd } = await connect(ns);
    await crd.call("sandboxsets", sandboxSet(ns, "other", 1, {}));
    const reply = await crd.call("claims", { namespace: ns, claim: { name: "c", uid: "u-none" }, templateName: "nope", replicas: 1 });
    expect(reply).toMatchObject({ result: "rejected", code: "template_not_found", sandboxIds: [] });
  });

  it("an inplaceUpdate goes to the create route as E2B's image / cpu-limit extensions: the claimed member's intent carries it", async () => {
    const ns = unique("sbc-inpl");
    const { agent, crd } = await connect(ns);
    await crd.call("sandboxsets", sandboxSet(ns, "p", 1, { replicas: 1 }));
    await agent.waitUntil(() => agent.running().length === 1);
    const [warm] = agent.running();
    const reply = await crd.call("claims", { namespace: ns, claim: { name: "c", uid: "u-inpl" }, templateName: "p", replicas: 1, inplaceUpdate: { image: "python:3.13", cpuCount: 2 } });
    expect(reply).toMatchObject({ result: "applied", sandboxIds: [warm] });
    const intent = agent.sandboxes.get(warm!)!.intent;
    expect(intent).toMatchObject({ owner: { kind: "sandbox" }, inplaceUpdate: { image: "python:3.13", cpuCount: 2 } });
  });

  it("createOnNoStock: false refuses when the pool is empty", async () => {
    const ns = unique("sbc-stock");
    const { crd } = await connect(ns);
    await crd.call("sandboxsets", sandboxSet(ns, "empty", 1, { replicas: 0 }));
    const reply = await crd.call("claims", { namespace: ns, claim: { name: "c", uid: "u-stock" }, templateName: "empty", replicas: 1, createOnNoStock: false });
    expect(reply).toMatchObject({ result: "rejected", code: "sandbox_capacity_unavailable" });
  });
});

it("keeps the pool and the template in one place: the admin API sees what the sync wrote", async () => {
  const ns = unique("sbs-admin");
  const { agent, crd } = await connect(ns);
  await crd.call("sandboxsets", sandboxSet(ns, "seen", 7, { replicas: 1 }));
  await agent.waitUntil(() => agent.running().length === 1);
  await waitFor(async () => (await adminTemplate(ns, "seen"))?.pool.available === 1);
});
