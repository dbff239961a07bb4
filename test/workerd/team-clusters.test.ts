// The team↔cluster binding (durable-objects/operations/team-clusters.ts): every cluster links with
// its own token, but only a cluster bound to a team may act in the team's namespace. A cluster that
// is not bound gets nothing of the team (no template, no SecurityProfile, no secret value) and
// changes nothing of it (quota, policies, sandboxes billed to it) by naming its namespace; the
// admin binds and unbinds through `/admin/teams/{team}/clusters`.
import { runInDurableObject } from "cloudflare:test";
import { env, exports } from "cloudflare:workers";
import { afterAll, describe, expect, it } from "vitest";
import type { ClusterDO } from "../../durable-objects/cluster/cluster-do.ts";
import { getDb } from "../../durable-objects/store/db.ts";
import { CrdLink } from "../support/crd-link.ts";
import { fetchTransport, ScriptedAgent } from "../support/scripted-agent.ts";
import { call, createTeam, expectError, expectStatus, unique } from "./helpers.ts";

const agents: ScriptedAgent[] = [];
afterAll(() => agents.forEach((a) => a.disconnect()));

async function connect(cluster: string, opts: { networkRules?: boolean } = {}): Promise<{ agent: ScriptedAgent; crd: CrdLink }> {
  const agent = new ScriptedAgent(opts);
  const crd = new CrdLink();
  await crd.connect(agent, fetchTransport((url, init) => exports.default.fetch(url, init) as never, "test-cluster-token", cluster));
  agents.push(agent);
  return { agent, crd };
}

const sandboxSet = (namespace: string, name: string, uid = `uid-${name}`) => ({ namespace, name, uid, generation: 1, spec: { replicas: 0, image: "python:3.12" } });
const template = (team: string, name: string) => call(`/admin/teams/${team}/templates/${name}`);
const bind = (team: string, cluster: string) => call(`/admin/teams/${team}/clusters/${cluster}`, { method: "PUT" });

