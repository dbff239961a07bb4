import { z } from "zod";
import { parseCidr } from "../egress/address.ts";
import { TeamName } from "./team.ts";

/*
 * TrafficPolicy / GlobalTrafficPolicy (L3/L4 egress), as the admin API takes them and as the edge
 * sends them to agents (schema/protocol/messages.ts `trafficPolicies`); the CRDs' spec
 * (schema/crd/definitions.ts) with the same bounds. Semantics: controllers/traffic/l4.ts.
 * Only egress is enforced; `from`, `service` and `workload` peers are not taken here.
 */

export const MAX_TRAFFIC_POLICIES = 200;
const MAX_RULES = 50;
const MAX_PEERS = 20;

const Fqdn = z
  .string()
  .max(253)
  .regex(/^(\*\.)?([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\.)*[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\.?$/i, "fqdn must be a DNS name, optionally *.name for its subdomains");
const Cidr = z
  .string()
  .max(43)
  .refine((c) => parseCidr(c.includes("/") ? c : `${c}/${c.includes(":") ? 128 : 32}`) !== undefined, "cidr must be an IPv4/IPv6 address or CIDR block");
export const TrafficPeer = z.union([z.strictObject({ cidr: Cidr }), z.strictObject({ fqdn: Fqdn })], { error: "a peer is exactly one of {cidr} or {fqdn}" });
const PortNumber = z.int().min(1).max(65535);
export const TrafficPort = z
  .strictObject({ protocol: z.enum(["TCP", "UDP", "ICMP", "SCTP"]).optional(), port: PortNumber.optional(), endPort: PortNumber.optional() })
  .refine((p) => p.endPort === undefined || (p.port !== undefined && p.endPort >= p.port), "endPort must be at least port");
export const TrafficRule = z.strictObject({
  action: z.enum(["allow", "reject"]),
  to: z.array(TrafficPeer).min(1).max(MAX_PEERS),
  ports: z.array(TrafficPort).max(MAX_PEERS).optional(),
});
const LabelValue = z.string().max(63);
const LabelKey = z.string().min(1).max(253);
export const LabelSelectorSchema = z.strictObject({
  matchLabels: z.record(LabelKey, LabelValue).refine((m) => Object.keys(m).length <= 20, "at most 20 matchLabels").optional(),
  matchExpressions: z
    .array(z.strictObject({ key: LabelKey, operator: z.enum(["In", "NotIn", "Exists", "DoesNotExist"]), values: z.array(LabelValue).max(20).optional() }))
    .max(20)
    .optional(),
});
/** A policy's spec (the admin API's PUT body; the CRD's `spec`, egress only). */
export const TrafficPolicySpec = z.strictObject({
  priority: z.int().min(0).max(2 ** 31 - 1).default(1000),
  selector: LabelSelectorSchema.optional(),
  egress: z.strictObject({ rules: z.array(TrafficRule).max(MAX_RULES).default([]) }),
});
export type TrafficPolicySpec = z.infer<typeof TrafficPolicySpec>;

export const TrafficPolicyName = z.string().regex(/^[a-z0-9]([-.a-z0-9]{0,251}[a-z0-9])?$/, "name must be a DNS-1123 subdomain");

/** One policy as the edge sends it: `team` null for a GlobalTrafficPolicy (every team's sandboxes). */
export const TrafficPolicyEntry = z.object({ team: TeamName.nullable(), name: TrafficPolicyName, spec: TrafficPolicySpec });
export type TrafficPolicyEntry = z.infer<typeof TrafficPolicyEntry>;

export interface LabelSelector {
  matchLabels?: Record<string, string>;
  matchExpressions?: { key: string; operator: "In" | "NotIn" | "Exists" | "DoesNotExist"; values?: string[] }[];
}

/** Whether a label selector (empty: everything) selects `labels`; the edge's status and the
 * agent's engine (controllers/traffic/l4.ts) both use it. */
export function selects(selector: LabelSelector | undefined, labels: Record<string, string>): boolean {
  for (const [k, v] of Object.entries(selector?.matchLabels ?? {})) if (labels[k] !== v) return false;
  for (const e of selector?.matchExpressions ?? []) {
    const has = Object.hasOwn(labels, e.key);
    const inValues = has && (e.values ?? []).includes(labels[e.key]!);
    const ok = e.operator === "In" ? inValues : e.operator === "NotIn" ? !inValues : e.operator === "Exists" ? has : !has;
    if (!ok) return false;
  }
  return true;
}

/** A sandbox's labels from its E2B metadata (`label:<k>` keys, schema/api/extensions.ts). */
export function labelsFromMetadata(metadata: Record<string, string>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(metadata)) if (k.startsWith("label:")) out[k.slice("label:".length)] = v;
  return out;
}
