// SecurityProfile / GlobalSecurityProfile through the admin API: stored, sent whole to the
// cluster's agent at once (and with every welcome), status listing the live sandboxes a profile
// selects (by the `label:<k>` metadata of E2B's create); what the proxy cannot enforce as written
// refused with a 400 naming it. SecurityProfile objects of a cluster (the CRD sync's
// `securityprofileobjects`) land in the same set, only from a cluster bound to the team. A sandbox's network audit through the team API: the agent's
// records, never another team's.
import { env, exports } from "cloudflare:workers";
import { afterAll, describe, expect, it } from "vitest";
import { secretChanged } from "../../durable-objects/operations/security-profiles.ts";
import { getDb } from "../../durable-objects/store/db.ts";
import { securityProfiles } from "../../schema/db/tables.ts";
import { auditFields } from "../../schema/api/network-audit.ts";
import { CrdLink } from "../support/crd-link.ts";
import { fetchTransport, ScriptedAgent } from "../support/scripted-agent.ts";
import { bindTeam, call, createTeam, expectError, expectStatus, startAgent, unique } from "./helpers.ts";

const agents: ScriptedAgent[] = [];
afterAll(() => agents.forEach((a) => a.disconnect()));

const mcp = {
  priority: 10,
  selector: { matchLabels: { app: "agent" } },
  rules: [{ name: "tools", match: [{ domains: ["mcp.example.test"], paths: [{ type: "Exact", value: "/mcp" }] }], actions: { mcpToolPolicy: { rules: [{ toolNames: ["read_*"], action: "allow" }] } } }],
  rateLimit: { requestsPerMinute: 60 },
};
const rule = (match: unknown, actions: unknown = { block: {} }) => ({ rules: [{ name: "r", match: [match], actions }] });
const put = (team: string, body: unknown, key?: string) => call(`/admin/teams/${team}/security-profiles/x`, { method: "PUT", body, ...(key ? { key } : {}) });

