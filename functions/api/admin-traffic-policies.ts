// Admin HTTP API for TrafficPolicy (a team's) and GlobalTrafficPolicy (every team's), for
// deployments without Kubernetes (OpenKruise §1.7; schema/api/traffic-policy.ts, egress only).
//   GET    /admin/traffic-policies                              every policy, with status
//   GET    /admin/teams/{team}/traffic-policies[/{name}]        a team's
//   PUT    /admin/teams/{team}/traffic-policies/{name}          {priority?, selector?, egress: {rules}}
//   DELETE /admin/teams/{team}/traffic-policies/{name}
//   GET|PUT|DELETE /admin/global-traffic-policies/{name}
import { getTrafficPolicyView, listTrafficPolicyViews, removeTrafficPolicy, setTrafficPolicy, trafficPolicyKeys } from "../../durable-objects/operations/traffic-policies.ts";
import { globalSelectorRefusal, MAX_TRAFFIC_POLICIES, TrafficPolicyName, TrafficPolicySpec } from "../../schema/api/traffic-policy.ts";
import { policyRoutes } from "./admin-policy-routes.ts";

export const adminTrafficPolicies = policyRoutes({
  plural: "traffic-policies",
  kind: "TrafficPolicy",
  auditAs: "traffic-policy",
  max: MAX_TRAFFIC_POLICIES,
  name: TrafficPolicyName,
  nameLabel: "policy name",
  spec: TrafficPolicySpec,
  list: listTrafficPolicyViews,
  keys: trafficPolicyKeys,
  get: getTrafficPolicyView,
  set: setTrafficPolicy,
  remove: removeTrafficPolicy,
  globalRefusal: (spec) => globalSelectorRefusal(spec.selector),
});
