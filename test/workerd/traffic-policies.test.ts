// TrafficPolicy / GlobalTrafficPolicy through the admin API: stored, sent whole to the cluster's
// agent at once (and with every welcome), status listing the live sandboxes a policy selects (by
// the `label:<k>` metadata of E2B's create; a global one by the platform's template label only),
// bad specs refused with the field at fault.
import { exports } from "cloudflare:workers";
import { afterAll, describe, expect, it } from "vitest";
import { CrdLink } from "../support/crd-link.ts";
import { fetchTransport, ScriptedAgent } from "../support/scripted-agent.ts";
import { call, createTeam, expectError, expectStatus, startAgent, unique } from "./helpers.ts";

const agents: ScriptedAgent[] = [];
afterAll(() => agents.forEach((a) => a.disconnect()));

const web = { priority: 10, selector: { matchLabels: { app: "web" } }, egress: { rules: [{ action: "allow", to: [{ fqdn: "*.pypi.test" }], ports: [{ port: 443 }] }] } };

describe("traffic policies (admin API)", () => {
  it("a team's policy reaches its cluster's agent and lists the sandboxes it selects; a global one every team's", async () => {
    const team = await createTeam(unique("tp"));
    const agent = await startAgent(team.cluster);
    agents.push(agent);
    const labelled = await expectStatus(call("/v2/sandboxes", { key: team.key, body: { templateID: team.template, metadata: { "label:app": "web" } } }), 201);
    const plain = await expectStatus(call("/v2/sandboxes", { key: team.key, body: { templateID: team.template } }), 201);

    const put = await expectStatus(call(`/admin/teams/${team.name}/traffic-policies/web`, { method: "PUT", body: web }), 200);
    expect(put).toMatchObject({ kind: "TrafficPolicy", team: team.name, name: "web", spec: { priority: 10 }, status: { selectedSandboxes: [labelled.sandboxID], agentsNotified: expect.any(Number) } });
    await agent.waitUntil(() => agent.trafficPolicies?.some((p) => p.team === team.name && p.name === "web") ?? false);
    expect(agent.trafficPolicies!.find((p) => p.name === "web")!.spec.egress.rules[0]).toEqual(web.egress.rules[0]);

    const global = unique("baseline");
    const g = await expectStatus(call(`/admin/global-traffic-policies/${global}`, { method: "PUT", body: { egress: { rules: [{ action: "reject", to: [{ cidr: "0.0.0.0/0" }] }] } } }), 200);
    expect(g.kind).toBe("GlobalTrafficPolicy");
    expect(g.spec.priority).toBe(1000);
    expect(g.status.selectedSandboxes).toEqual(expect.arrayContaining([labelled.sandboxID, plain.sandboxID]));
    await agent.waitUntil(() => agent.trafficPolicies?.some((p) => p.team === null && p.name === global) ?? false);
    // A global one selects by the platform's labels only (review 25 M4): the template's, never a
    // tenant's `label:` metadata, which any API key sets.
    const grant = { egress: { rules: [{ action: "allow", to: [{ cidr: "10.20.0.0/16" }] }] } };
    const byTenant = await expectStatus(call(`/admin/global-traffic-policies/${global}-t`, { method: "PUT", body: { ...grant, selector: { matchLabels: { app: "web" } } } }), 200);
    expect(byTenant.status.selectedSandboxes).toEqual([]);
    // Template ids are unique per team only: another team names its template as this one's
    // (review 26 H2). A global selector by template alone is refused; with the team it selects
    // this team's sandboxes, never the twin's.
    const other = await createTeam(unique("tp-twin"), { cluster: team.cluster });
    await expectStatus(call(`/admin/teams/${other.name}/templates/${team.template}`, { method: "PUT", body: { spec: { cluster: team.cluster, replicas: 0 } } }), 201);
    const twin = await expectStatus(call("/v2/sandboxes", { key: other.key, body: { templateID: team.template } }), 201);
    for (const selector of [{ matchLabels: { "agents.kruise.io/sandbox-template": team.template } }, { matchExpressions: [{ key: "agents.kruise.io/sandbox-template", operator: "NotIn", values: ["trusted"] }] }]) {
      await expectError(call(`/admin/global-traffic-policies/${global}-p`, { method: "PUT", body: { ...grant, selector } }), 400, /must also name the teams \(agents\.kruise\.io\/sandbox-team/);
    }
    await expectError(call(`/admin/global-traffic-policies/${global}-p`), 404);
    const byTemplate = await expectStatus(call(`/admin/global-traffic-policies/${global}-p`, { method: "PUT", body: { ...grant, selector: { matchLabels: { "agents.kruise.io/sandbox-template": team.template, "agents.kruise.io/sandbox-team": team.name } } } }), 200);
    expect(byTemplate.status.selectedSandboxes).toEqual([labelled.sandboxID, plain.sandboxID].sort());
    const twinTeam = await expectStatus(call(`/admin/global-traffic-policies/${global}-p`, { method: "PUT", body: { ...grant, selector: { matchLabels: { "agents.kruise.io/sandbox-template": team.template }, matchExpressions: [{ key: "agents.kruise.io/sandbox-team", operator: "In", values: [other.name] }] } } }), 200);
    expect(twinTeam.status.selectedSandboxes).toEqual([twin.sandboxID]);
    // Nor may a tenant's label name the platform's key (refused at create).
    await expectError(call("/v2/sandboxes", { key: team.key, body: { templateID: team.template, metadata: { "label:agents.kruise.io/sandbox-template": "other" } } }), 400);
    for (const n of [`${global}-t`, `${global}-p`]) await expectStatus(call(`/admin/global-traffic-policies/${n}`, { method: "DELETE" }), 204);

    // An agent that connects later gets the set with its welcome.
    agent.disconnect();
    const again = await startAgent(team.cluster);
    agents.push(again);
    await again.waitUntil(() => again.trafficPolicies?.some((p) => p.name === "web") ?? false);

    const listed = await expectStatus(call(`/admin/teams/${team.name}/traffic-policies`), 200);
    expect(listed.map((p: { name: string }) => p.name)).toEqual(["web"]);
    await expectStatus(call(`/admin/teams/${team.name}/traffic-policies/web`, { method: "DELETE" }), 204);
    await again.waitUntil(() => !(again.trafficPolicies?.some((p) => p.name === "web") ?? true));
    await expectStatus(call(`/admin/global-traffic-policies/${global}`, { method: "DELETE" }), 204);
    await expectError(call(`/admin/teams/${team.name}/traffic-policies/web`), 404, 'TrafficPolicy "web" not found');
  });

  it("refuses bad specs and names with a 4xx saying what is wrong; needs the admin key", async () => {
    const team = await createTeam(unique("tp"));
    await expectError(call(`/admin/teams/${team.name}/traffic-policies/x`, { method: "PUT", body: { egress: { rules: [{ action: "allow", to: [{ cidr: "10.0.0.300/8" }] }] } } }), 400, /cidr/);
    await expectError(call(`/admin/teams/${team.name}/traffic-policies/x`, { method: "PUT", body: { egress: { rules: [{ action: "allow", to: [{ fqdn: "a.test" }], ports: [{ port: 9, endPort: 8 }] }] } } }), 400, /endPort/);
    await expectError(call(`/admin/teams/${team.name}/traffic-policies/Bad_Name`, { method: "PUT", body: web }), 400, /policy name/);
    await expectError(call(`/admin/teams/no-such-team-x/traffic-policies/x`, { method: "PUT", body: web }), 404);
    await expectError(call(`/admin/teams/${team.name}/traffic-policies/x`, { method: "PUT", body: web, key: team.key }), 403);
  });
});

describe("GlobalTrafficPolicy objects from a cluster", () => {
  // The agent refuses such a global before it sends it; the edge refuses it too, for an agent that
  // does not (an older or a rogue one): a template id is unique per team only (review 26 H2).
  it("a selector naming a template without its teams is rejected and not stored", async () => {
    const agent = new ScriptedAgent();
    agents.push(agent);
    const crd = new CrdLink();
    await crd.connect(agent, fetchTransport((url, init) => exports.default.fetch(url, init) as never, "test-cluster-token", "policy-gtp"));
    const name = unique("gtp");
    const grant = { egress: { rules: [{ action: "allow", to: [{ cidr: "10.20.0.0/16" }] }] } };
    const reply = await crd.call("trafficpolicyobjects", { namespace: null, name, uid: `uid-${name}`, generation: 1, spec: { ...grant, selector: { matchLabels: { "agents.kruise.io/sandbox-template": "code-interpreter" } } } });
    expect(reply).toMatchObject({ result: "rejected", code: "bad_request" });
    expect(reply.message).toMatch(/agents\.kruise\.io\/sandbox-team/);
    await expectError(call(`/admin/global-traffic-policies/${name}`), 404);
    const pinned = await crd.call("trafficpolicyobjects", { namespace: null, name, uid: `uid-${name}`, generation: 1, spec: { ...grant, selector: { matchLabels: { "agents.kruise.io/sandbox-template": "code-interpreter", "agents.kruise.io/sandbox-team": "acme" } } } });
    expect(pinned).toMatchObject({ result: "applied" });
    await expectStatus(call(`/admin/global-traffic-policies/${name}`, { method: "DELETE" }), 204);
  });
});
