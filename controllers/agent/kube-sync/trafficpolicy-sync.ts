// CRD sync for TrafficPolicies (a namespace's, team = namespace) and GlobalTrafficPolicies
// (cluster-scoped, `namespace` null): each object goes to the edge as a `trafficpolicyobjects`
// item; the edge stores it as the admin API would and sends it to the agents of the clusters that
// serve its team (a global one to every agent), whose proxy enforces it
// (controllers/traffic/governed.ts). A GlobalTrafficPolicy is applied only from a cluster the
// edge's GLOBAL_POLICY_CLUSTERS names (or its SINGLE_CLUSTER): elsewhere it is Accepted False,
// reason Rejected, with the edge's `forbidden` message naming the var. While the object exists its status is asked
// for every `statusMs` and written to its status subresource: `selectedSandboxes` (the live
// sandboxes it selects, from the edge) and an `Accepted` condition (False with the edge's or this
// sync's reason when refused). Only egress with cidr/fqdn peers is enforced: an object with
// ingress rules, `from`, or service/workload peers is refused (Accepted False, reason
// Unsupported), never enforced in part. Objects deleted while the agent was down stay on the edge
// until deleted through the admin API (no inventory push yet). The push, status and retries are
// edge-object-sync.ts's.
import type { KubernetesObject } from "@kubernetes/client-node";
import { EdgeObjectSync, type EdgeObjectKind, type EdgeObjectSyncOptions } from "./edge-object-sync.ts";
import { globalSelectorRefusal, TrafficPolicySpec } from "../../../schema/api/traffic-policy.ts";
import { setCondition, type Condition } from "../../../schema/crd/conditions.ts";
import type { ReplyItem } from "../../../schema/protocol/index.ts";

export interface TrafficPolicyObject extends KubernetesObject {
  spec: { priority?: number; selector?: unknown; ingress?: { rules?: unknown[] }; egress?: { rules?: { action: string; from?: unknown[]; to?: Record<string, unknown>[]; ports?: unknown[] }[] } };
  status?: TrafficPolicyStatus;
}
export interface TrafficPolicyStatus {
  observedGeneration?: number;
  selectedSandboxes?: string[];
  conditions?: Condition[];
}

/** The edge's spec for an object, or why it cannot be enforced (pure). `global`: a
 * GlobalTrafficPolicy, whose selector must not name a template without its teams. */
export function trafficSpecOf(o: TrafficPolicyObject, global = false): TrafficPolicySpec | string {
  const s = o.spec ?? {};
  if (s.ingress?.rules?.length) return "ingress rules are not enforced here (egress only)";
  const rules = s.egress?.rules ?? [];
  if (rules.some((r) => r.from?.length)) return "`from` peers are not enforced here";
  if (rules.some((r) => r.to?.some((p) => !("cidr" in p) && !("fqdn" in p)))) return "service and workload peers are not enforced here (cidr and fqdn are)";
  const parsed = TrafficPolicySpec.safeParse({ priority: s.priority, selector: s.selector, egress: { rules: rules.filter((r) => r.to?.length).map((r) => ({ action: r.action, to: r.to, ...(r.ports ? { ports: r.ports } : {}) })) } });
  if (!parsed.success) return parsed.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ");
  return (global && globalSelectorRefusal(parsed.data.selector)) || parsed.data;
}

/** The status after the edge's answer: the sandboxes it selects, Accepted True. */
export function trafficStatusOf(generation: number, reply: ReplyItem, prev: TrafficPolicyStatus | undefined, now: string): TrafficPolicyStatus {
  const conditions = setCondition(prev?.conditions, { type: "Accepted", status: "True", reason: "Enforced", message: "sent to the traffic-proxies of the clusters that serve it", observedGeneration: generation }, now);
  return { observedGeneration: generation, selectedSandboxes: reply.selectedSandboxes ?? [], conditions };
}

/** Accepted False: Unsupported when it cannot be enforced here (nothing selected), Rejected when
 * the edge refused it (the last answer's selection kept). */
export function trafficRefusedOf(prev: TrafficPolicyStatus | undefined, generation: number, reply: Pick<ReplyItem, "code" | "message"> & { here?: boolean }, now: string): TrafficPolicyStatus {
  const message = reply.message ?? reply.code ?? "";
  const condition = { type: "Accepted", status: "False" as const, reason: reply.here ? "Unsupported" : "Rejected", message, observedGeneration: generation };
  const conditions = setCondition(prev?.conditions, condition, now);
  return reply.here ? { observedGeneration: generation, selectedSandboxes: [], conditions } : { ...prev, observedGeneration: generation, conditions };
}

/** How a TrafficPolicy or GlobalTrafficPolicy differs from the other objects the edge runs
 * (edge-object-sync.ts): no inventory and no Events; a policy that cannot be enforced any more is
 * withdrawn, never left running in an older version. */
function trafficKind(kind: "TrafficPolicy" | "GlobalTrafficPolicy"): EdgeObjectKind<TrafficPolicyObject, TrafficPolicyStatus> {
  return {
    kind,
    plural: kind === "TrafficPolicy" ? "trafficpolicies" : "globaltrafficpolicies",
    call: "trafficpolicyobjects",
    inventory: false,
    withdrawRefused: true,
    upsert: (o) => {
      const spec = trafficSpecOf(o, kind === "GlobalTrafficPolicy");
      return typeof spec === "string" ? { problem: spec } : { spec };
    },
    status: (prev, generation, reply, now) => trafficStatusOf(generation, reply, prev, now),
    refused: trafficRefusedOf,
  };
}

export const TRAFFIC_POLICY = trafficKind("TrafficPolicy");
export const GLOBAL_TRAFFIC_POLICY = trafficKind("GlobalTrafficPolicy");

/** A namespace's TrafficPolicies, or (`namespace: null`) the cluster's GlobalTrafficPolicies. */
export class TrafficPolicySync extends EdgeObjectSync<TrafficPolicyObject, TrafficPolicyStatus> {
  constructor(opts: EdgeObjectSyncOptions) {
    super(opts.namespace === null ? GLOBAL_TRAFFIC_POLICY : TRAFFIC_POLICY, opts);
  }
}