describe("a cluster not bound to a team", () => {
  it("gets none of the team's profiles or secret values, and cannot make a template, set the quota or policies, or claim sandboxes in its namespace", async () => {
    const acme = await createTeam(unique("bind-acme"));
    const VALUE = `tok-${unique("v")}`;
    await expectStatus(call("/secrets", { key: acme.key, body: { name: "api-key", value: VALUE } }), 201);
    const spec = { rules: [{ name: "key", match: [{ domains: ["api.acme.test"] }], actions: { tokenTransformation: { type: "ApiKey", targetHeader: "x-api-key", credentialRef: { secret: { name: "api-key" } } } } }] };
    await expectStatus(call(`/admin/teams/${acme.name}/security-profiles/tok`, { method: "PUT", body: spec }), 200);

    const evilName = unique("bind-evil");
    const { agent: evil, crd } = await connect(evilName, { networkRules: true });
    const set = await crd.call("sandboxsets", sandboxSet(acme.name, "grab"));
    expect(set).toMatchObject({ result: "rejected", code: "forbidden" });
    expect(set.message).toContain(`PUT /admin/teams/${acme.name}/clusters/${evilName}`);
    await expectError(template(acme.name, "grab"), 404);
    // Its delete of the team's own template changes nothing (and is answered, so it is not retried).
    expect(await crd.call("sandboxsets", { namespace: acme.name, name: acme.template, uid: "uid-x", deleted: true })).toMatchObject({ result: "applied" });
    await expectStatus(template(acme.name, acme.template), 200);

    const quotaBefore = (await expectStatus(call(`/admin/teams/${acme.name}/quota`), 200)).overrides;
    expect(await crd.call("quotas", { namespace: acme.name, limits: { runningSandboxes: 1000 } })).toMatchObject({ result: "rejected", code: "forbidden" });
    expect((await expectStatus(call(`/admin/teams/${acme.name}/quota`), 200)).overrides).toEqual(quotaBefore);

    expect(await crd.call("trafficpolicyobjects", { namespace: acme.name, name: "open", uid: "uid-open", generation: 1, spec: { egress: { rules: [{ action: "allow", to: [{ fqdn: "*.acme.test" }] }] } } })).toMatchObject({ result: "rejected", code: "forbidden" });
    await expectError(call(`/admin/teams/${acme.name}/traffic-policies/open`), 404);
    expect(await crd.call("securityprofileobjects", { namespace: acme.name, name: "evil", uid: "uid-evil", generation: 1, spec: { rules: [] } })).toMatchObject({ result: "rejected", code: "forbidden" });

    const claim = await crd.call("claims", { namespace: acme.name, claim: { name: "c", uid: unique("claim") }, templateName: acme.template, replicas: 1 });
    expect(claim).toMatchObject({ result: "rejected", code: "forbidden" });
    expect(claim.sandboxIds ?? []).toEqual([]);
    expect(await expectStatus(call("/v2/sandboxes", { key: acme.key }), 200)).toEqual([]);

    // The profile set the agent holds (sent with its welcome, and again on every change of a
    // profile or secret of a team it serves) never named acme.
    await expectStatus(call(`/admin/teams/${acme.name}/security-profiles/tok`, { method: "PUT", body: spec }), 200);
    await evil.waitUntil(() => evil.securityProfiles !== null);
    expect(evil.securityProfiles!.some((p) => p.team === acme.name)).toBe(false);
    expect(JSON.stringify(evil.profileSecrets ?? {})).not.toContain(VALUE);
  }, 60_000);

  it("once the admin binds it, acts for the team: a SandboxSet becomes the team's template on it, its quota and profiles apply, its agent gets the team's profiles", async () => {
    const acme = await createTeam(unique("bind-ok"));
    const cluster = unique("bind-second");
    const { agent, crd } = await connect(cluster, { networkRules: true });
    expect(await crd.call("sandboxsets", sandboxSet(acme.name, "app"))).toMatchObject({ result: "rejected", code: "forbidden" });
    expect(await expectStatus(bind(acme.name, cluster), 201)).toMatchObject({ team: acme.name, cluster });
    expect(await crd.call("sandboxsets", sandboxSet(acme.name, "app"))).toMatchObject({ result: "applied" });
    expect((await expectStatus(template(acme.name, "app"), 200)).spec).toMatchObject({ cluster });
    expect(await crd.call("quotas", { namespace: acme.name, limits: { runningSandboxes: 7 } })).toMatchObject({ result: "applied" });
    expect((await expectStatus(call(`/admin/teams/${acme.name}/quota`), 200)).overrides).toEqual({ runningSandboxes: 7 });
    expect(await crd.call("securityprofileobjects", { namespace: acme.name, name: "own", uid: "uid-own", generation: 1, spec: { rules: [] } })).toMatchObject({ result: "applied" });
    await agent.waitUntil(() => agent.securityProfiles?.some((p) => p.team === acme.name && p.name === "own") ?? false);
  }, 60_000);

  it("cannot size the team's pools or run updates over its sandboxes (PoolAutoscaler, SandboxUpdateOps), read their status, or remove them", async () => {
    const acme = await createTeam(unique("bind-ops"));
    const cluster = unique("bind-ops-c");
    const { crd } = await connect(cluster);
    const pa = { namespace: acme.name, name: "grow", uid: "uid-grow", generation: 1, target: acme.template, spec: { minReplicas: 3, maxReplicas: 3 } };
    expect(await crd.call("autoscalers", pa)).toMatchObject({ result: "rejected", code: "forbidden", message: expect.stringContaining(`PUT /admin/teams/${acme.name}/clusters/${cluster}`) });
    const autoscaler = async () => (await expectStatus(call(`/admin/teams/${acme.name}/templates/${acme.template}/autoscaler`), 200)).spec;
    expect(await autoscaler()).toBeNull();
    const ops = { namespace: acme.name, name: "roll", uid: "uid-roll", generation: 1, spec: { selector: {} } };
    expect(await crd.call("updateops", ops)).toMatchObject({ result: "rejected", code: "forbidden" });
    await expectError(call(`/admin/teams/${acme.name}/updateops/roll`), 404);

    // Bound, its objects apply; unbound again, it can neither read nor remove them (a delete is
    // answered done, so the agent does not retry it, and changes nothing).
    await expectStatus(bind(acme.name, cluster), 201);
    expect(await crd.call("autoscalers", pa)).toMatchObject({ result: "applied" });
    expect(await crd.call("updateops", ops)).toMatchObject({ result: "applied" });
    await expectStatus(call(`/admin/teams/${acme.name}/clusters/${cluster}`, { method: "DELETE" }), 204);
    expect(await crd.call("updateops", { namespace: acme.name, name: "roll", uid: "uid-roll", status: true })).toMatchObject({ result: "rejected", code: "forbidden" });
    expect(await crd.call("autoscalers", { namespace: acme.name, name: "grow", uid: "uid-grow", status: true })).toMatchObject({ result: "rejected", code: "forbidden" });
    expect(await crd.call("updateops", { namespace: acme.name, name: "roll", uid: "uid-roll", deleted: true })).toMatchObject({ result: "applied" });
    expect(await crd.call("autoscalers", { namespace: acme.name, present: [] })).toMatchObject({ result: "applied", message: "removed grow" });
    expect(await crd.call("autoscalers", { namespace: acme.name, present: [] })).toMatchObject({ result: "applied", message: "nothing to remove" });
    await expectStatus(call(`/admin/teams/${acme.name}/updateops/roll`), 200);
    expect(await autoscaler()).toMatchObject({ minReplicas: 3, maxReplicas: 3 });
  }, 60_000);

  it("a namespace with no team is not the cluster's to create (nothing is bound to it)", async () => {
    const { crd } = await connect(unique("bind-new"));
    const ns = unique("bind-none");
    expect(await crd.call("sandboxsets", sandboxSet(ns, "app"))).toMatchObject({ result: "rejected", code: "forbidden" });
    await expectError(call(`/admin/teams/${ns}/clusters`), 404);
  });
});

