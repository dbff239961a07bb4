// TrafficPolicy / GlobalTrafficPolicy operations (the admin API and the CRD sync;
// schema/api/traffic-policy.ts): one configuration of policy-objects.ts. After every change each
// cluster sends its agent the global policies and those of the teams it serves
// (ClusterDO.sendTrafficPolicies; an agent connecting later gets them with its welcome). Status: the live sandboxes each policy selects.
import type { TrafficPolicyEntry } from "../../schema/api/traffic-policy.ts";
import { deleteTrafficPolicy, listTrafficPolicies, putTrafficPolicy } from "../store/traffic-policies.ts";
import { policyObjects, toEveryAgent, type PolicyObjectView } from "./policy-objects.ts";

export type TrafficPolicyView = PolicyObjectView<TrafficPolicyEntry, "TrafficPolicy" | "GlobalTrafficPolicy">;

const policies = policyObjects({
  kinds: { team: "TrafficPolicy", global: "GlobalTrafficPolicy" },
  list: listTrafficPolicies,
  put: putTrafficPolicy,
  remove: deleteTrafficPolicy,
  push: (env) => toEveryAgent(env, (c) => c.sendTrafficPolicies()),
});

export const listTrafficPolicyViews = policies.list;
export const trafficPolicyKeys = policies.keys;
export const getTrafficPolicyView = policies.get;
export const setTrafficPolicy = policies.set;
/** Whether there was one. */
export const removeTrafficPolicy = policies.remove;
