// SecurityProfiles on the local driver (controllers/drivers/local/egress-l7.ts, egress.ts): the
// edge's set selects sandboxes by team (namespace) and labels, gives their L7 policy the profiles
// in order and the lowest rate limit, and a new set applies to the next request. A selected
// sandbox is inspected on the redirected path only: the forward proxy refuses it, since its
// CONNECT tunnels would pass uninspected. E2B's allow-all that puts an L7 sandbox behind the proxy
// is not a policy that opens a TrafficPolicy-governed sandbox.
import { mkdtempSync, rmSync } from "node:fs";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, expect, it } from "vitest";
import type { DesiredSandbox } from "../../../controllers/drivers/driver.ts";
import { LocalEgress, networkMode } from "../../../controllers/drivers/local/egress.ts";
import { compilePolicy } from "../../../controllers/traffic/policy.ts";
import { TrafficProxy } from "../../../controllers/traffic/proxy.ts";
import { SecurityProfileSpec, type SecurityProfileEntry } from "../../../schema/api/security-profile.ts";
import { TrafficPolicySpec } from "../../../schema/api/traffic-policy.ts";

const sandboxes = new Map<string, DesiredSandbox>();
const want = (id: string, d: Partial<DesiredSandbox>) => sandboxes.set(id, { id, allowInternetAccess: true, egress: null, ...d } as DesiredSandbox);
want("agent", { namespace: "team-a", labels: { app: "agent" } });
want("other-team", { namespace: "team-b", labels: { app: "agent" } });
want("unlabelled", { namespace: "team-a" });
const egress = new LocalEgress((id) => sandboxes.get(id));
const dir = mkdtempSync(join(tmpdir(), "l7-profiles-"));
afterAll(() => {
  egress.dispose();
  rmSync(dir, { recursive: true, force: true });
});

const block = (name: string, domain: string) => [{ name, match: [{ domains: [domain] }], actions: { block: {} } }];
const entry = (team: string | null, name: string, spec: unknown, createdAt = 1): SecurityProfileEntry => ({ team, name, spec: SecurityProfileSpec.parse(spec), createdAt });

it("selects by team and labels, orders the profiles, takes the lowest rate limit; a new set applies at once", () => {
  expect(egress.l7.wants(sandboxes.get("agent")!)).toBe(false);
  expect(networkMode(sandboxes.get("agent")!, false, egress.l7.wants(sandboxes.get("agent")!))).toBe("host");
  egress.setProfiles([
    entry("team-a", "late", { priority: 5, selector: { matchLabels: { app: "agent" } }, rules: block("late-rule", "a.test"), rateLimit: { requestsPerMinute: 60 } }, 2),
    entry("team-a", "early", { priority: 5, selector: { matchLabels: { app: "agent" } }, rules: block("early-rule", "b.test") }, 1),
    entry(null, "everyone", { rules: block("global-rule", "c.test"), rateLimit: { requestsPerMinute: 30 } }),
  ]);
  const agent = sandboxes.get("agent")!;
  expect(egress.l7.wants(agent)).toBe(true);
  expect(networkMode(agent, false, egress.l7.wants(agent))).toBe("proxy");
  const p = egress.l7.policyFor("agent")!;
  expect(p.profiles!.map((x) => x.name)).toEqual(["team-a/early", "team-a/late", "everyone"]);
  expect(p.requestsPerMinute).toBe(30);
  expect(egress.l7.policyFor("other-team")!.profiles!.map((x) => x.name)).toEqual(["everyone"]);
  expect(egress.l7.policyFor("unlabelled")!.profiles!.map((x) => x.name)).toEqual(["everyone"]);

  egress.setProfiles([entry("team-a", "late", { selector: { matchLabels: { app: "agent" } }, rules: block("late-rule", "a.test") })]);
  expect(egress.l7.policyFor("agent")!.profiles!.map((x) => x.name)).toEqual(["team-a/late"]);
  expect(egress.l7.policyFor("agent")!.requestsPerMinute).toBeUndefined();
  expect(egress.l7.policyFor("unlabelled")).toBeUndefined();
});

it("the forward proxy refuses a sandbox under L7 policy and serves one without", async () => {
  egress.setProfiles([entry("team-a", "p", { selector: { matchLabels: { app: "agent" } }, rules: block("r", "a.test") })]);
  const proxy = new TrafficProxy({ refuse: () => undefined, policyFor: () => compilePolicy({ allowOut: [], denyOut: ["0.0.0.0/0"] }), l7: egress.l7.handler });
  const sock = join(dir, "p.sock");
  await proxy.listenTagged(sock);
  const ask = (tag: string) =>
    new Promise<string>((resolve, reject) => {
      let got = "";
      const s = connect(sock, () => s.write(`${tag}\nCONNECT 198.51.100.9:443 HTTP/1.1\r\nHost: x\r\n\r\n`));
      s.on("data", (c: Buffer) => {
        got += c.toString();
        if (got.includes("\r\n\r\n")) s.destroy();
      });
      s.on("close", () => resolve(got)).on("error", reject);
    });
  try {
    expect(await ask("agent")).toContain("agent's HTTP(S) egress is inspected (SecurityProfile or network.rules): connect directly, not through the proxy");
    // Without L7 policy the sandbox's own rules decide (here: deny all).
    expect(await ask("other-team")).toContain('denied by denyOut "0.0.0.0/0"');
  } finally {
    await proxy.close();
  }
});

it("a TrafficPolicy-governed sandbox with network.rules is not opened by the allow-all that puts it behind the proxy", () => {
  want("ruled", { namespace: "team-a", labels: { tp: "x" }, networkRules: { "api.test": [{ transform: { headers: { "x-k": "v" } } }] } });
  egress.setTraffic([{ team: "team-a", name: "tp", spec: TrafficPolicySpec.parse({ selector: { matchLabels: { tp: "x" } }, egress: { rules: [{ action: "allow", to: [{ fqdn: "api.test" }] }] } }) }]);
  expect(egress.governing(sandboxes.get("ruled")!)!.policies.map((p) => p.name)).toEqual(["team-a/tp"]);
});

it("a profile's secrets reach the requests of its team's sandboxes only, beside a sandbox's own; a new set replaces them", () => {
  egress.l7.setTeamSecrets({ "team-a": { "API-Key": "team-a-value" } });
  egress.l7.setSecrets("agent", { own: "own-value" });
  expect(Object.fromEntries(egress.l7.secretsFor("agent"))).toEqual({ "api-key": "team-a-value", own: "own-value" });
  expect(egress.l7.secretsFor("other-team").size).toBe(0);
  egress.l7.setTeamSecrets({});
  expect(Object.fromEntries(egress.l7.secretsFor("agent"))).toEqual({ own: "own-value" });
  egress.l7.setSecrets("agent", {});
});