describe("what a cluster is sent of a team it is not bound to", () => {
  it("running the team's sandbox from another team's public template, it gets the team's profiles but none of its secret values; the team's bound cluster gets them", async () => {
    const owner = await createTeam(unique("m5-owner"));
    await expectStatus(call(`/admin/teams/${owner.name}/templates/${owner.template}`, { method: "PUT", body: { public: true, spec: { cluster: owner.cluster, replicas: 0 } } }), 200);
    const acme = await createTeam(unique("m5-acme"));
    const VALUE = `tok-${unique("v")}`;
    await expectStatus(call("/secrets", { key: acme.key, body: { name: "api-key", value: VALUE } }), 201);
    const spec = { rules: [{ name: "key", match: [{ domains: ["api.acme.test"] }], actions: { tokenTransformation: { type: "ApiKey", targetHeader: "x-api-key", credentialRef: { secret: { name: "api-key" } } } } }] };
    await expectStatus(call(`/admin/teams/${acme.name}/security-profiles/tok`, { method: "PUT", body: spec }), 200);
    const { agent: home } = await connect(acme.cluster, { networkRules: true });
    const { agent: other } = await connect(owner.cluster, { networkRules: true });
    await home.waitUntil(() => home.profileSecrets?.[acme.name]?.["api-key"] === VALUE);

    const sbx = await expectStatus(call("/v2/sandboxes", { key: acme.key, body: { templateID: owner.template } }), 201);
    await other.waitUntil(() => other.received.some((r) => r.intent.sandboxId === sbx.sandboxID));
    // Its restrictions apply where the sandbox runs; the credential rule there refuses the
    // request it would have added the value to (test/unit/traffic/l7-handler.test.ts).
    expect(other.securityProfiles!.some((p) => p.team === acme.name && p.name === "tok")).toBe(true);
    expect(other.profileSecrets?.[acme.name]).toBeUndefined();
    // Nor later, when a change of the secret sends the set again to the agents holding acme's profiles.
    const set = other.securityProfiles;
    const id = (await expectStatus(call("/secrets", { key: acme.key }), 200)).find((x: { name: string }) => x.name === "api-key").secretID;
    await expectStatus(call(`/secrets/${id}`, { key: acme.key, method: "POST", body: { value: `${VALUE}-2` } }), 200);
    await home.waitUntil(() => home.profileSecrets?.[acme.name]?.["api-key"] === `${VALUE}-2`);
    await other.waitUntil(() => other.securityProfiles !== set);
    expect(other.securityProfiles!.some((p) => p.team === acme.name)).toBe(true);
    expect(JSON.stringify(other.profileSecrets ?? {})).not.toContain(VALUE);
  }, 60_000);

  it("gets none of the team's TrafficPolicies, until it runs a sandbox of the team (they go before its intent) and after that sandbox is gone", async () => {
    const owner = await createTeam(unique("l7-owner"));
    await expectStatus(call(`/admin/teams/${owner.name}/templates/${owner.template}`, { method: "PUT", body: { public: true, spec: { cluster: owner.cluster, replicas: 0 } } }), 200);
    const acme = await createTeam(unique("l7-acme"));
    const { agent: home } = await connect(acme.cluster);
    const { agent: other } = await connect(owner.cluster);
    // A cluster serving another team only.
    const { agent: stranger } = await connect((await createTeam(unique("l7-stranger"))).cluster);
    const own = unique("acme-only");
    await expectStatus(call(`/admin/teams/${acme.name}/traffic-policies/${own}`, { method: "PUT", body: { egress: { rules: [{ action: "allow", to: [{ fqdn: "*.acme.test" }] }] } } }), 200);
    // A global policy put after it: every agent gets it, in a frame after the team policy's.
    const global = unique("l7-global");
    await expectStatus(call(`/admin/global-traffic-policies/${global}`, { method: "PUT", body: { egress: { rules: [{ action: "allow", to: [{ fqdn: "*.g.test" }] }] } } }), 200);
    const has = (a: ScriptedAgent, name: string) => a.trafficPolicies?.some((p) => p.name === name) ?? false;
    for (const a of [home, other, stranger]) await a.waitUntil(() => has(a, global));
    expect(has(home, own)).toBe(true);
    expect(has(other, own)).toBe(false);
    expect(has(stranger, own)).toBe(false);

    const sbx = await expectStatus(call("/v2/sandboxes", { key: acme.key, body: { templateID: owner.template } }), 201);
    await other.waitUntil(() => other.received.some((r) => r.intent.sandboxId === sbx.sandboxID));
    expect(has(other, own)).toBe(true);
    await expectStatus(call(`/sandboxes/${sbx.sandboxID}`, { key: acme.key, method: "DELETE" }), 204);
    await other.waitUntil(() => !has(other, own));
    expect(has(other, global)).toBe(true);
    expect(has(stranger, own)).toBe(false);
    await expectStatus(call(`/admin/global-traffic-policies/${global}`, { method: "DELETE" }), 204);
  }, 60_000);
});

