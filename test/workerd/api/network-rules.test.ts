// E2B `network` egress rules at create: bad entries are a 400 JSON error naming the entry (the
// traffic-proxy would otherwise deny everything later), good ones reach the agent's intent as
// `egress`, and a create without rules sends none.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ScriptedAgent } from "../../support/scripted-agent.ts";
import { call, createTeam, expectError, expectStatus, startAgent, unique, type TestTeam } from "../helpers.ts";

let team: TestTeam;
let agent: ScriptedAgent;

beforeAll(async () => {
  team = await createTeam(unique("egress"), { replicas: 1 });
  agent = await startAgent(team.cluster);
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
