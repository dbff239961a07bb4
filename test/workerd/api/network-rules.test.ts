// E2B `network` egress rules at create and through updateNetwork (PUT /sandboxes/{id}/network):
// bad entries are a 400 JSON error naming the entry (the traffic-proxy would otherwise deny
// everything later), good ones reach the agent's intent as `egress`; an update replaces the rules
// (an omitted list is cleared) and answers once the agent has taken them; options the server
// cannot enforce are a 501 that names them, never stored as if they applied.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ScriptedAgent } from "../../support/scripted-agent.ts";
import { call, createTeam, expectError, expectStatus, startAgent, unique, type TestTeam } from "../helpers.ts";

let team: TestTeam;
let agent: ScriptedAgent;

beforeAll(async () => {
  team = await createTeam(unique("egress"), { replicas: 1 });
  agent = await startAgent(team.cluster, { networkRules: true });
});
afterAll(() => agent.disconnect());

const create = (network: unknown) => call("/v2/sandboxes", { key: team.key, body: { templateID: team.template, network } });

describe("network rules at create", () => {
  it("refuses entries that are not IPs, CIDR blocks or (in allowOut) domains", async () => {
    await expectError(create({ allowOut: ["10.0.0.0/33"] }), 400, /allowOut: "10\.0\.0\.0\/33" is not a valid IP address or CIDR block/);
    await expectError(create({ denyOut: ["example.com"] }), 400, /denyOut takes IP addresses and CIDR blocks only/);
    await expectError(create({ allowOut: ["not a host!"] }), 400, /is not an IP address, a CIDR block or a domain name/);
  });

  it("sends valid rules to the agent as the intent's egress, and none without rules", async () => {
    const ruled = await expectStatus(create({ denyOut: ["0.0.0.0/0"], allowOut: ["*.example.com", "192.168.1.0/24"] }), 201);
    const plain = await expectStatus(create({ allowPublicTraffic: true }), 201);
    expect(agent.sandboxes.get(ruled.sandboxID)!.intent.egress).toEqual({ allowOut: ["*.example.com", "192.168.1.0/24"], denyOut: ["0.0.0.0/0"] });
    expect(agent.sandboxes.get(plain.sandboxID)!.intent.egress).toBeNull();
  });
});

describe("network.rules (header transforms)", () => {
  it("refuses malformed ones with a 400 naming the host or header; well-formed ones are accepted at create and at update", async () => {
    await expectError(create({ rules: { "*": [{ transform: { headers: { a: "b" } } }] } }), 400, /rules: "\*" is not a domain name or a leading-wildcard pattern/);
    await expectError(create({ rules: { "api.example.com": [{ transform: { headers: { Host: "evil.example" } } }] } }), 400, /header "Host": the proxy sets this header itself/);
    await expectError(create({ rules: { "api.example.com": [{ transform: { headers: { "x-a": "v\r\nInjected: 1" } } }] } }), 400, /header "x-a": the value has a line break/);
    await expectError(update((await expectStatus(create({}), 201)).sandboxID, { rules: { "a b": [] } }), 400, /rules: "a b" is not a domain name/);
    const made = await expectStatus(create({ rules: { "*.Example.com": [{ transform: { headers: { Authorization: "Bearer ${e2b.secrets.gh}" } } }] } }), 201);
    await expectStatus(update(made.sandboxID, { rules: { "api.example.com": [{ transform: { headers: { a: "b" } } }] } }), 204);
    expect(agent.sandboxes.get(made.sandboxID)!.intent.networkRules).toEqual({ "api.example.com": [{ transform: { headers: { a: "b" } } }] });
  });

  it("updateNetwork replaces them (omitted: cleared) and sends the values of the secrets the new rules name", async () => {
    await expectStatus(call("/secrets", { key: team.key, body: { name: "later", value: "value-later-41c" } }), 201);
    const sbx = await expectStatus(create({ rules: { "a.example.com": [{ transform: { headers: { "x-a": "1" } } }] } }), 201);
    expect(agent.secrets.get(sbx.sandboxID)).toBeUndefined();
    const rules = { "b.example.com": [{ transform: { headers: { Authorization: "Bearer ${e2b.secrets.later}" } } }] };
    await expectStatus(update(sbx.sandboxID, { allowOut: ["b.example.com"], rules }), 204);
    const intent = agent.sandboxes.get(sbx.sandboxID)!.intent;
    expect(intent.networkRules).toEqual(rules);
    expect(JSON.stringify(intent)).not.toContain("value-later-41c");
    expect(agent.secrets.get(sbx.sandboxID)).toEqual({ later: "value-later-41c" });
    await expectStatus(update(sbx.sandboxID, { allowOut: ["b.example.com"] }), 204);
    expect(agent.sandboxes.get(sbx.sandboxID)!.intent.networkRules).toEqual({});
  });
});