/** Holds libSQL's reads of the tables `table` matches until `release()` (this isolate's client,
 * which the ClusterDO shares; tests of a file run one at a time). */
function holdReads(table: RegExp): { held: () => number; release: () => void } {
  const client = getDb(env).$client;
  const execute = client.execute.bind(client);
  let count = 0;
  let released = false;
  client.execute = (async (stmt: string | { sql: string }) => {
    if (table.test(typeof stmt === "string" ? stmt : stmt.sql)) {
      count++;
      // Polled on the reader's own timers: a promise another request resolves would look hung
      // to workerd, which cancels the reader.
      while (!released) await new Promise((r) => setTimeout(r, 10));
    }
    return execute(stmt as string);
  }) as typeof client.execute;
  return {
    held: () => count,
    release: () => {
      client.execute = execute;
      released = true;
    },
  };
}

/** Fails libSQL's next `times` reads of the tables `table` matches (this isolate's client, as holdReads). */
function failReads(table: RegExp, times: number): () => number {
  const client = getDb(env).$client;
  const execute = client.execute.bind(client);
  let failed = 0;
  client.execute = (async (stmt: string | { sql: string }) => {
    if (table.test(typeof stmt === "string" ? stmt : stmt.sql) && failed < times) {
      if (++failed === times) client.execute = execute;
      throw new Error("libSQL read failed (test)");
    }
    return execute(stmt as string);
  }) as typeof client.execute;
  return () => failed;
}

async function until(what: string, ok: () => boolean | Promise<boolean>, ms = 5_000): Promise<void> {
  for (const end = Date.now() + ms; !(await ok()); await new Promise((r) => setTimeout(r, 20))) if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
}

/** The ClusterDO's send state, read inside it (what no frame shows: whether a flush is waiting). */
type SendState = { secretsChain: Promise<void> | null; policiesChain: Promise<unknown>; policyTeams: { reset(): void }; profileTeams: { reset(): void } };
const inCluster = <T,>(cluster: string, f: (instance: SendState) => T): Promise<T> =>
  runInDurableObject(env.CLUSTER.get(env.CLUSTER.idFromName(cluster)), (instance: ClusterDO) => f(instance as unknown as SendState));