describe("security profiles (admin API)", () => {
  it("a team's profile reaches its cluster's agent and lists the sandboxes it selects; a global one every team's", async () => {
    const team = await createTeam(unique("sp"));
    const agent = await startAgent(team.cluster, { networkRules: true });
    agents.push(agent);
    const labelled = await expectStatus(call("/v2/sandboxes", { key: team.key, body: { templateID: team.template, metadata: { "label:app": "agent" } } }), 201);
    const plain = await expectStatus(call("/v2/sandboxes", { key: team.key, body: { templateID: team.template } }), 201);

    const body = await expectStatus(call(`/admin/teams/${team.name}/security-profiles/mcp`, { method: "PUT", body: mcp }), 200);
    expect(body).toMatchObject({ kind: "SecurityProfile", team: team.name, name: "mcp", spec: { priority: 10, rateLimit: { requestsPerMinute: 60 } }, status: { selectedSandboxes: [labelled.sandboxID] } });
    await agent.waitUntil(() => agent.securityProfiles?.some((p) => p.team === team.name && p.name === "mcp") ?? false);
    const sent = agent.securityProfiles!.find((p) => p.name === "mcp")!;
    expect(sent.spec.rules).toEqual(mcp.rules);
    expect(sent.createdAt).toBeGreaterThan(0);

    const global = unique("audit-all");
    const g = await expectStatus(call(`/admin/global-security-profiles/${global}`, { method: "PUT", body: rule({ domains: ["*.internal.test"] }) }), 200);
    expect(g.kind).toBe("GlobalSecurityProfile");
    expect(g.spec.priority).toBe(1000);
    expect(g.status.selectedSandboxes).toEqual(expect.arrayContaining([labelled.sandboxID, plain.sandboxID]));

    // Replacing keeps the creation time (it orders profiles of equal priority).
    await expectStatus(call(`/admin/teams/${team.name}/security-profiles/mcp`, { method: "PUT", body: { ...mcp, priority: 20 } }), 200);
    await agent.waitUntil(() => agent.securityProfiles?.some((p) => p.name === "mcp" && p.spec.priority === 20) ?? false);
    expect(agent.securityProfiles!.find((p) => p.name === "mcp")!.createdAt).toBe(sent.createdAt);

    // An agent that connects later gets the set with its welcome.
    agent.disconnect();
    const again = await startAgent(team.cluster, { networkRules: true });
    agents.push(again);
    await again.waitUntil(() => again.securityProfiles?.some((p) => p.name === "mcp") ?? false);

    const listed = await expectStatus(call(`/admin/teams/${team.name}/security-profiles`), 200);
    expect(listed.map((p: { name: string }) => p.name)).toEqual(["mcp"]);
    await expectStatus(call(`/admin/teams/${team.name}/security-profiles/mcp`, { method: "DELETE" }), 204);
    await again.waitUntil(() => !(again.securityProfiles?.some((p) => p.name === "mcp") ?? true));
    await expectStatus(call(`/admin/global-security-profiles/${global}`, { method: "DELETE" }), 204);
    await expectError(call(`/admin/teams/${team.name}/security-profiles/mcp`), 404, 'SecurityProfile "mcp" not found');
    // Two agent sessions and five frames: more than the tier's default on a loaded machine.
  }, 60_000);

  it("a team's profile goes only to the clusters that serve the team, and with a first sandbox from a public template", async () => {
    const a = await createTeam(unique("sp-a"));
    const b = await createTeam(unique("sp-b"));
    const c = await createTeam(unique("sp-c"));
    // a's template is public: any team may run a sandbox on a's cluster.
    await expectStatus(call(`/admin/teams/${a.name}/templates/${a.template}`, { method: "PUT", body: { public: true, spec: { cluster: a.cluster, replicas: 0 } } }), 200);
    const agentA = await startAgent(a.cluster, { networkRules: true });
    const agentB = await startAgent(b.cluster, { networkRules: true });
    agents.push(agentA, agentB);
    const token = { rules: [{ name: "key", match: [{ domains: ["api.b.test"] }], actions: { headerManipulation: { set: [{ name: "x-api-key", value: "literal-token-of-b" }] } } }] };
    await expectStatus(call(`/admin/teams/${b.name}/security-profiles/key`, { method: "PUT", body: token }), 200);
    await expectStatus(call(`/admin/teams/${c.name}/security-profiles/c-only`, { method: "PUT", body: rule({ domains: ["c.test"] }) }), 200);
    const global = unique("g");
    await expectStatus(call(`/admin/global-security-profiles/${global}`, { method: "PUT", body: rule({ domains: ["g.test"] }) }), 200);
    await agentB.waitUntil(() => agentB.securityProfiles?.some((p) => p.team === b.name) ?? false);
    // a's agent got the set that followed both puts (the global one) and no profile of b or c.
    await agentA.waitUntil(() => agentA.securityProfiles?.some((p) => p.name === global) ?? false);
    expect(agentA.securityProfiles!.filter((p) => p.team !== null && p.team !== a.name)).toEqual([]);
    expect(JSON.stringify(agentA.securityProfiles)).not.toContain("literal-token-of-b");
    expect(agentB.securityProfiles!.some((p) => p.team === c.name)).toBe(false);

    // c's first sandbox on a's cluster: c's profiles reach a's agent before the sandbox's intent.
    const sbx = await expectStatus(call("/v2/sandboxes", { key: c.key, body: { templateID: a.template } }), 201);
    await agentA.waitUntil(() => agentA.received.some((r) => r.intent.sandboxId === sbx.sandboxID));
    expect(agentA.securityProfiles!.some((p) => p.team === c.name && p.name === "c-only")).toBe(true);
    expect(agentA.securityProfiles!.some((p) => p.team === b.name)).toBe(false);
    // Later sends keep c there (its sandbox lives on a's cluster).
    await expectStatus(call(`/admin/global-security-profiles/${global}`, { method: "DELETE" }), 204);
    await agentA.waitUntil(() => !(agentA.securityProfiles?.some((p) => p.name === global) ?? true));
    expect(agentA.securityProfiles!.some((p) => p.team === c.name)).toBe(true);
  }, 60_000);

  it("a team whose last sandbox on a cluster is gone is removed from that agent's set at once, without a reconnect", async () => {
    const a = await createTeam(unique("pr-a"));
    const c = await createTeam(unique("pr-c"));
    await expectStatus(call(`/admin/teams/${a.name}/templates/${a.template}`, { method: "PUT", body: { public: true, spec: { cluster: a.cluster, replicas: 0 } } }), 200);
    const agentA = await startAgent(a.cluster, { networkRules: true });
    agents.push(agentA);
    await expectStatus(call(`/admin/teams/${a.name}/security-profiles/own`, { method: "PUT", body: rule({ domains: ["a.test"] }) }), 200);
    await expectStatus(call(`/admin/teams/${c.name}/security-profiles/c-only`, { method: "PUT", body: rule({ domains: ["c.test"] }, { headerManipulation: { set: [{ name: "x-k", value: "literal-of-c" }] } }) }), 200);
    const one = await expectStatus(call("/v2/sandboxes", { key: c.key, body: { templateID: a.template } }), 201);
    const two = await expectStatus(call("/v2/sandboxes", { key: c.key, body: { templateID: a.template } }), 201);
    await agentA.waitUntil(() => agentA.securityProfiles?.some((p) => p.team === c.name) ?? false);
    // One of c's two sandboxes gone: c is still served.
    await expectStatus(call(`/sandboxes/${one.sandboxID}`, { key: c.key, method: "DELETE" }), 204);
    await agentA.waitUntil(() => !agentA.running().includes(one.sandboxID));
    const global = unique("g");
    await expectStatus(call(`/admin/global-security-profiles/${global}`, { method: "PUT", body: rule({ domains: ["g.test"] }) }), 200);
    await agentA.waitUntil(() => agentA.securityProfiles?.some((p) => p.name === global) ?? false);
    expect(agentA.securityProfiles!.some((p) => p.team === c.name)).toBe(true);
    await expectStatus(call(`/admin/global-security-profiles/${global}`, { method: "DELETE" }), 204);
    // The last one gone (the agent says Deleted): a set without c follows, a's own profile stays.
    await expectStatus(call(`/sandboxes/${two.sandboxID}`, { key: c.key, method: "DELETE" }), 204);
    await agentA.waitUntil(() => !(agentA.securityProfiles?.some((p) => p.team === c.name) ?? true));
    expect(agentA.securityProfiles!.some((p) => p.team === a.name && p.name === "own")).toBe(true);
    expect(JSON.stringify(agentA.securityProfiles)).not.toContain("literal-of-c");
  }, 60_000);

  it("a new team's intent waits while its profiles cannot be delivered, and goes after them once a retry delivers them", async () => {
    const a = await createTeam(unique("rt-a"));
    const c = await createTeam(unique("rt-c"));
    await expectStatus(call(`/admin/teams/${a.name}/templates/${a.template}`, { method: "PUT", body: { public: true, spec: { cluster: a.cluster, replicas: 0 } } }), 200);
    const agentA = await startAgent(a.cluster, { networkRules: true });
    agents.push(agentA);
    await expectStatus(call(`/admin/teams/${c.name}/security-profiles/c-only`, { method: "PUT", body: rule({ domains: ["c.test"] }) }), 200);
    await agentA.waitUntil(() => agentA.securityProfiles !== null);
    // libSQL fails every read of the profiles (this isolate's client, which the ClusterDO shares)
    // until released: the profile send for c's first sandbox fails.
    const client = getDb(env).$client;
    const execute = client.execute.bind(client);
    let failed = 0;
    client.execute = (async (stmt: string | { sql: string }) => {
      if (/from "security_profiles"/i.test(typeof stmt === "string" ? stmt : stmt.sql)) {
        failed++;
        throw new Error("libSQL unavailable (test)");
      }
      return execute(stmt as string);
    }) as typeof client.execute;
    let sbx: { sandboxID: string };
    try {
      const created = call("/v2/sandboxes", { key: c.key, body: { templateID: a.template } });
      // Polled from the test's own context (the failures happen in the ClusterDO's).
      while (failed < 2) await new Promise((r) => setTimeout(r, 20));
      // Two failed deliveries (the first and a retry): the intent has not left.
      expect(agentA.received).toEqual([]);
      client.execute = execute;
      sbx = await expectStatus(created, 201);
    } finally {
      client.execute = execute;
    }
    await agentA.waitUntil(() => agentA.received.some((r) => r.intent.sandboxId === sbx.sandboxID), 10_000);
    // Frames are handled in order: c's profiles came before the intent.
    expect(agentA.securityProfiles!.some((p) => p.team === c.name && p.name === "c-only")).toBe(true);
  }, 60_000);

  it("a team's own template named like another team's public one does not make the other's cluster serve it", async () => {
    const a = await createTeam(unique("sp-pub"));
    const x = await createTeam(unique("sp-same"));
    await expectStatus(call(`/admin/teams/${a.name}/templates/${a.template}`, { method: "PUT", body: { public: true, spec: { cluster: a.cluster, replicas: 0 } } }), 200);
    // x's own template of the same id, on x's cluster; x's sandbox of it runs there.
    await expectStatus(call(`/admin/teams/${x.name}/templates/${a.template}`, { method: "PUT", body: { spec: { cluster: x.cluster, replicas: 0 } } }), 201);
    const agentA = await startAgent(a.cluster, { networkRules: true });
    const agentX = await startAgent(x.cluster, { networkRules: true });
    agents.push(agentA, agentX);
    const sbx = await expectStatus(call("/v2/sandboxes", { key: x.key, body: { templateID: a.template } }), 201);
    await agentX.waitUntil(() => agentX.received.some((r) => r.intent.sandboxId === sbx.sandboxID));
    await expectStatus(call(`/admin/teams/${x.name}/security-profiles/key`, { method: "PUT", body: rule({ domains: ["x.test"] }, { headerManipulation: { set: [{ name: "x-k", value: "literal-of-x" }] } }) }), 200);
    await agentX.waitUntil(() => agentX.securityProfiles?.some((p) => p.team === x.name) ?? false);
    // A later global put: a's agent has the set that followed x's put, without x's profile.
    const global = unique("g");
    await expectStatus(call(`/admin/global-security-profiles/${global}`, { method: "PUT", body: rule({ domains: ["g.test"] }) }), 200);
    await agentA.waitUntil(() => agentA.securityProfiles?.some((p) => p.name === global) ?? false);
    expect(JSON.stringify(agentA.securityProfiles)).not.toContain("literal-of-x");
    await expectStatus(call(`/admin/global-security-profiles/${global}`, { method: "DELETE" }), 204);
  }, 60_000);

  it("a team whose only template on a cluster is deleted, or moved to another cluster, leaves that agent's set at once", async () => {
    const d = await createTeam(unique("sp-gone"));
    const m = await createTeam(unique("sp-move"));
    const agentD = await startAgent(d.cluster, { networkRules: true });
    const agentM = await startAgent(m.cluster, { networkRules: true });
    agents.push(agentD, agentM);
    for (const t of [d, m]) await expectStatus(call(`/admin/teams/${t.name}/security-profiles/lit`, { method: "PUT", body: rule({ domains: ["x.test"] }, { headerManipulation: { set: [{ name: "x-k", value: `literal-of-${t.name}` }] } }) }), 200);
    await agentD.waitUntil(() => agentD.securityProfiles?.some((p) => p.team === d.name) ?? false);
    await agentM.waitUntil(() => agentM.securityProfiles?.some((p) => p.team === m.name) ?? false);
    // No sandbox of either team runs: the template was all that made each cluster serve it.
    await expectStatus(call(`/admin/teams/${d.name}/templates/${d.template}`, { method: "DELETE" }), 204);
    await agentD.waitUntil(() => !(agentD.securityProfiles?.some((p) => p.team === d.name) ?? true));
    expect(JSON.stringify(agentD.securityProfiles)).not.toContain(`literal-of-${d.name}`);
    await expectStatus(call(`/admin/teams/${m.name}/templates/${m.template}`, { method: "PUT", body: { spec: { cluster: unique("elsewhere"), replicas: 0 } } }), 200);
    await agentM.waitUntil(() => !(agentM.securityProfiles?.some((p) => p.team === m.name) ?? true));
    expect(JSON.stringify(agentM.securityProfiles)).not.toContain(`literal-of-${m.name}`);
  }, 60_000);

  it("a running sandbox whose template was deleted keeps its team's profiles when the agent reconnects", async () => {
    const d = await createTeam(unique("sp-del"));
    const agent = await startAgent(d.cluster, { networkRules: true });
    agents.push(agent);
    const sbx = await expectStatus(call("/v2/sandboxes", { key: d.key, body: { templateID: d.template } }), 201);
    await agent.waitUntil(() => agent.received.some((r) => r.intent.sandboxId === sbx.sandboxID));
    await expectStatus(call(`/admin/teams/${d.name}/security-profiles/keep`, { method: "PUT", body: rule({ domains: ["d.test"] }) }), 200);
    await agent.waitUntil(() => agent.securityProfiles?.some((p) => p.team === d.name) ?? false);
    await expectStatus(call(`/admin/teams/${d.name}/templates/${d.template}`, { method: "DELETE" }), 204);
    agent.disconnect();
    const again = await startAgent(d.cluster, { networkRules: true });
    agents.push(again);
    await again.waitUntil(() => again.securityProfiles !== null);
    expect(again.securityProfiles!.some((p) => p.team === d.name && p.name === "keep")).toBe(true);
  }, 60_000);

  it("tokenTransformation secrets go with the set to the serving cluster's agent that enforces network.rules, per team, never elsewhere", async () => {
    const a = await createTeam(unique("sp-tok"));
    const other = await createTeam(unique("sp-tok-other"));
    const agent = await startAgent(a.cluster, { networkRules: true });
    const stranger = await startAgent(other.cluster, { networkRules: true });
    agents.push(agent, stranger);
    const VALUE = `tok-${unique("v")}`;
    await expectStatus(call("/secrets", { key: a.key, body: { name: "Api-Key", value: VALUE } }), 201);
    await expectStatus(call("/secrets", { key: a.key, body: { name: "unnamed", value: "value-no-rule-names" } }), 201);
    const spec = { rules: [{ name: "key", match: [{ domains: ["api.a.test"] }], actions: { tokenTransformation: { type: "ApiKey", targetHeader: "x-api-key", credentialRef: { secret: { name: "api-key" } } } } }] };
    await expectStatus(call(`/admin/teams/${a.name}/security-profiles/tok`, { method: "PUT", body: spec }), 200);
    await agent.waitUntil(() => agent.profileSecrets?.[a.name] !== undefined);
    expect(agent.profileSecrets).toEqual({ [a.name]: { "api-key": VALUE } });
    expect(JSON.stringify(agent.securityProfiles)).not.toContain(VALUE);
    // A new value reaches the agent; another cluster never sees it, nor gets a set again.
    // A global traffic policy put after it: its frame follows any profile frame on the socket.
    const barrier = async () => {
      const tp = unique("tp");
      await expectStatus(call(`/admin/global-traffic-policies/${tp}`, { method: "PUT", body: { egress: { rules: [{ action: "allow", to: [{ fqdn: "*.a.test" }] }] } } }), 200);
      await stranger.waitUntil(() => stranger.trafficPolicies?.some((p) => p.name === tp) ?? false);
      await expectStatus(call(`/admin/global-traffic-policies/${tp}`, { method: "DELETE" }), 204);
    };
    await barrier();
    const strangerSet = stranger.securityProfiles;
    const id = (await expectStatus(call("/secrets", { key: a.key }), 200)).find((x: { name: string }) => x.name === "api-key").secretID;
    await expectStatus(call(`/secrets/${id}`, { key: a.key, method: "POST", body: { value: `${VALUE}-2` } }), 200);
    await agent.waitUntil(() => agent.profileSecrets?.[a.name]?.["api-key"] === `${VALUE}-2`);
    await barrier();
    expect(stranger.securityProfiles).toBe(strangerSet);
    await stranger.waitUntil(() => stranger.securityProfiles !== null);
    expect(JSON.stringify(stranger.profileSecrets ?? {})).not.toContain(VALUE);
    // An agent that does not enforce profiles (the kubernetes driver's says networkRules false;
    // an older one says nothing) gets neither the profiles, which may hold literal tokens, nor
    // the secrets.
    agent.disconnect();
    for (const networkRules of [false, undefined]) {
      const other = await startAgent(a.cluster, networkRules === undefined ? {} : { networkRules });
      agents.push(other);
      await expectStatus(call(`/admin/teams/${a.name}/security-profiles/tok`, { method: "PUT", body: spec }), 200);
      // A traffic policy put after it: its frame follows any profile frame on the socket.
      const tp = unique("tp");
      await expectStatus(call(`/admin/teams/${a.name}/traffic-policies/${tp}`, { method: "PUT", body: { egress: { rules: [{ action: "allow", to: [{ fqdn: "*.a.test" }] }] } } }), 200);
      await other.waitUntil(() => other.trafficPolicies?.some((p) => p.name === tp) ?? false);
      expect(other.securityProfiles).toBeNull();
      expect(other.profileSecrets).toBeUndefined();
      other.disconnect();
    }
  }, 60_000);

  it("refuses what the proxy cannot enforce as written, naming it; needs the admin key", async () => {
    const team = await createTeam(unique("sp"));
    const t = team.name;
    await expectError(put(t, rule({ domains: ["a.test"], paths: [{ type: "Regex", value: "/x.*" }] })), 400, /Regex is not supported/);
    // Compared with each request path's normal form, so a path not in it would never match.
    await expectError(put(t, rule({ domains: ["a.test"], paths: [{ type: "Prefix", value: "/%61dmin" }] })), 400, /rules\.0\.match\.0\.paths\.0\.value.*write "\/admin"/);
    await expectError(put(t, rule({ domains: ["a.test"], paths: [{ type: "Exact", value: "/a%2Fb" }] })), 400, /can never match: it holds an encoded slash/);
    await expectError(put(t, rule({ domains: ["a.test"], headers: [{ name: "x", value: "y" }] })), 400, /headers/);
    await expectError(put(t, rule({ domains: ["a b"] })), 400, /domain/);
    await expectError(put(t, rule({ domains: ["a.test"] }, { tokenTransformation: { type: "AliyunSTS", credentialRef: { secret: { name: "k" } } } })), 400, /ApiKey/);
    await expectError(put(t, rule({ domains: ["a.test"] }, { headerManipulation: { set: [{ name: "Host", value: "evil.test" }] } })), 400, /sets this header itself/);
    await expectError(put(t, rule({ domains: ["a.test"] }, { headerManipulation: { set: [{ name: "x-a", value: "a\r\nb: c" }] } })), 400, /line break/);
    await expectError(put(t, { ...rule({ domains: ["a.test"] }), inputs: [{ name: "i", inline: {} }] }), 400, /inputs/);
    await expectError(put(t, { ...rule({ domains: ["a.test"] }), audit: [] }), 400, /audit/);
    await expectError(put(t, { rules: [], rateLimit: { requestsPerMinute: 0 } }), 400, /requestsPerMinute/);
    await expectError(call(`/admin/teams/${t}/security-profiles/Bad_Name`, { method: "PUT", body: mcp }), 400, /profile name/);
    await expectError(call(`/admin/teams/no-such-team-x/security-profiles/x`, { method: "PUT", body: mcp }), 404);
    await expectError(put(t, mcp, team.key), 403);
    // A global profile applies to every team: naming a secret would put each team's secret of
    // that name on whatever host its sandboxes call. Only a team's own profile may name it.
    const token = rule({ domains: ["a.test"] }, { tokenTransformation: { type: "ApiKey", targetHeader: "x-k", credentialRef: { secret: { name: "k" } } } });
    await expectError(call(`/admin/global-security-profiles/${unique("g")}`, { method: "PUT", body: token }), 400, /may not name secrets/);
    await expectStatus(put(t, token), 200);
  });
});