describe("network.rules on a cluster whose driver does not enforce them", () => {
  it("are a 501 naming the cluster and driver, at create and at update; a create without them works", async () => {
    const kube = await createTeam(unique("kube-rules"), { replicas: 1 });
    const kubeAgent = await startAgent(kube.cluster, { driver: "kubernetes", networkRules: false });
    try {
      const rules = { "api.example.com": [{ transform: { headers: { a: "b" } } }] };
      const make = (network: unknown) => call("/v2/sandboxes", { key: kube.key, body: { templateID: kube.template, network } });
      await expectError(make({ rules }), 501, new RegExp(`network\\.rules is not supported on cluster "${kube.cluster}" \\(its agent runs the kubernetes driver`));
      const plain = await expectStatus(make({}), 201);
      await expectError(update(plain.sandboxID, { rules }, kube.key), 501, /network\.rules is not supported on cluster/);
      await expectStatus(update(plain.sandboxID, { denyOut: ["0.0.0.0/0"] }, kube.key), 204);
    } finally {
      kubeAgent.disconnect();
    }
  });
});

describe("network.rules on a cluster whose agent did not state it enforces them", () => {
  it("are a 501 saying so for an older agent, and a retryable 503 while none has connected yet, at create and at update", async () => {
    const old = await createTeam(unique("old-agent"), { replicas: 1 });
    const rules = { "api.example.com": [{ transform: { headers: { a: "b" } } }] };
    const make = (network: unknown) => call("/v2/sandboxes", { key: old.key, body: { templateID: old.template, network } });
    await expectError(make({ rules }), 503, new RegExp(`network\\.rules is not supported on cluster "${old.cluster}" yet: no agent has connected yet`));
    const oldAgent = await startAgent(old.cluster);
    try {
      await expectError(make({ rules }), 501, /its agent did not say it enforces them \(an older agent\)/);
      const plain = await expectStatus(make({}), 201);
      await expectError(update(plain.sandboxID, { rules }, old.key), 501, /did not say it enforces them/);
      expect(oldAgent.sandboxes.get(plain.sandboxID)!.intent.networkRules).toEqual({});
    } finally {
      oldAgent.disconnect();
    }
  });
});

describe("network.rules secrets to the agent", () => {
  it("go beside the intent, only the ones that sandbox's rules name; the intent holds placeholders", async () => {
    const VALUE = "value-used-9f2c";
    await expectStatus(call("/secrets", { key: team.key, body: { name: "Used", value: VALUE } }), 201);
    await expectStatus(call("/secrets", { key: team.key, body: { name: "unused", value: "value-not-named-77" } }), 201);
    const rules = { "api.example.com": [{ transform: { headers: { Authorization: "Bearer ${e2b.secrets.used}" } } }] };
    const sbx = await expectStatus(create({ rules }), 201);
    expect(agent.secrets.get(sbx.sandboxID)).toEqual({ used: VALUE });
    const intent = agent.sandboxes.get(sbx.sandboxID)!.intent;
    expect(intent.networkRules).toEqual(rules);
    expect(JSON.stringify(intent)).not.toContain(VALUE);
    // A sandbox without rules gets none.
    const plain = await expectStatus(create({}), 201);
    expect(agent.secrets.get(plain.sandboxID)).toBeUndefined();
  });
});