describe("a team's policies and profiles on a cluster that runs its sandbox but is not bound to it", () => {
  const policy = { egress: { rules: [{ action: "allow", to: [{ fqdn: "*.acme.test" }] }] } };
  const profile = { rules: [{ name: "hdr", match: [{ domains: ["api.acme.test"] }], actions: { headerManipulation: { set: [{ name: "x-team", value: "acme" }] } } }] };
  async function setup(prefix: string) {
    const owner = await createTeam(unique(`${prefix}-owner`));
    await expectStatus(call(`/admin/teams/${owner.name}/templates/${owner.template}`, { method: "PUT", body: { public: true, spec: { cluster: owner.cluster, replicas: 0 } } }), 200);
    const acme = await createTeam(unique(`${prefix}-acme`));
    await expectStatus(call(`/admin/teams/${acme.name}/traffic-policies/own`, { method: "PUT", body: policy }), 200);
    await expectStatus(call(`/admin/teams/${acme.name}/security-profiles/own`, { method: "PUT", body: profile }), 200);
    const { agent: other } = await connect(owner.cluster, { networkRules: true });
    await other.waitUntil(() => other.trafficPolicies !== null && other.securityProfiles !== null);
    const hasPolicy = () => other.trafficPolicies?.some((p) => p.team === acme.name) ?? false;
    const hasProfile = () => other.securityProfiles?.some((p) => p.team === acme.name) ?? false;
    const create = () => call("/v2/sandboxes", { key: acme.key, body: { templateID: owner.template } });
    const got = (id: string) => other.received.some((r) => r.intent.sandboxId === id);
    // A create answered while reads were held: its intent arrives, the team's policies before it (frames are handled in order).
    const landsWithPolicy = async (created: Promise<Response>) => {
      const sbx = await expectStatus(created, 201);
      await other.waitUntil(() => got(sbx.sandboxID));
      expect(hasPolicy()).toBe(true);
    };
    return { owner, acme, other, hasPolicy, hasProfile, create, got, landsWithPolicy };
  }
  /** setup, with acme bound to the cluster, a profile naming acme's secret `api-key` (VALUE), and
   * a sandbox of acme's there: the agent holds the value. */
  async function withSecret(prefix: string) {
    const s = await setup(prefix);
    const VALUE = `tok-${unique("v")}`;
    await expectStatus(call("/secrets", { key: s.acme.key, body: { name: "api-key", value: VALUE } }), 201);
    const tok = { rules: [{ name: "key", match: [{ domains: ["api.acme.test"] }], actions: { tokenTransformation: { type: "ApiKey", targetHeader: "x-api-key", credentialRef: { secret: { name: "api-key" } } } } }] };
    await expectStatus(call(`/admin/teams/${s.acme.name}/security-profiles/tok`, { method: "PUT", body: tok }), 200);
    await expectStatus(bind(s.acme.name, s.owner.cluster), 201);
    const sbx = await expectStatus(s.create(), 201);
    await s.other.waitUntil(() => s.got(sbx.sandboxID) && s.other.profileSecrets?.[s.acme.name]?.["api-key"] === VALUE);
    return { ...s, VALUE };
  }

  it("a sandbox created while the send that drops the team (its last sandbox gone) reads still gets them: that set goes first, then the team's, then its intent (review 27 H1)", async () => {
    const { owner, acme, other, hasPolicy, hasProfile, create, got } = await setup("h1");
    const first = await expectStatus(create(), 201);
    await other.waitUntil(() => got(first.sandboxID));
    expect(hasPolicy() && hasProfile()).toBe(true);
    const hold = holdReads(/from "(traffic_policies|security_profiles)"/i);
    let created: Promise<Response>;
    try {
      await expectStatus(call(`/sandboxes/${first.sandboxID}`, { key: acme.key, method: "DELETE" }), 204);
      // The prune's two sends (the team's last sandbox here is gone) wait on their reads.
      await until("the prune's reads", () => hold.held() >= 2);
      created = create();
      // The new sandbox's flush has run (its intent waits behind the prune's sends) before the reads go on.
      await until("the create's flush", () => inCluster(owner.cluster, (i) => i.secretsChain !== null));
    } finally {
      hold.release();
    }
    const policies = other.trafficPolicies;
    const profiles = other.securityProfiles;
    const second = await expectStatus(created, 201);
    await other.waitUntil(() => got(second.sandboxID) && other.trafficPolicies !== policies && other.securityProfiles !== profiles);
    // Frames are handled in order: whatever the prune sent, the team's came after it.
    expect(hasPolicy()).toBe(true);
    expect(hasProfile()).toBe(true);
  }, 60_000);

  it("a team's first sandbox: its profiles go while its policies are still being read (the two sends do not wait on each other), its intent after both", async () => {
    const { other, hasPolicy, hasProfile, create, landsWithPolicy } = await setup("m1");
    const hold = holdReads(/from "traffic_policies"/i);
    let created: Promise<Response>;
    try {
      created = create();
      await other.waitUntil(hasProfile, 5_000);
      expect(hasPolicy()).toBe(false);
      expect(other.received).toEqual([]);
    } finally {
      hold.release();
    }
    await landsWithPolicy(created);
  }, 60_000);

  it("after the cluster object wakes (the sets it sent are no longer in memory), the team's last sandbox going still prunes them (review 27 L2)", async () => {
    const { owner, acme, other, hasPolicy, hasProfile, create, got } = await setup("l2");
    const sbx = await expectStatus(create(), 201);
    await other.waitUntil(() => got(sbx.sandboxID));
    expect(hasPolicy() && hasProfile()).toBe(true);
    // What a wake loses: the agent's session stays (a hibernated socket), the object's memory of
    // what it sent that session does not (the constructor leaves these null).
    await inCluster(owner.cluster, (i) => {
      i.policyTeams.reset();
      i.profileTeams.reset();
    });
    await expectStatus(call(`/sandboxes/${sbx.sandboxID}`, { key: acme.key, method: "DELETE" }), 204);
    await other.waitUntil(() => !hasPolicy() && !hasProfile());
  }, 60_000);

  it("a send whose read fails goes again: the team's last sandbox gone, its policies still leave the agent (review 27 final M1)", async () => {
    const { acme, other, hasPolicy, create, got } = await setup("fail");
    const sbx = await expectStatus(create(), 201);
    await other.waitUntil(() => got(sbx.sandboxID));
    expect(hasPolicy()).toBe(true);
    const failed = failReads(/from "traffic_policies"/i, 1);
    await expectStatus(call(`/sandboxes/${sbx.sandboxID}`, { key: acme.key, method: "DELETE" }), 204);
    await until("the prune's failed read", () => failed() === 1);
    await other.waitUntil(() => !hasPolicy(), 10_000);
  }, 60_000);

  it("after the cluster object wakes, a change of a secret the team's profiles name reaches the agent (review 27 final M3)", async () => {
    const { owner, acme, other, VALUE } = await withSecret("fm3");
    await inCluster(owner.cluster, (i) => {
      i.policyTeams.reset();
      i.profileTeams.reset();
    });
    const id = (await expectStatus(call("/secrets", { key: acme.key }), 200)).find((x: { name: string }) => x.name === "api-key").secretID;
    await expectStatus(call(`/secrets/${id}`, { key: acme.key, method: "POST", body: { value: `${VALUE}-2` } }), 200);
    await other.waitUntil(() => other.profileSecrets?.[acme.name]?.["api-key"] === `${VALUE}-2`);
  }, 60_000);

  it("the literal header values the team's rules add (a hard-coded token) do not reach it: such a rule is a block there, the team's other rules apply; its bound cluster gets them (review 27 M2)", async () => {
    const { acme, other, create, got } = await setup("m2");
    const LITERAL = `Bearer sk-${unique("lit")}`;
    const lit = {
      rules: [
        { name: "hdr", match: [{ domains: ["api.acme.test"] }], actions: { headerManipulation: { set: [{ name: "authorization", value: LITERAL }] } } },
        { name: "tpl", match: [{ domains: ["tpl.acme.test"] }], actions: { tokenTransformation: { type: "ApiKey", targetHeader: "x-k", apiKey: { valueTemplate: `${LITERAL} {{ .apiKey }}` }, credentialRef: { secret: { name: "k" } } } } },
        { name: "strip", match: [{ domains: ["*"] }], actions: { headerManipulation: { remove: ["x-debug"] } } },
      ],
    };
    await expectStatus(call(`/admin/teams/${acme.name}/security-profiles/lit`, { method: "PUT", body: lit }), 200);
    const { agent: home } = await connect(acme.cluster, { networkRules: true });
    await home.waitUntil(() => JSON.stringify(home.securityProfiles ?? []).includes(LITERAL));
    const sbx = await expectStatus(create(), 201);
    await other.waitUntil(() => got(sbx.sandboxID));
    const sent = other.securityProfiles!.find((p) => p.team === acme.name && p.name === "lit")!;
    expect(JSON.stringify(other.securityProfiles)).not.toContain(LITERAL);
    expect(sent.spec.rules.map((r) => [r.name, Object.keys(r.actions)])).toEqual([
      ["hdr", ["block"]],
      ["tpl", ["block"]],
      ["strip", ["headerManipulation"]],
    ]);
    expect(sent.spec.rules[0]!.actions.block).toEqual({ statusCode: 403, body: expect.stringContaining(`is not bound to the team`) });
  }, 60_000);

  it("an unbind sends them again at once: the team's secret values leave the agent, its profiles and policies stay while its sandbox runs there (review 27 M3)", async () => {
    const { owner, acme, other, hasPolicy, hasProfile, VALUE } = await withSecret("m3");
    await expectStatus(call(`/admin/teams/${acme.name}/clusters/${owner.cluster}`, { method: "DELETE" }), 204);
    await other.waitUntil(() => other.profileSecrets?.[acme.name] === undefined);
    expect(hasProfile() && hasPolicy()).toBe(true);
  }, 60_000);
});