describe("GET /sandboxes/{id}/network/audit", () => {
  it("answers the agent's audit records of the sandbox to its team, and 404 to another team", async () => {
    const team = await createTeam(unique("audit"), { replicas: 1 });
    const other = await createTeam(unique("audit-other"), { cluster: team.cluster });
    const agent = await startAgent(team.cluster);
    agents.push(agent);
    const id = (await expectStatus(call("/v2/sandboxes", { key: team.key, body: { templateID: team.template } }), 201)).sandboxID;
    const T0 = Date.parse("2026-01-01T00:00:00Z");
    const rec = { sandbox: id, host: "mcp.example.test", method: "POST", path: "/mcp", rule: "tools", status: 200, bytesOut: 120, bytesIn: 80 };
    agent.audit.append(id, "warn", "POST mcp.example.test/mcp 200", auditFields({ ...rec, tool: "delete_repo", refused: true }), T0);
    agent.audit.append(id, "info", "POST mcp.example.test/mcp 200", auditFields({ ...rec, tool: "read_file", refused: false }), T0 + 1);
    agent.logs.append(id, "info", "process started", {}, T0);

    const body = await expectStatus(call(`/sandboxes/${id}/network/audit`, { key: team.key }), 200);
    expect(body.records).toEqual([
      { timestamp: T0, host: "mcp.example.test", method: "POST", path: "/mcp", rule: "tools", status: 200, bytesOut: 120, bytesIn: 80, tool: "delete_repo", refused: true },
      { timestamp: T0 + 1, host: "mcp.example.test", method: "POST", path: "/mcp", rule: "tools", status: 200, bytesOut: 80 + 40, bytesIn: 80, tool: "read_file", refused: false },
    ]);
    // The refused ones only; the sandbox's logs stay apart.
    expect((await expectStatus(call(`/sandboxes/${id}/network/audit?level=warn`, { key: team.key }), 200)).records.map((r: { tool: string }) => r.tool)).toEqual(["delete_repo"]);
    expect((await expectStatus(call(`/v2/sandboxes/${id}/logs`, { key: team.key }), 200)).logs.map((e: { message: string }) => e.message)).toEqual(["process started"]);
    await expectError(call(`/sandboxes/${id}/network/audit`, { key: other.key }), 404);
    await expectError(call(`/sandboxes/${id}/network/audit?limit=5000`, { key: team.key }), 400, /limit/);
  });

  it("after the kill its team still reads the audit the agent keeps a while (as for logs); another team gets 404", async () => {
    const team = await createTeam(unique("audit-kill"), { replicas: 1 });
    const other = await createTeam(unique("audit-kill-other"), { cluster: team.cluster });
    const agent = await startAgent(team.cluster);
    agents.push(agent);
    const id = (await expectStatus(call("/v2/sandboxes", { key: team.key, body: { templateID: team.template } }), 201)).sandboxID;
    const rec = { sandbox: id, host: "api.test", method: "GET", path: "/x", rule: "r", status: 403, bytesOut: 0, bytesIn: 0, refused: true };
    agent.audit.append(id, "warn", "GET api.test/x 403", auditFields(rec), Date.parse("2026-01-01T00:00:00Z"));
    await expectStatus(call(`/sandboxes/${id}`, { key: team.key, method: "DELETE" }), 204);
    const body = await expectStatus(call(`/sandboxes/${id}/network/audit`, { key: team.key }), 200);
    expect(body.records).toMatchObject([{ host: "api.test", path: "/x", status: 403, refused: true }]);
    await expectError(call(`/sandboxes/${id}/network/audit`, { key: other.key }), 404);
  });
});