describe("unenforced network options", () => {
  it("egressProxy, httpsPorts, dnsServers and iam are a 501 naming them, at create and at update", async () => {
    await expectError(create({ egressProxy: { address: "proxy.example:3128" } }), 501, /network\.egressProxy is not supported/);
    await expectError(create({ httpsPorts: [8443] }), 501, /network\.httpsPorts is not supported/);
    await expectError(create({ dnsServers: ["1.1.1.1"] }), 501, /network\.dnsServers is not supported/);
    await expectError(call("/v2/sandboxes", { key: team.key, body: { templateID: team.template, iam: { tokens: { gh: { audience: "https://api.github.com", tokenType: "access_token" } } } } }), 501, /iam is not supported/);
    // Empty ones ask for nothing.
    await expectStatus(create({ dnsServers: [], rules: {} }), 201);
    await expectStatus(call("/v2/sandboxes", { key: team.key, body: { templateID: team.template, iam: { tokens: {} } } }), 201);
    const sbx = await expectStatus(create({}), 201);
    await expectError(update(sbx.sandboxID, { egressProxy: { address: "proxy.example:3128" } }), 501, /network\.egressProxy/);
  });
});

const update = (id: string, body: unknown, key = team.key) => call(`/sandboxes/${id}/network`, { key, method: "PUT", body });

describe("updateNetwork", () => {
  it("replaces the rules, clears omitted ones, and is seen by getInfo and the agent once it answers 204", async () => {
    const sbx = await expectStatus(create({ denyOut: ["10.0.0.0/8"], allowPublicTraffic: true }), 201);
    const intentOf = () => agent.sandboxes.get(sbx.sandboxID)!.intent;
    const before = intentOf().generation;
    await expectStatus(update(sbx.sandboxID, { allowOut: ["example.com"], denyOut: ["0.0.0.0/0"] }), 204);
    expect(intentOf().egress).toEqual({ allowOut: ["example.com"], denyOut: ["0.0.0.0/0"] });
    expect(intentOf().generation).toBeGreaterThan(before);
    const info = await expectStatus(call(`/sandboxes/${sbx.sandboxID}`, { key: team.key }), 200);
    // allowPublicTraffic is not an egress field: an update leaves it as it was.
    expect(info.network).toEqual({ allowOut: ["example.com"], denyOut: ["0.0.0.0/0"], allowPublicTraffic: true });

    await expectStatus(update(sbx.sandboxID, { denyOut: ["192.168.0.0/16"] }), 204);
    expect(intentOf().egress).toEqual({ allowOut: [], denyOut: ["192.168.0.0/16"] });
    await expectStatus(update(sbx.sandboxID, {}), 204);
    expect(intentOf().egress).toBeNull();
    expect(intentOf().allowInternetAccess).toBe(true);

    await expectStatus(update(sbx.sandboxID, { allow_internet_access: false }), 204);
    expect(intentOf().allowInternetAccess).toBe(false);
    expect((await expectStatus(call(`/sandboxes/${sbx.sandboxID}`, { key: team.key }), 200)).allowInternetAccess).toBe(false);
  });

  it("refuses bad rules (400), a paused sandbox (409), another team's or an unknown sandbox (404)", async () => {
    const sbx = await expectStatus(create({}), 201);
    await expectError(update(sbx.sandboxID, { denyOut: ["example.com"] }), 400, /denyOut takes IP addresses and CIDR blocks only/);
    await expectError(update(sbx.sandboxID, { allowOut: "1.1.1.1" }), 400);
    await expectError(update(sbx.sandboxID, { allowOut: ["1.1.1.1"] }, (await createTeam(unique("net-stranger"))).key), 404);
    await expectError(update("nosuchsandbox0000000", { allowOut: ["1.1.1.1"] }), 404);
    await expectStatus(call(`/sandboxes/${sbx.sandboxID}/pause`, { key: team.key, body: {} }), 204);
    await agent.waitUntil(() => agent.sandboxes.get(sbx.sandboxID)?.phase === "Paused");
    await expectError(update(sbx.sandboxID, { allowOut: ["1.1.1.1"] }), 409, /is not running/);
  });
});

describe("maskRequestHost", () => {
  it("is taken at create (the gateway sends it to the sandbox's user ports), and a value that is no host[:port] is a 400", async () => {
    await expectStatus(create({ maskRequestHost: "localhost:${PORT}" }), 201);
    await expectError(create({ maskRequestHost: "a.example\r\nX-Evil: 1" }), 400, /network.maskRequestHost "a.example.*" must be a host\[:port\]/);
    await expectError(create({ maskRequestHost: "a b" }), 400, /maskRequestHost/);
  });
});