describe("global objects from a cluster (GlobalTrafficPolicy, GlobalSecurityProfile)", () => {
  const gtp = (name: string) => ({ namespace: null, name, uid: `uid-${name}`, generation: 1, spec: { egress: { rules: [{ action: "allow", to: [{ cidr: "0.0.0.0/0" }] }] } } });
  const gsp = (name: string) => ({ namespace: null, name, uid: `uid-${name}`, generation: 1, spec: { rules: [] } });

  it("are refused from a cluster GLOBAL_POLICY_CLUSTERS does not name, even one bound to teams: nothing is written, and it can neither delete nor read one", async () => {
    const cluster = unique("glob-evil");
    const team = await createTeam(unique("glob-team"), { cluster });
    const { crd } = await connect(cluster);
    const name = unique("open-all");
    const forbidden = { result: "rejected", code: "forbidden", message: expect.stringContaining("GLOBAL_POLICY_CLUSTERS") };
    expect(await crd.call("trafficpolicyobjects", gtp(name))).toMatchObject(forbidden);
    await expectError(call(`/admin/global-traffic-policies/${name}`), 404);
    expect(await crd.call("securityprofileobjects", gsp(name))).toMatchObject(forbidden);
    await expectError(call(`/admin/global-security-profiles/${name}`), 404);
    // The admin API's globals stay as they are.
    const kept = unique("kept");
    await expectStatus(call(`/admin/global-traffic-policies/${kept}`, { method: "PUT", body: { egress: { rules: [{ action: "reject", to: [{ cidr: "0.0.0.0/0" }] }] } } }), 200);
    await expectStatus(call(`/admin/global-security-profiles/${kept}`, { method: "PUT", body: { rules: [] } }), 200);
    for (const frame of ["trafficpolicyobjects", "securityprofileobjects"] as const) {
      expect(await crd.call(frame, { namespace: null, name: kept, uid: `uid-${kept}`, deleted: true })).toMatchObject(forbidden);
      expect(await crd.call(frame, { namespace: null, name: kept, uid: `uid-${kept}`, status: true })).toMatchObject(forbidden);
    }
    await expectStatus(call(`/admin/global-traffic-policies/${kept}`), 200);
    await expectStatus(call(`/admin/global-security-profiles/${kept}`), 200);
    // Its own team's objects still apply (the binding is about the team's namespace only).
    expect(await crd.call("trafficpolicyobjects", { ...gtp(name), namespace: team.name })).toMatchObject({ result: "applied" });
    await expectStatus(call(`/admin/global-traffic-policies/${kept}`, { method: "DELETE" }), 204);
    await expectStatus(call(`/admin/global-security-profiles/${kept}`, { method: "DELETE" }), 204);
  });

  it("apply from a cluster GLOBAL_POLICY_CLUSTERS names (vitest.config.ts: `policy-bind`), which is bound to no team", async () => {
    const { crd } = await connect("policy-bind");
    const name = unique("platform");
    expect(await crd.call("trafficpolicyobjects", gtp(name))).toMatchObject({ result: "applied" });
    expect(await crd.call("securityprofileobjects", gsp(name))).toMatchObject({ result: "applied" });
    await expectStatus(call(`/admin/global-traffic-policies/${name}`), 200);
    await expectStatus(call(`/admin/global-security-profiles/${name}`), 200);
    expect(await crd.call("trafficpolicyobjects", { namespace: null, name, uid: `uid-${name}`, deleted: true })).toMatchObject({ result: "applied" });
    expect(await crd.call("securityprofileobjects", { namespace: null, name, uid: `uid-${name}`, deleted: true })).toMatchObject({ result: "applied" });
    await expectError(call(`/admin/global-traffic-policies/${name}`), 404);
    await expectError(call(`/admin/global-security-profiles/${name}`), 404);
  });
});