describe("SecurityProfile objects over the agent link", () => {
  it("a serving cluster's object becomes the team's profile, sent to agents; another cluster is refused; deletes remove it", async () => {
    const ns = unique("sp-crd");
    const link = (cluster: string) => fetchTransport((url, init) => exports.default.fetch(url, init) as never, "test-cluster-token", cluster);
    const agent = new ScriptedAgent({ networkRules: true });
    const crd = new CrdLink();
    await bindTeam(ns, ns);
    await crd.connect(agent, link(ns));
    agents.push(agent);
    // A SandboxSet in the namespace: the team is bound to this cluster and has a template on it.
    expect(await crd.call("sandboxsets", { namespace: ns, name: "app", uid: "uid-app", generation: 1, spec: { replicas: 0, image: "python:3.12" } })).toMatchObject({ result: "applied" });
    const ref = { namespace: ns, name: "mcp", uid: "uid-mcp" };
    expect(await crd.call("securityprofileobjects", { ...ref, generation: 1, spec: mcp })).toMatchObject({ result: "applied", selectedSandboxes: [] });
    const view = await expectStatus(call(`/admin/teams/${ns}/security-profiles/mcp`), 200);
    expect(view).toMatchObject({ kind: "SecurityProfile", team: ns, spec: { rules: mcp.rules } });
    await agent.waitUntil(() => agent.securityProfiles?.some((p) => p.team === ns && p.name === "mcp") ?? false);
    expect(await crd.call("securityprofileobjects", { ...ref, status: true })).toMatchObject({ result: "applied" });
    expect(await crd.call("securityprofileobjects", { namespace: ns, present: ["mcp"] })).toMatchObject({ result: "applied" });

    const stranger = new ScriptedAgent();
    const other = new CrdLink();
    await other.connect(stranger, link(unique("sp-other")));
    agents.push(stranger);
    expect(await other.call("securityprofileobjects", { namespace: ns, name: "evil", uid: "uid-evil", generation: 1, spec: { rules: [] } })).toMatchObject({ result: "rejected", code: "forbidden" });

    expect(await crd.call("securityprofileobjects", { ...ref, deleted: true })).toMatchObject({ result: "applied" });
    await expectError(call(`/admin/teams/${ns}/security-profiles/mcp`), 404);
    await agent.waitUntil(() => !(agent.securityProfiles?.some((p) => p.name === "mcp") ?? true));
  });

  it("a cluster's GlobalSecurityProfile (namespace null) becomes a global profile every agent gets, from a cluster that serves no team", async () => {
    const link = (cluster: string) => fetchTransport((url, init) => exports.default.fetch(url, init) as never, "test-cluster-token", cluster);
    const platform = new ScriptedAgent();
    const crd = new CrdLink();
    await crd.connect(platform, link("policy-gsp"));
    const team = await createTeam(unique("gsp-team"));
    const teamAgent = await startAgent(team.cluster, { networkRules: true });
    agents.push(platform, teamAgent);
    const name = unique("gsp");
    const ref = { namespace: null, name, uid: `uid-${name}` };
    // A global profile selects by the platform's labels only (review 25 M4): here the template's.
    const spec = { priority: 5, selector: { matchLabels: { "agents.kruise.io/sandbox-template": team.template, "agents.kruise.io/sandbox-team": team.name } }, ...rule({ domains: ["*.internal.test"] }) };
    // By template alone it is refused (review 26 H2: any team may name a template so), here and at the admin API.
    const byTemplateOnly = { ...spec, selector: { matchLabels: { "agents.kruise.io/sandbox-template": team.template } } };
    expect(await crd.call("securityprofileobjects", { ...ref, generation: 1, spec: byTemplateOnly })).toMatchObject({ result: "rejected", code: "bad_request", message: expect.stringMatching(/must also name the teams/) });
    await expectError(call(`/admin/global-security-profiles/${name}`, { method: "PUT", body: byTemplateOnly }), 400, /must also name the teams/);
    const token = rule({ domains: ["a.test"] }, { tokenTransformation: { type: "ApiKey", targetHeader: "x-k", credentialRef: { secret: { name: "k" } } } });
    expect(await crd.call("securityprofileobjects", { ...ref, generation: 1, spec: token })).toMatchObject({ result: "rejected", code: "bad_request", message: expect.stringMatching(/may not name secrets/) });
    await expectError(call(`/admin/global-security-profiles/${name}`), 404);
    expect(await crd.call("securityprofileobjects", { ...ref, generation: 1, spec })).toMatchObject({ result: "applied", selectedSandboxes: [] });
    expect(await expectStatus(call(`/admin/global-security-profiles/${name}`), 200)).toMatchObject({ kind: "GlobalSecurityProfile", team: null, spec: { priority: 5 } });
    await teamAgent.waitUntil(() => teamAgent.securityProfiles?.some((p) => p.team === null && p.name === name) ?? false);
    // Its status lists the live sandboxes of any team that it selects.
    const sbx = await expectStatus(call("/v2/sandboxes", { key: team.key, body: { templateID: team.template, metadata: { "label:gsp": name } } }), 201);
    expect(await crd.call("securityprofileobjects", { ...ref, status: true })).toMatchObject({ result: "applied", selectedSandboxes: [sbx.sandboxID] });
    expect(await crd.call("securityprofileobjects", { ...ref, deleted: true })).toMatchObject({ result: "applied" });
    await expectError(call(`/admin/global-security-profiles/${name}`), 404);
    await teamAgent.waitUntil(() => !(teamAgent.securityProfiles?.some((p) => p.name === name) ?? true));
  });
});

