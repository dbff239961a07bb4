import { z } from "zod";
import { parseCidr } from "../egress/address.ts";
import { GROUP, LABEL } from "../crd/labels.ts";
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

/** The label the platform gives every sandbox for selectors: its template's id (the SandboxSet's
 * name on Kubernetes, where its Sandbox carries it too). A tenant cannot set a key under this
 * prefix (schema/crd/user-metadata.ts refuses `agents.kruise.io/` keys; selectorLabels drops them),
 * but it does choose the value: template ids are unique per team only, so any team can name a
 * template like another's. Hence TEAM_SELECTOR_LABEL, and globalSelectorRefusal. */
export const TEMPLATE_SELECTOR_LABEL = LABEL.template;
/** The platform's label naming the sandbox's team (the team's name, which is its namespace on
 * Kubernetes): the one label value no tenant chooses, so a global selector that names a template
 * must name the teams too (globalSelectorRefusal; review 26 H2). */
export const TEAM_SELECTOR_LABEL = `${GROUP}/sandbox-team`;
const PLATFORM_PREFIX = `${GROUP}/`;

/** A sandbox's labels as selectors see them: the tenant's (E2B `label:` metadata, a claim's
 * labels) and the platform's, which the tenant cannot set or shadow: its template's id and its
 * team's name. */
export function selectorLabels(user: Readonly<Record<string, string>>, template: string | undefined, team: string | null | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(user)) if (!k.startsWith(PLATFORM_PREFIX)) out[k] = v;
  if (template) out[TEMPLATE_SELECTOR_LABEL] = template;
  if (team) out[TEAM_SELECTOR_LABEL] = team;
  return out;
}

/** Why a global (GlobalTrafficPolicy, GlobalSecurityProfile) selector is refused, or null. One
 * that constrains the template label without pinning the team (matchLabels, or `In`) would let
 * any team into a grant (or out of a restriction) by naming its own template like the one
 * selected. An empty selector (every sandbox) and one by team alone stay valid. */
export function globalSelectorRefusal(selector: LabelSelector | undefined): string | null {
  const names = (key: string) => Object.hasOwn(selector?.matchLabels ?? {}, key) || (selector?.matchExpressions ?? []).some((e) => e.key === key);
  if (!names(TEMPLATE_SELECTOR_LABEL)) return null;
  const pinsTeam = Object.hasOwn(selector?.matchLabels ?? {}, TEAM_SELECTOR_LABEL) || (selector?.matchExpressions ?? []).some((e) => e.key === TEAM_SELECTOR_LABEL && e.operator === "In");
  if (pinsTeam) return null;
  return `a global selector on ${TEMPLATE_SELECTOR_LABEL} must also name the teams (${TEAM_SELECTOR_LABEL} in matchLabels, or an In expression): template ids are unique per team only, so any team can name a template like the one selected and get its sandboxes in (or out)`;
}

/** Whether a policy or profile selects a sandbox with `labels` (selectorLabels). A global one
 * (GlobalTrafficPolicy, GlobalSecurityProfile: the platform's, granting what no team's may, such
 * as the cluster's ranges) sees only the platform's labels: with the tenant's, any API key could
 * put its sandbox under a grant meant for others (review 25 M4). A team's sees them all: the
 * tenant's labels select within the tenant's own team. */
export function selectsSandbox(selector: LabelSelector | undefined, labels: Readonly<Record<string, string>>, global: boolean): boolean {
  if (!global) return selects(selector, labels);
  const platform: Record<string, string> = {};
  for (const [k, v] of Object.entries(labels)) if (k.startsWith(PLATFORM_PREFIX)) platform[k] = v;
  return selects(selector, platform);
}

/** Whether a label selector (empty: everything) selects `labels` (selectsSandbox says which
 * labels a policy may see). */
export function selects(selector: LabelSelector | undefined, labels: Readonly<Record<string, string>>): boolean {
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