describe("SINGLE_CLUSTER (vitest.config.ts names `the-only-cluster`)", () => {
  it("the install's only cluster acts for every team without a binding, and its SandboxSet creates a missing team; another cluster still needs a binding", async () => {
    const { crd } = await connect("the-only-cluster");
    const ns = unique("bind-single");
    expect(await crd.call("sandboxsets", sandboxSet(ns, "app"))).toMatchObject({ result: "applied" });
    expect((await expectStatus(template(ns, "app"), 200)).spec).toMatchObject({ cluster: "the-only-cluster" });
    expect(await crd.call("quotas", { namespace: ns, limits: { runningSandboxes: 3 } })).toMatchObject({ result: "applied" });
    // No binding was written for it (a cluster's own writes never bind).
    expect((await expectStatus(call(`/admin/teams/${ns}/clusters`), 200)).clusters).toEqual([]);
    const other = await connect(unique("bind-not-single"));
    expect(await other.crd.call("sandboxsets", sandboxSet(ns, "app2"))).toMatchObject({ result: "rejected", code: "forbidden" });
    // It writes the global objects too, without being named in GLOBAL_POLICY_CLUSTERS.
    const g = unique("single-global");
    expect(await crd.call("trafficpolicyobjects", { namespace: null, name: g, uid: `uid-${g}`, generation: 1, spec: { egress: { rules: [] } } })).toMatchObject({ result: "applied" });
    await expectStatus(call(`/admin/global-traffic-policies/${g}`, { method: "DELETE" }), 204);
  });
});

