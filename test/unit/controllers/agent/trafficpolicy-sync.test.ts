// The TrafficPolicy kinds of the CRD sync (kube-sync/trafficpolicy-sync.ts), pure: what a
// GlobalTrafficPolicy may select before it is sent to the edge.
import { expect, it } from "vitest";
import { GLOBAL_TRAFFIC_POLICY, TRAFFIC_POLICY, type TrafficPolicyObject } from "../../../../controllers/agent/kube-sync/trafficpolicy-sync.ts";

const obj = (selector: unknown): TrafficPolicyObject => ({ metadata: { name: "p", uid: "u", generation: 1 }, spec: { selector, egress: { rules: [{ action: "allow", to: [{ cidr: "10.20.0.0/16" }] }] } } });

it("a GlobalTrafficPolicy naming a template without its teams is refused here (Unsupported), a team's is not (review 26 H2)", () => {
  const byTemplate = { matchLabels: { "agents.kruise.io/sandbox-template": "code-interpreter" } };
  expect(GLOBAL_TRAFFIC_POLICY.upsert(obj(byTemplate))).toEqual({ problem: expect.stringMatching(/must also name the teams \(agents\.kruise\.io\/sandbox-team/) });
  // A team's own policy selects within the team: the template label is enough there.
  expect(TRAFFIC_POLICY.upsert(obj(byTemplate))).toMatchObject({ spec: { selector: byTemplate } });
  const pinned = { ...byTemplate, matchExpressions: [{ key: "agents.kruise.io/sandbox-team", operator: "In", values: ["acme"] }] };
  expect(GLOBAL_TRAFFIC_POLICY.upsert(obj(pinned))).toMatchObject({ spec: { selector: pinned } });
  expect(GLOBAL_TRAFFIC_POLICY.upsert(obj(undefined))).toMatchObject({ spec: { priority: 1000 } });
  const refused = GLOBAL_TRAFFIC_POLICY.refused(undefined, 1, { code: "bad_request", message: "x", here: true }, "2026-12-05T00:00:00.000Z");
  expect(refused.conditions!.map((c) => [c.type, c.status, c.reason])).toEqual([["Accepted", "False", "Unsupported"]]);
});

it("the edge's refusal of a global object from a cluster GLOBAL_POLICY_CLUSTERS does not name is the object's Accepted False, reason Rejected, with the edge's message", () => {
  const message = "cluster c may not set a GlobalTrafficPolicy: it governs every team on every cluster, so only the clusters the edge's GLOBAL_POLICY_CLUSTERS var names may; …";
  const refused = GLOBAL_TRAFFIC_POLICY.refused(undefined, 1, { code: "forbidden", message }, "2026-12-05T00:00:00.000Z");
  expect(refused.conditions).toEqual([expect.objectContaining({ type: "Accepted", status: "False", reason: "Rejected", message: expect.stringContaining("GLOBAL_POLICY_CLUSTERS") })]);
});