describe("who owns a profile: the admin API or a cluster's object", () => {
  it("a cluster may not overwrite, delete or take the status of an admin-API GlobalSecurityProfile of the same name; the admin API may not overwrite a cluster's", async () => {
    const link = (cluster: string) => fetchTransport((url, init) => exports.default.fetch(url, init) as never, "test-cluster-token", cluster);
    const platform = new ScriptedAgent();
    const crd = new CrdLink();
    await crd.connect(platform, link("policy-own"));
    agents.push(platform);
    const admins = unique("own-admin");
    const adminSpec = { priority: 3, ...rule({ domains: ["admin.test"] }) };
    await expectStatus(call(`/admin/global-security-profiles/${admins}`, { method: "PUT", body: adminSpec }), 200);
    const ref = { namespace: null, name: admins, uid: `uid-${admins}` };
    const refused = { result: "rejected", code: "conflict", message: expect.stringMatching(/made through the admin API/) };
    expect(await crd.call("securityprofileobjects", { ...ref, generation: 1, spec: { priority: 9, ...rule({ domains: ["cluster.test"] }) } })).toMatchObject(refused);
    expect(await crd.call("securityprofileobjects", { ...ref, status: true })).toMatchObject(refused);
    expect(await crd.call("securityprofileobjects", { ...ref, deleted: true })).toMatchObject(refused);
    // The admin API's profile is as it made it.
    expect(await expectStatus(call(`/admin/global-security-profiles/${admins}`), 200)).toMatchObject({ spec: { priority: 3, rules: adminSpec.rules } });

    // The other way: a cluster's object is changed where it lives, not through the admin API,
    // which may only delete it (the way out for an object a gone cluster left behind).
    const clusters = unique("own-cluster");
    const cref = { namespace: null, name: clusters, uid: `uid-${clusters}` };
    expect(await crd.call("securityprofileobjects", { ...cref, generation: 1, spec: { priority: 4, ...rule({ domains: ["c.test"] }) } })).toMatchObject({ result: "applied" });
    await expectError(call(`/admin/global-security-profiles/${clusters}`, { method: "PUT", body: adminSpec }), 409);
    expect(await crd.call("securityprofileobjects", { ...cref, generation: 2, spec: { priority: 6, ...rule({ domains: ["c.test"] }) } })).toMatchObject({ result: "applied" });
    expect(await expectStatus(call(`/admin/global-security-profiles/${clusters}`), 200)).toMatchObject({ spec: { priority: 6 } });
    await expectStatus(call(`/admin/global-security-profiles/${clusters}`, { method: "DELETE" }), 204);
    await expectStatus(call(`/admin/global-security-profiles/${admins}`, { method: "DELETE" }), 204);
  });
});

