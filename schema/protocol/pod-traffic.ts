import { z } from "zod";
import { MAX_SECURITY_PROFILES, SecurityProfileEntry } from "../api/security-profile.ts";
import { MAX_TRAFFIC_POLICIES, TrafficPolicyEntry } from "../api/traffic-policy.ts";
import { EgressPolicySchema } from "./egress.ts";
import { NetworkRulesSchema } from "./intent.ts";

/**
 * What the traffic-proxy sidecar of one sandbox pod enforces (kubernetes driver). Every string here
 * is data (team, labels, rules): the sidecar parses it with these schemas and never hands it to a
 * shell. It reaches the sidecar in two halves:
 *   - `policy.json` of the pod's ConfigMap `<pod>-traffic` (L4, nothing sensitive; readable by the
 *     namespace's users), mounted read-only into the sidecar and re-read when the kubelet swaps it:
 *       team, labels      how TrafficPolicies select the sandbox (its namespace; E2B `label:` metadata)
 *       egress            E2B allowOut/denyOut as the agent compiled them (null: none)
 *       trafficPolicies   the team's and global policies that select it (empty: E2B's rules alone)
 *   - `l7.json` of the pod's Secret `<pod>-traffic` (PodTrafficL7Schema), mounted into the sidecar
 *     only: a profile may carry literal header values (a GlobalSecurityProfile's `set` is the only
 *     way it injects a credential), which no namespace user and no sandbox container may read:
 *       securityProfiles  the SecurityProfiles / GlobalSecurityProfiles that select it (absent or
 *                         empty: none), with the names of the secrets they use
 *       networkRules      E2B `network.rules` with `${e2b.secrets.<name>}` placeholders
 * The agent builds the whole (PodTrafficPolicy) and splits it (traffic-pod.ts `splitPodPolicy`):
 * the ConfigMap never holds the L7 fields, and the sidecar ignores them there. The secret values
 * and the pod's CA key are in the same Secret (PodTrafficSecretsSchema).
 */
export const PodTrafficPolicySchema = z.strictObject({
  team: z.string().max(63).nullable(),
  labels: z.record(z.string().max(253), z.string().max(63)),
  egress: EgressPolicySchema.nullable(),
  trafficPolicies: z.array(TrafficPolicyEntry).max(MAX_TRAFFIC_POLICIES),
  securityProfiles: z.array(SecurityProfileEntry).max(MAX_SECURITY_PROFILES).optional(),
  networkRules: NetworkRulesSchema.optional(),
});
export type PodTrafficPolicy = z.infer<typeof PodTrafficPolicySchema>;

/** `l7.json` of the pod's Secret: the L7 half (see above). */
export const PodTrafficL7Schema = PodTrafficPolicySchema.pick({ securityProfiles: true, networkRules: true });
export type PodTrafficL7 = z.infer<typeof PodTrafficL7Schema>;

/** `secrets.json` of the pod's Secret: the values of the secrets its profiles' tokenTransformations
 * and its `network.rules` name (names lower-cased, as the edge stores them), and nothing else. */
export const PodTrafficSecretsSchema = z.record(z.string().max(253), z.string().max(64 * 1024));
