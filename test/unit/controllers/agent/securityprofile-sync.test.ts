// The SecurityProfile kind of the CRD sync (kube-sync/securityprofile-sync.ts), pure: what is sent
// to the edge, what is never sent (beyond what the proxy enforces: Accepted False, Unsupported,
// naming the field), and the status after the edge's answer.
import { expect, it } from "vitest";
import { globalSecurityProfileKind, securityProfileKind, type SecurityProfileObject } from "../../../../controllers/agent/kube-sync/securityprofile-sync.ts";

const obj = (spec: unknown): SecurityProfileObject => ({ metadata: { name: "p", namespace: "team-a", uid: "u", generation: 2 }, spec });
const NOW = "2026-12-02T00:00:00.000Z";

it("sends the spec with defaults; refuses what the proxy cannot enforce, naming the field", () => {
  const rules = [{ name: "tools", match: [{ domains: ["mcp.example.test"] }], actions: { mcpToolPolicy: { rules: [{ toolNames: ["read_*"], action: "allow" }] } } }];
  expect(securityProfileKind.upsert(obj({ rules }))).toEqual({ spec: { priority: 1000, rules } });
  const regex = securityProfileKind.upsert(obj({ rules: [{ name: "r", match: [{ domains: ["a.test"], paths: [{ type: "Regex", value: "/x" }] }], actions: { block: {} } }] }));
  expect(regex).toEqual({ problem: expect.stringMatching(/^spec\.rules\.0\.match\.0\.paths\.0\.type: path type must be Prefix or Exact \(Regex is not supported\)/) });
  expect(securityProfileKind.upsert(obj({ rules: [], inputs: [] }))).toEqual({ problem: expect.stringContaining("inputs") });
  // A rule path not in the form requests are judged in would never match: refused, naming the form.
  const unnormal = securityProfileKind.upsert(obj({ rules: [{ name: "r", match: [{ domains: ["a.test"], paths: [{ type: "Prefix", value: "/%61dmin" }] }], actions: { block: {} } }] }));
  expect(unnormal).toEqual({ problem: expect.stringMatching(/^spec\.rules\.0\.match\.0\.paths\.0\.value: path "\/%61dmin" is not in the form requests are judged in .*write "\/admin"$/) });
});

it("Accepted and Programmed after the edge applied it; Unsupported or Rejected after a refusal", () => {
  const ok = securityProfileKind.status(undefined, 2, { id: "1", result: "applied" }, NOW)!;
  expect(ok.observedGeneration).toBe(2);
  expect(ok.conditions!.map((c) => [c.type, c.status, c.reason])).toEqual([
    ["Accepted", "True", "Accepted"],
    ["Programmed", "True", "Programmed"],
  ]);
  const unsupported = securityProfileKind.refused(ok, 3, { code: "bad_request", message: "spec.inputs: ..." }, NOW);
  expect(unsupported.conditions!.map((c) => [c.type, c.status, c.reason, c.message])).toEqual([
    ["Accepted", "False", "Unsupported", "spec.inputs: ..."],
    ["Programmed", "False", "Unsupported", "spec.inputs: ..."],
  ]);
  expect(securityProfileKind.refused(ok, 3, { code: "forbidden", message: "cluster x runs no template" }, NOW).conditions![0]!.reason).toBe("Rejected");
});

it("GlobalSecurityProfiles: the cluster-scoped plural, the same spec rules, no inventory", () => {
  expect(globalSecurityProfileKind).toMatchObject({ kind: "GlobalSecurityProfile", plural: "globalsecurityprofiles", call: "securityprofileobjects", inventory: false });
  expect(securityProfileKind.inventory).toBeUndefined();
  const rules = [{ name: "r", match: [{ domains: ["a.test"] }], actions: { block: {} } }];
  expect(globalSecurityProfileKind.upsert(obj({ rules }))).toEqual({ spec: { priority: 1000, rules } });
  expect(globalSecurityProfileKind.upsert(obj({ rules, audit: [] }))).toEqual({ problem: expect.stringContaining("audit") });
});
