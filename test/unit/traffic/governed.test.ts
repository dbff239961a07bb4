// TrafficPolicies in force on an agent (governed.ts): which sandboxes a set selects (team scope,
// global ones for every team), E2B's rules compiled in, the floor beneath every rule, DNS
// admission over ports, and the proxy deciding redirected connections and proxied requests by
// them: refusals counted by a bounded source and logged with the rule.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { taggedHarness } from "../../support/tagged-get.ts";
import { globalSelectorRefusal, selectorLabels, TrafficPolicySpec, type TrafficPolicyEntry } from "../../../schema/api/traffic-policy.ts";
import { admitName, decideGoverned, TrafficPolicySet } from "../../../controllers/traffic/governed.ts";
import { TrafficProxy } from "../../../controllers/traffic/proxy.ts";
import { registry } from "../../../controllers/lib/metrics.ts";

const entry = (team: string | null, name: string, spec: unknown): TrafficPolicyEntry => ({ team, name, spec: TrafficPolicySpec.parse(spec) });
const nothing = () => undefined;

const set = new TrafficPolicySet();
set.replace([
  entry("team-a", "web", {
    priority: 10,
    selector: { matchLabels: { app: "web" } },
    egress: {
      rules: [
        { action: "reject", to: [{ fqdn: "evil.pkg.test" }] },
        { action: "allow", to: [{ fqdn: "*.pkg.test" }], ports: [{ port: 443 }, { port: 8000, endPort: 8100 }] },
      ],
    },
  }),
  entry("team-a", "late", { priority: 2000, egress: { rules: [{ action: "allow", to: [{ cidr: "203.0.113.0/24" }] }] } }),
  entry(null, "baseline", { priority: 0, egress: { rules: [{ action: "reject", to: [{ cidr: "203.0.113.7" }] }, { action: "allow", to: [{ cidr: "198.51.100.0/24" }], ports: [{ port: 80 }] }] } }),
]);

