import { z } from "zod";
import { MAX_TRAFFIC_POLICIES, TrafficPolicyEntry } from "../api/traffic-policy.ts";
import { EgressPolicySchema } from "./egress.ts";

/**
 * What the traffic-proxy sidecar of one sandbox pod enforces (kubernetes driver): the file
 * `policy.json` of the pod's ConfigMap `<pod>-traffic`, mounted read-only into the sidecar only and
 * re-read when the kubelet swaps it. Every string here is data (team, labels, rules): the sidecar
 * parses it with this schema and never hands it to a shell.
 *   team, labels      how TrafficPolicies select the sandbox (its namespace; E2B `label:` metadata)
 *   egress            E2B allowOut/denyOut as the agent compiled them (null: none)
 *   trafficPolicies   the team's and global policies that select it (empty: E2B's rules alone)
 */
export const PodTrafficPolicySchema = z.strictObject({
  team: z.string().max(63).nullable(),
  labels: z.record(z.string().max(253), z.string().max(63)),
  egress: EgressPolicySchema.nullable(),
  trafficPolicies: z.array(TrafficPolicyEntry).max(MAX_TRAFFIC_POLICIES),
});
export type PodTrafficPolicy = z.infer<typeof PodTrafficPolicySchema>;