describe("admin API /admin/teams/{team}/clusters", () => {
  it("binds, lists and unbinds; an unbind is refused while a template of the team runs there", async () => {
    const team = await createTeam(unique("bind-api"));
    // Placing a template on a cluster bound the team to it.
    expect((await expectStatus(call(`/admin/teams/${team.name}/clusters`), 200)).clusters).toEqual([expect.objectContaining({ team: team.name, cluster: team.cluster })]);
    const other = unique("bind-api-c");
    await expectStatus(bind(team.name, other), 201);
    await expectStatus(bind(team.name, other), 200);
    const listed = await expectStatus(call(`/admin/teams/${team.name}/clusters`), 200);
    expect(listed.clusters.map((c: { cluster: string }) => c.cluster).sort()).toEqual([team.cluster, other].sort());
    await expectError(call(`/admin/teams/${team.name}/clusters/${team.cluster}`, { method: "DELETE" }), 409, new RegExp(team.template));
    await expectStatus(call(`/admin/teams/${team.name}/clusters/${other}`, { method: "DELETE" }), 204);
    await expectError(call(`/admin/teams/${team.name}/clusters/${other}`, { method: "DELETE" }), 404);
    expect((await expectStatus(call(`/admin/teams/${team.name}/clusters`), 200)).clusters.map((c: { cluster: string }) => c.cluster)).toEqual([team.cluster]);
  });

  it("an unbind racing the cluster's SandboxSet never leaves a template of the team on a cluster it is not bound to", async () => {
    const team = await createTeam(unique("bind-race"));
    const cluster = unique("bind-race-c");
    const { crd } = await connect(cluster);
    const unbind = () => call(`/admin/teams/${team.name}/clusters/${cluster}`, { method: "DELETE" });
    for (let i = 0; i < 12; i++) {
      await expectStatus(bind(team.name, cluster), 201);
      const name = `race-${i}`;
      const [set, del] = await Promise.all([crd.call("sandboxsets", sandboxSet(team.name, name)), unbind()]);
      const bound = (await expectStatus(call(`/admin/teams/${team.name}/clusters`), 200)).clusters.some((c: { cluster: string }) => c.cluster === cluster);
      const placed = (await template(team.name, name)).status === 200;
      expect([204, 409]).toContain(del.status);
      // A template on the cluster keeps its team bound there (the unbind's 409), and an applied
      // SandboxSet is a template.
      expect({ i, placed, bound: placed ? bound : true, set: set.result === "applied" ? placed : true }).toEqual({ i, placed, bound: true, set: true });
      if (placed) {
        await expectStatus(call(`/admin/teams/${team.name}/templates/${name}`, { method: "DELETE" }), 204);
        await expectStatus(unbind(), 204);
      }
    }
  }, 120_000);

  it("a cluster unbound after its SandboxSet's template was removed prunes that SandboxSet once, not at every start", async () => {
    const team = await createTeam(unique("bind-prune"));
    const cluster = unique("bind-prune-c");
    const { crd } = await connect(cluster);
    await expectStatus(bind(team.name, cluster), 201);
    expect(await crd.call("sandboxsets", sandboxSet(team.name, "app"))).toMatchObject({ result: "applied" });
    await expectStatus(call(`/admin/teams/${team.name}/templates/app`, { method: "DELETE" }), 204);
    await expectStatus(call(`/admin/teams/${team.name}/clusters/${cluster}`, { method: "DELETE" }), 204);
    // The agent's inventory after a start no longer has it (deleted while the agent was down).
    expect(await crd.call("sandboxsets", { namespace: team.name, present: [] })).toMatchObject({ result: "applied", message: "removed app" });
    expect(await crd.call("sandboxsets", { namespace: team.name, present: [] })).toMatchObject({ result: "applied", message: "nothing to remove" });
  });

  it("needs the admin key; 404 for an unknown team; 400 for a bad team or cluster name", async () => {
    const team = await createTeam(unique("bind-auth"));
    await expectError(call(`/admin/teams/${team.name}/clusters/x`, { method: "PUT", key: team.key }), 403);
    await expectError(call(`/admin/teams/${team.name}/clusters`, { key: null }), 401);
    const ghost = unique("bind-ghost");
    await expectError(call(`/admin/teams/${ghost}/clusters/c`, { method: "PUT" }), 404, /not found/);
    await expectError(call(`/admin/teams/${ghost}/clusters/c`, { method: "DELETE" }), 404);
    await expectError(call(`/admin/teams/${team.name}/clusters/Bad_Cluster`, { method: "PUT" }), 400, /cluster name/);
    await expectError(call(`/admin/teams/${team.name}/clusters/${"c".repeat(64)}`, { method: "PUT" }), 400, /cluster name/);
    await expectError(call(`/admin/teams/Bad_Team/clusters/c`, { method: "PUT" }), 400, /team name/);
  });
});
