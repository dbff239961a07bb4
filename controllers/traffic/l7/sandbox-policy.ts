// One sandbox's L7 policy from what selects it: E2B `network.rules` and the SecurityProfile
// entries the edge sent (as profile-crd.ts reads objects). Shared by the local driver's proxy
// (controllers/drivers/local/egress-l7.ts) and the pod sidecar (../pod-l7.ts), so both enforce the
// same words. Pure.
import type { SecurityProfileEntry } from "../../../schema/api/security-profile.ts";
import { e2bRules, type L7Policy } from "./policy.ts";
import type { ProfileObject, ProfilesFor } from "./profile-crd.ts";

type NetworkRules = Record<string, { transform?: { headers?: Record<string, string> } }[]>;

/** A profile as profile-crd.ts reads objects (the edge's team is the sandbox's namespace). */
export function profileObject(e: SecurityProfileEntry): ProfileObject {
  return {
    kind: e.team === null ? "GlobalSecurityProfile" : "SecurityProfile",
    metadata: { name: e.name, ...(e.team !== null ? { namespace: e.team } : {}), creationTimestamp: new Date(e.createdAt).toISOString() },
    spec: e.spec,
  };
}

/** The L7 policy, or undefined when neither rules nor a profile apply (nothing is inspected). */
export function sandboxL7Policy(rules: NetworkRules, selected: ProfilesFor): L7Policy | undefined {
  if (!Object.keys(rules).length && !selected.profiles.length) return undefined;
  const limit = selected.requestsPerMinute ? { requestsPerMinute: selected.requestsPerMinute, ...(selected.rateLimitAll ? { rateLimitAll: true } : {}) } : {};
  return { http: e2bRules(rules), mcp: [], profiles: selected.profiles, ...limit };
}