describe("a profile kept from before owners (owner NULL)", () => {
  it("is the admin API's: a cluster's object may not take it over, change or delete it; the admin API may", async () => {
    const link = (cluster: string) => fetchTransport((url, init) => exports.default.fetch(url, init) as never, "test-cluster-token", cluster);
    const platform = new ScriptedAgent();
    const crd = new CrdLink();
    await crd.connect(platform, link("policy-old"));
    agents.push(platform);
    const name = unique("old-profile");
    const spec = { priority: 3, ...rule({ domains: ["old.test"] }) };
    // As an admin-API write from before the owner column left it.
    await getDb(env).insert(securityProfiles).values({ team: "", name, spec: spec as never, createdAt: Date.now(), updatedAt: Date.now(), owner: null });
    const ref = { namespace: null, name, uid: `uid-${name}` };
    const refused = { result: "rejected", code: "conflict", message: expect.stringMatching(/made through the admin API/) };
    expect(await crd.call("securityprofileobjects", { ...ref, generation: 1, spec: { priority: 9, ...rule({ domains: ["cluster.test"] }) } })).toMatchObject(refused);
    expect(await crd.call("securityprofileobjects", { ...ref, status: true })).toMatchObject(refused);
    expect(await crd.call("securityprofileobjects", { ...ref, deleted: true })).toMatchObject(refused);
    expect(await expectStatus(call(`/admin/global-security-profiles/${name}`), 200)).toMatchObject({ spec: { priority: 3 } });
    await expectStatus(call(`/admin/global-security-profiles/${name}`, { method: "PUT", body: { ...spec, priority: 5 } }), 200);
    expect(await expectStatus(call(`/admin/global-security-profiles/${name}`), 200)).toMatchObject({ spec: { priority: 5 } });
    await expectStatus(call(`/admin/global-security-profiles/${name}`, { method: "DELETE" }), 204);
  });
});

