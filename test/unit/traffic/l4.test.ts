// TrafficPolicy / GlobalTrafficPolicy (L3/L4) decisions: selection, order, first match, default
// reject, ports and protocols, FQDN peers, and E2B's rules mapped onto the same engine agreeing
// with the proxy's own E2B decision (policy.ts) where both speak.
import { describe, expect, it } from "vitest";
import { decideL4, e2bPolicy, selects, type L4Destination, type L4Policy } from "../../../controllers/traffic/l4.ts";
import { compilePolicy, decide } from "../../../controllers/traffic/policy.ts";

const to = (ip: string, port = 443, names: string[] = [], protocol: L4Destination["protocol"] = "TCP"): L4Destination => ({ ip, port, names, protocol });
const web = { app: "web" };

const team: L4Policy = {
  name: "team-a/web",
  global: false,
  priority: 500,
  selector: { matchLabels: { app: "web" } },
  egress: {
    rules: [
      { action: "reject", to: [{ cidr: "203.0.113.66" }] },
      { action: "allow", to: [{ cidr: "203.0.113.0/24" }], ports: [{ protocol: "TCP", port: 8000, endPort: 8100 }] },
      { action: "allow", to: [{ fqdn: "*.pypi.test" }], ports: [{ port: 443 }] },
      { action: "allow", ports: [{ port: 22 }] }, // no `to`: skipped
    ],
  },
};
const urgent: L4Policy = { name: "team-a/urgent", global: false, priority: 10, egress: { rules: [{ action: "allow", to: [{ cidr: "203.0.113.66/32" }] }] } };
const global: L4Policy = {
  name: "baseline",
  global: true,
  priority: 0,
  egress: { rules: [{ action: "reject", to: [{ cidr: "203.0.113.0/24" }] }, { action: "allow", to: [{ cidr: "198.51.100.0/24" }] }] },
};

describe("TrafficPolicy L4", () => {
  it("selectors: labels and expressions", () => {
    expect(selects(undefined, {})).toBe(true);
    expect(selects({ matchLabels: { app: "web" } }, { app: "web", x: "1" })).toBe(true);
    expect(selects({ matchLabels: { app: "web" } }, { app: "db" })).toBe(false);
    expect(selects({ matchExpressions: [{ key: "tier", operator: "In", values: ["a", "b"] }] }, { tier: "b" })).toBe(true);
    expect(selects({ matchExpressions: [{ key: "tier", operator: "NotIn", values: ["a"] }] }, { tier: "a" })).toBe(false);
    expect(selects({ matchExpressions: [{ key: "tier", operator: "DoesNotExist" }] }, {})).toBe(true);
  });

  it("no policy selects: not governed; selected: first match wins, unmatched rejected", () => {
    expect(decideL4([team], { app: "db" }, to("203.0.113.5", 8050))).toBeUndefined();
    expect(decideL4([team], web, to("203.0.113.5", 8050))).toEqual({ allowed: true, by: "TrafficPolicy team-a/web rule 2 (allow)" });
    expect(decideL4([team], web, to("203.0.113.66", 8050))).toEqual({ allowed: false, by: "TrafficPolicy team-a/web rule 1 (reject)" });
    expect(decideL4([team], web, to("203.0.113.5", 8101))!.allowed).toBe(false);
    expect(decideL4([team], web, to("203.0.113.5", 8050, [], "UDP"))!.by).toMatch(/^no rule matched \(team-a\/web/);
    // The rule without `to` opens nothing.
    expect(decideL4([team], web, to("192.0.2.1", 22))!.allowed).toBe(false);
  });

  it("lower priority first; team policies before global ones whatever their priority", () => {
    expect(decideL4([team, urgent], web, to("203.0.113.66", 8050))!.by).toBe("TrafficPolicy team-a/urgent rule 1 (allow)");
    // The global reject of 203.0.113.0/24 (priority 0) lies beneath the team's allow.
    expect(decideL4([global, team], web, to("203.0.113.5", 8050))!.by).toBe("TrafficPolicy team-a/web rule 2 (allow)");
    expect(decideL4([global, team], web, to("203.0.113.5", 9000))!.by).toBe("GlobalTrafficPolicy baseline rule 1 (reject)");
    expect(decideL4([global, team], web, to("198.51.100.7", 9000))!.allowed).toBe(true);
  });

  it("FQDN peers match the destination's names (wildcards: subdomains only), never its address alone", () => {
    expect(decideL4([team], web, to("192.0.2.9", 443, ["files.pypi.test"]))!.allowed).toBe(true);
    expect(decideL4([team], web, to("192.0.2.9", 443, ["pypi.test"]))!.allowed).toBe(false);
    expect(decideL4([team], web, to("192.0.2.9", 443))!.allowed).toBe(false);
    expect(decideL4([team], web, to("192.0.2.9", 80, ["files.pypi.test"]))!.allowed).toBe(false);
  });

  it("E2B's allowOut/denyOut on this engine agree with the proxy's E2B decision for public destinations", () => {
    const cases = [
      { allowOut: ["198.51.100.7"], denyOut: ["0.0.0.0/0"] },
      { allowOut: [], denyOut: ["198.51.100.0/24"] },
      { allowOut: ["api.example.test", "198.51.100.0/28"], denyOut: ["0.0.0.0/0"] },
      { allowOut: ["*.example.test"], denyOut: ["203.0.113.0/24"] },
    ];
    const dests: [string, string[]][] = [
      ["198.51.100.7", []],
      ["198.51.100.20", []],
      ["203.0.113.9", []],
      ["203.0.113.9", ["api.example.test"]],
      ["203.0.113.9", ["x.example.test"]],
      ["192.0.2.1", ["example.test"]],
    ];
    for (const rules of cases) {
      const compiled = compilePolicy(rules);
      for (const [ip, names] of dests) {
        const e2b = names.length ? decide(compiled, names[0]!, [ip]) : decide(compiled, ip, []);
        const l4 = decideL4([e2bPolicy("sandbox", rules)], {}, to(ip, 443, names))!;
        expect({ rules, ip, names, allowed: l4.allowed }).toEqual({ rules, ip, names, allowed: e2b.allowed });
      }
    }
  });
});