describe("TrafficPolicySet", () => {
  it("selects by team and labels; global policies select every team's sandboxes, beneath the team's", () => {
    const web = set.governing("team-a", { app: "web" }, null)!;
    expect(decideGoverned(web, { ip: "192.0.2.1", port: 443, names: ["api.pkg.test"] }, nothing)).toMatchObject({ allowed: true, by: "TrafficPolicy team-a/web rule 2 (allow)", source: "TrafficPolicy" });
    expect(decideGoverned(web, { ip: "192.0.2.1", port: 443, names: ["evil.pkg.test"] }, nothing)).toMatchObject({ allowed: false, by: "TrafficPolicy team-a/web rule 1 (reject)" });
    // port ranges; the apex is not a subdomain
    expect(decideGoverned(web, { ip: "192.0.2.1", port: 8050, names: ["a.pkg.test"] }, nothing).allowed).toBe(true);
    expect(decideGoverned(web, { ip: "192.0.2.1", port: 8101, names: ["a.pkg.test"] }, nothing).allowed).toBe(false);
    expect(decideGoverned(web, { ip: "192.0.2.1", port: 443, names: ["pkg.test"] }, nothing).allowed).toBe(false);
    // team policies by priority before the global one, whatever its priority: `late` (2000) wins over `baseline` (0)
    expect(decideGoverned(web, { ip: "203.0.113.7", port: 22, names: [] }, nothing)).toMatchObject({ allowed: true, by: "TrafficPolicy team-a/late rule 1 (allow)" });
    // another team gets only the global one, and its default
    const b = set.governing("team-b", {}, null)!;
    expect(decideGoverned(b, { ip: "203.0.113.7", port: 80, names: [] }, nothing)).toMatchObject({ allowed: false, source: "GlobalTrafficPolicy" });
    expect(decideGoverned(b, { ip: "198.51.100.9", port: 80, names: [] }, nothing).allowed).toBe(true);
    expect(decideGoverned(b, { ip: "192.0.2.9", port: 80, names: [] }, nothing)).toMatchObject({ allowed: false, source: "default" });
    expect(set.selectedBy("team-a", "web", [
      { id: "s1", team: "team-a", labels: { app: "web" } },
      { id: "s2", team: "team-a", labels: { app: "db" } },
      { id: "s3", team: "team-b", labels: { app: "web" } },
    ])).toEqual(["s1"]);
    expect(set.selectedBy(null, "baseline", [{ id: "s3", team: "team-b", labels: {} }])).toEqual(["s3"]);
  });

  it("a global policy sees only the platform's labels: a tenant's label neither selects it nor takes its sandbox out of it (review 25 M4)", () => {
    const g = new TrafficPolicySet();
    g.replace([
      entry(null, "db", { selector: { matchLabels: { tier: "db-clients" } }, egress: { rules: [{ action: "allow", to: [{ cidr: "10.20.0.0/16" }] }] } }),
      entry(null, "etl", { selector: { matchLabels: { "agents.kruise.io/sandbox-template": "etl", "agents.kruise.io/sandbox-team": "team-a" } }, egress: { rules: [{ action: "allow", to: [{ cidr: "10.30.0.0/16" }] }] } }),
      entry(null, "guard", { selector: { matchExpressions: [{ key: "exempt", operator: "DoesNotExist" }] }, egress: { rules: [{ action: "reject", to: [{ cidr: "10.40.0.0/16" }] }, { action: "allow", to: [{ cidr: "0.0.0.0/0" }] }] } }),
      entry("team-a", "mine", { selector: { matchLabels: { tier: "db-clients" } }, egress: { rules: [{ action: "allow", to: [{ cidr: "10.99.0.0/16" }] }] } }),
    ]);
    const tenant = g.governing("team-a", selectorLabels({ tier: "db-clients", exempt: "yes" }, "web", "team-a"), null)!;
    // db (selected by the tenant's tier) does not decide; guard (which exempt would escape) does.
    expect(decideGoverned(tenant, { ip: "10.20.0.1", port: 5432, names: [] }, nothing)).toMatchObject({ allowed: true, by: expect.stringContaining("guard rule 2") });
    expect(decideGoverned(tenant, { ip: "10.40.0.1", port: 80, names: [] }, nothing)).toMatchObject({ allowed: false, source: "GlobalTrafficPolicy" });
    // The team's own policy still selects by the tenant's label.
    expect(decideGoverned(tenant, { ip: "10.99.0.1", port: 80, names: [] }, nothing)).toMatchObject({ allowed: true, source: "TrafficPolicy" });
    const etl = g.governing("team-a", selectorLabels({}, "etl", "team-a"), null)!;
    expect(decideGoverned(etl, { ip: "10.30.0.1", port: 80, names: [] }, nothing)).toMatchObject({ allowed: true, by: expect.stringContaining("etl rule 1") });
    expect(g.selectedBy(null, "db", [{ id: "s1", team: "team-a", labels: selectorLabels({ tier: "db-clients" }, "web", "team-a") }])).toEqual([]);
    expect(g.selectedBy(null, "etl", [{ id: "s2", team: "team-b", labels: selectorLabels({ "agents.kruise.io/sandbox-template": "etl" }, "web", "team-b") }])).toEqual([]);
  });

  it("a global policy by template and team: another team's template of that name neither gets it nor escapes a restriction (review 26 H2)", () => {
    const T = "agents.kruise.io/sandbox-template", TEAM = "agents.kruise.io/sandbox-team";
    const g = new TrafficPolicySet();
    g.replace([
      entry(null, "grant", { selector: { matchLabels: { [T]: "etl" }, matchExpressions: [{ key: TEAM, operator: "In", values: ["team-a"] }] }, egress: { rules: [{ action: "allow", to: [{ cidr: "10.30.0.0/16" }] }] } }),
      entry(null, "guard", { selector: { matchExpressions: [{ key: T, operator: "NotIn", values: ["trusted"] }, { key: TEAM, operator: "In", values: ["team-a", "team-b"] }] }, egress: { rules: [{ action: "reject", to: [{ cidr: "10.40.0.0/16" }] }] } }),
    ]);
    const live = [
      { id: "a", team: "team-a", labels: selectorLabels({}, "etl", "team-a") },
      { id: "b", team: "team-b", labels: selectorLabels({}, "etl", "team-b") },
      // a tenant label cannot pose as the team
      { id: "c", team: "team-b", labels: selectorLabels({ [TEAM]: "team-a" }, "etl", "team-b") },
    ];
    expect(g.selectedBy(null, "grant", live)).toEqual(["a"]);
    // team-b naming its template "trusted" stays under the guard; only team-a's/team-b's are selected at all.
    expect(g.selectedBy(null, "guard", [...live, { id: "d", team: "team-b", labels: selectorLabels({}, "trusted", "team-b") }, { id: "e", team: "team-c", labels: selectorLabels({}, "etl", "team-c") }])).toEqual(["a", "b", "c"]);
  });

  it("a global selector naming the template must pin the teams (matchLabels or In); empty and team-only ones stay valid", () => {
    const T = "agents.kruise.io/sandbox-template", TEAM = "agents.kruise.io/sandbox-team";
    expect(globalSelectorRefusal(undefined)).toBeNull();
    expect(globalSelectorRefusal({})).toBeNull();
    expect(globalSelectorRefusal({ matchLabels: { [TEAM]: "team-a" } })).toBeNull();
    expect(globalSelectorRefusal({ matchExpressions: [{ key: TEAM, operator: "NotIn", values: ["platform"] }] })).toBeNull();
    expect(globalSelectorRefusal({ matchLabels: { [T]: "etl", [TEAM]: "team-a" } })).toBeNull();
    expect(globalSelectorRefusal({ matchLabels: { [T]: "etl" }, matchExpressions: [{ key: TEAM, operator: "In", values: ["team-a"] }] })).toBeNull();
    for (const bad of [
      { matchLabels: { [T]: "etl" } },
      { matchExpressions: [{ key: T, operator: "In" as const, values: ["etl"] }] },
      { matchExpressions: [{ key: T, operator: "NotIn" as const, values: ["trusted"] }] },
      { matchExpressions: [{ key: T, operator: "Exists" as const }] },
      { matchLabels: { [T]: "etl" }, matchExpressions: [{ key: TEAM, operator: "NotIn" as const, values: ["team-b"] }] },
      { matchLabels: { [T]: "etl" }, matchExpressions: [{ key: TEAM, operator: "Exists" as const }] },
    ]) expect(globalSelectorRefusal(bad)).toMatch(/must also name the teams \(agents\.kruise\.io\/sandbox-team/);
  });

  it("is not in force where nothing selects the sandbox; E2B's rules come first when it is", () => {
    const empty = new TrafficPolicySet();
    expect(empty.governing("team-a", {}, { allowOut: [], denyOut: ["0.0.0.0/0"] })).toBeUndefined();
    const g = set.governing("team-b", {}, { allowOut: ["192.0.2.9"], denyOut: ["198.51.100.0/24"] })!;
    expect(decideGoverned(g, { ip: "192.0.2.9", port: 1, names: [] }, nothing)).toMatchObject({ allowed: true, source: "e2b" });
    expect(decideGoverned(g, { ip: "198.51.100.9", port: 80, names: [] }, nothing)).toMatchObject({ allowed: false, source: "e2b" });
  });

  it("the floor holds whatever a rule allows; DNS answers a name when some port of it is allowed", () => {
    const all = new TrafficPolicySet();
    all.replace([entry(null, "open", { egress: { rules: [{ action: "allow", to: [{ cidr: "0.0.0.0/0" }] }] } })]);
    const g = all.governing("t", {}, null)!;
    expect(decideGoverned(g, { ip: "10.88.0.1", port: 80, names: [] }, () => "is the host")).toMatchObject({ allowed: false, source: "floor", by: "10.88.0.1 is the host" });
    expect(decideGoverned(g, { ip: "0.0.0.0", port: 80, names: [] }, nothing)).toMatchObject({ allowed: false, source: "floor" });
    const web = set.governing("team-a", { app: "web" }, null)!;
    expect(admitName(web, "api.pkg.test", ["192.0.2.1"], nothing)).toEqual({ addresses: ["192.0.2.1"] });
    expect(admitName(web, "evil.pkg.test", ["192.0.2.1"], nothing)).toMatchObject({ denied: expect.stringContaining("team-a/web rule 1") });
    expect(admitName(web, "other.test", ["192.0.2.1", "203.0.113.9"], nothing)).toEqual({ addresses: ["203.0.113.9"] });
  });

  it("refuses bad specs with the field at fault", () => {
    expect(TrafficPolicySpec.safeParse({ egress: { rules: [{ action: "allow", to: [{ cidr: "300.1.1.1" }] }] } }).success).toBe(false);
    expect(TrafficPolicySpec.safeParse({ egress: { rules: [{ action: "allow", to: [{ cidr: "1.1.1.1", fqdn: "a.test" }] }] } }).success).toBe(false);
    expect(TrafficPolicySpec.safeParse({ egress: { rules: [{ action: "allow", to: [{ fqdn: "a.test" }], ports: [{ port: 9, endPort: 8 }] }] } }).success).toBe(false);
  });
});

describe("the proxy under TrafficPolicies", () => {
  let h: Awaited<ReturnType<typeof taggedHarness>>;
  let port = 0;
  const logged: string[] = [];
  const local = new TrafficPolicySet();

  beforeAll(async () => {
    h = await taggedHarness((originPort) => {
      port = originPort;
      local.replace([
        entry("t", "named", { priority: 1, egress: { rules: [{ action: "allow", to: [{ fqdn: "*.allowed.test" }], ports: [{ port }] }] } }),
        entry(null, "deny-rest", { egress: { rules: [{ action: "reject", to: [{ cidr: "0.0.0.0/0" }] }] } }),
      ]);
      return new TrafficProxy({
        refuse: nothing,
        policyFor: () => "no E2B rules",
        governed: (tag) => local.governing(tag === "s1" ? "t" : "other", {}, null),
        resolve: async (h) => (h.endsWith("allowed.test") || h === "elsewhere.test" ? ["127.0.0.1"] : Promise.reject(Object.assign(new Error("nx"), { code: "ENOTFOUND" }))),
        log: (l) => logged.push(l),
      });
    });
  });

  afterAll(() => h.close());

  const redirected = (tag: string, host: string) => h.get(tag, host);

  const deniedBy = async (source: string) => ((await registry.getSingleMetric("sandbox_egress_denied_total")?.get())?.values.find((v) => v.labels.source === source)?.value ?? 0);

  it("a redirected connection is allowed by an FQDN wildcard only for a name that resolves to where it goes", async () => {
    expect(await redirected("s1", "api.allowed.test")).toContain("hello api.allowed.test");
    const before = await deniedBy("GlobalTrafficPolicy");
    const refused = await redirected("s1", "api.other.test");
    expect(refused).toContain("403 Forbidden");
    expect(refused).toContain("GlobalTrafficPolicy deny-rest rule 1 (reject)");
    expect(await deniedBy("GlobalTrafficPolicy")).toBe(before + 1);
    expect(logged.at(-1)).toBe(`traffic-proxy: s1: denied 127.0.0.1:${port}: GlobalTrafficPolicy deny-rest rule 1 (reject); api.other.test does not resolve to 127.0.0.1`);
    // another team's sandbox: only the global policy
    expect(await redirected("s2", "api.allowed.test")).toContain("GlobalTrafficPolicy deny-rest rule 1 (reject)");
  });
});
