import { z } from "zod";
import { MAX_SECURITY_PROFILES, SecurityProfileEntry } from "../api/security-profile.ts";
import { MAX_TRAFFIC_POLICIES, TrafficPolicyEntry } from "../api/traffic-policy.ts";
import { EgressPolicySchema } from "./egress.ts";
import { NetworkRulesSchema } from "./intent.ts";

/**
 * What the traffic-proxy sidecar of one sandbox pod enforces (kubernetes driver): the file
 * `policy.json` of the pod's ConfigMap `<pod>-traffic`, mounted read-only into the sidecar only and
 * re-read when the kubelet swaps it. Every string here is data (team, labels, rules): the sidecar
 * parses it with this schema and never hands it to a shell.
 *   team, labels      how TrafficPolicies select the sandbox (its namespace; E2B `label:` metadata)
 *   egress            E2B allowOut/denyOut as the agent compiled them (null: none)
 *   trafficPolicies   the team's and global policies that select it (empty: E2B's rules alone)
 *   securityProfiles  the SecurityProfiles / GlobalSecurityProfiles that select it (L7; absent or
 *                     empty: none). Secret values are never here: only the names profiles give
 *   networkRules      E2B `network.rules` with `${e2b.secrets.<name>}` placeholders (L7)
 * The secret values and the pod's CA key come in the pod's Secret `<pod>-traffic`, mounted into
 * the sidecar only (PodTrafficSecretsSchema).
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

/** `secrets.json` of the pod's Secret: the values of the secrets its profiles' tokenTransformations
 * and its `network.rules` name (names lower-cased, as the edge stores them), and nothing else. */
export const PodTrafficSecretsSchema = z.record(z.string().max(253), z.string().max(64 * 1024));
