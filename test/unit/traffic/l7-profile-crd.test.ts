// SecurityProfile objects to the profiles one sandbox runs (profile-crd.ts): namespace and
// selector, order (priority, creation time, name, namespace, global first on a tie), and a
// selected profile that cannot be enforced blocking instead of doing nothing.
import { expect, it } from "vitest";
import { profilesFor, type ProfileObject } from "../../../controllers/traffic/l7/profile-crd.ts";
import { evaluateProfiles } from "../../../controllers/traffic/l7/profile.ts";

const rule = (name: string) => [{ name, match: [{ domains: ["api.test"] }], actions: { headerManipulation: { set: [{ name: "x-" + name, value: "1" }] } } }];
const sp = (name: string, namespace: string, spec: ProfileObject["spec"], created = "2026-01-01T00:00:00Z"): ProfileObject => ({ kind: "SecurityProfile", metadata: { name, namespace, creationTimestamp: created }, spec });
const gsp = (name: string, spec: ProfileObject["spec"], created = "2026-01-01T00:00:00Z"): ProfileObject => ({ kind: "GlobalSecurityProfile", metadata: { name, creationTimestamp: created }, spec });

it("selects by namespace and labels and orders by priority, time, name, global first on a tie", () => {
  const objects = [
    sp("late", "team-a", { priority: 10, rules: rule("late") }, "2026-02-01T00:00:00Z"),
    sp("early", "team-a", { priority: 10, rules: rule("early") }),
    sp("other-team", "team-b", { priority: 1, rules: rule("x") }),
    sp("web-only", "team-a", { selector: { matchLabels: { app: "web" } }, rules: rule("web") }),
    gsp("early", { priority: 10, rules: rule("global") }),
    gsp("first", { priority: 5, rules: rule("first") }),
  ];
  const r = profilesFor(objects, { namespace: "team-a", labels: { app: "api" } });
  expect(r.profiles.map((p) => p.name)).toEqual(["first", "early", "team-a/early", "team-a/late"]);
  expect(r.refused).toEqual([]);
  expect(evaluateProfiles(r.profiles, "api.test", "GET", "/").matched).toEqual(["first", "global", "early", "late"]);
  expect(profilesFor(objects, { namespace: "team-a", labels: { app: "web" } }).profiles.map((p) => p.name)).toContain("team-a/web-only");
});

it("turns a selected profile it cannot enforce into a block of every inspected request, saying why", () => {
  const objects = [
    gsp("regex", { rules: [{ name: "r", match: [{ domains: ["api.test"], paths: [{ type: "Regex", value: "^/a" }] }], actions: { block: {} } }] }),
    sp("broken", "team-a", { rules: "nope" }),
  ];
  const r = profilesFor(objects, { namespace: "team-a", labels: {} });
  // Same priority and time: by name, so "broken" runs first.
  expect(r.refused).toEqual([
    { profile: "team-a/broken", reason: "rules is not a list" },
    { profile: "regex", reason: 'rule "r": path type Regex is not supported' },
  ]);
  const o = evaluateProfiles(r.profiles, "anything.test", "GET", "/");
  expect(o.terminal).toMatchObject({ kind: "block", status: 403 });
  expect(o.terminal!.rule).toContain("not enforceable");
});

it("takes the lowest rate limit, counting all requests when a limiting profile says scope All", () => {
  const a = sp("a", "team-a", { rules: rule("a"), rateLimit: { requestsPerMinute: 30 } });
  const b = gsp("b", { rules: rule("b"), rateLimit: { requestsPerMinute: 60, scope: "All" } });
  expect(profilesFor([a], { namespace: "team-a", labels: {} })).toMatchObject({ requestsPerMinute: 30 });
  expect(profilesFor([a], { namespace: "team-a", labels: {} }).rateLimitAll).toBeUndefined();
  expect(profilesFor([a, b], { namespace: "team-a", labels: {} })).toMatchObject({ requestsPerMinute: 30, rateLimitAll: true });
});

it("a global profile sees only the platform's labels: a tenant's label neither selects it nor takes its sandbox out of it (review 25 M4)", () => {
  const T = "agents.kruise.io/sandbox-template", TEAM = "agents.kruise.io/sandbox-team";
  const objects = [
    gsp("by-tenant-label", { selector: { matchLabels: { tier: "db" } }, rules: rule("grant") }),
    gsp("guard", { selector: { matchExpressions: [{ key: "exempt", operator: "DoesNotExist" }] }, rules: rule("guard") }),
    gsp("etl", { selector: { matchLabels: { [T]: "etl", [TEAM]: "team-a" } }, rules: rule("etl") }),
    sp("mine", "team-a", { selector: { matchLabels: { tier: "db" } }, rules: rule("mine") }),
  ];
  const names = (labels: Record<string, string>) => profilesFor(objects, { namespace: "team-a", labels }).profiles.map((p) => p.name);
  // The tenant's tier selects the team's own profile, not the global grant; its `exempt` does not escape the guard.
  expect(names({ tier: "db", exempt: "yes", [T]: "web", [TEAM]: "team-a" })).toEqual(["guard", "team-a/mine"]);
  expect(names({ [T]: "etl", [TEAM]: "team-a" })).toEqual(["etl", "guard"]);
});