describe("a secret change", () => {
  it("reads only the changing team's profiles, and still resends them to the team's agent", async () => {
    const a = await createTeam(unique("sc-a"));
    const b = await createTeam(unique("sc-b"));
    const agent = await startAgent(a.cluster, { networkRules: true });
    agents.push(agent);
    const tok = { rules: [{ name: "key", match: [{ domains: ["api.test"] }], actions: { tokenTransformation: { type: "ApiKey", targetHeader: "x-k", credentialRef: { secret: { name: "k" } } } } }] };
    for (const t of [a, b]) await expectStatus(call(`/admin/teams/${t.name}/security-profiles/tok`, { method: "PUT", body: tok }), 200);
    await agent.waitUntil(() => agent.securityProfiles?.some((p) => p.team === a.name) ?? false);
    // Every row libSQL answers while the operation runs (this isolate's client; tests of a file
    // run one at a time).
    const client = getDb(env).$client;
    const execute = client.execute.bind(client);
    const rows: Record<string, unknown>[] = [];
    client.execute = (async (stmt: string | { sql: string }) => {
      const r = await execute(stmt as string);
      if (/security_profiles/.test(typeof stmt === "string" ? stmt : stmt.sql)) rows.push(...(r.rows as unknown as Record<string, unknown>[]));
      return r;
    }) as typeof client.execute;
    let resent: number;
    try {
      resent = await secretChanged(env, a.name, "K");
    } finally {
      client.execute = execute;
    }
    expect(resent).toBe(1);
    expect(rows.length).toBeGreaterThan(0);
    // Team a's and the global ones (team ""; the resend's set holds them), never team b's.
    const teams = new Set(rows.map((r) => r.team));
    expect(teams.has(a.name)).toBe(true);
    expect([...teams].filter((t) => t !== a.name && t !== "")).toEqual([]);
  });
});
