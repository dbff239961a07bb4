// CRD sync for PoolAutoscalers (OpenKruise Agents §1.9): each PoolAutoscaler of the namespace sets
// the autoscaler of its SandboxSet's pool on the edge (team = namespace, template = the target's
// name), sent as an `autoscalers` item over the agent's session; the edge runs it (PoolDO) and is
// the authority. While the object exists its status is asked for every `statusMs` and written
// onto the object's status subresource (the last decision and why, the conditions, the replicas),
// and each scale the edge reports (`SuccessfulRescale`, `ScaleBlocked`, `CronPolicyActive`) becomes
// a Kubernetes Event on the object (the push, status and Events: edge-object-sync.ts; Event
// names are derived from the scale's time).
//
// Upstream fields with no equivalent here: `scaleTargetRef.kind` (SandboxSet is the only target)
// and `scaleTargetRef.apiVersion` (ignored); upstream's controller flags
// `--sampling-interval-seconds` / `--observation-window-seconds` are the edge spec's `sampling`,
// left at their defaults (5 s, 30 s). The autoscaler sizes the edge's pool (and so the member
// pods); it does not write the SandboxSet's `spec.replicas` as upstream does, which would make the
// SandboxSet's next generation fight it. Condition reasons `ConflictingAutoscaler` is not produced
// (the edge keeps one autoscaler per pool: the last object applied wins); `FailedGetTarget` and
// `FailedScale` are, from the edge's refusal.
import type { KubernetesObject } from "@kubernetes/client-node";
import type { z } from "zod";
import { EdgeObjectSync, type EdgeObjectKind, type EdgeObjectSyncOptions } from "./edge-object-sync.ts";
import type { AutoscalerSpec } from "../../../schema/api/autoscaler.ts";
import { setCondition, type Condition } from "../../../schema/crd/conditions.ts";
import type { AutoscalerStatusReply, ReplyItem } from "../../../schema/protocol/index.ts";

const PLURAL = "poolautoscalers";
const KIND = "PoolAutoscaler";

export interface PoolAutoscalerObject extends KubernetesObject {
  spec: {
    scaleTargetRef: { kind?: string; name: string; apiVersion?: string };
    minReplicas?: number;
    maxReplicas: number;
    cronPolicies?: { name: string; schedule: string; timeZone?: string; targetReplicas: number }[];
    capacityPolicy?: { targetAvailable: number | string; tolerance?: number | string; scaleUp?: { stabilizationWindowSeconds?: number }; scaleDown?: { stabilizationWindowSeconds?: number } };
    suspend?: boolean;
  };
  status?: PoolAutoscalerStatus;
}

export interface PoolAutoscalerStatus {
  observedGeneration?: number;
  lastScaleTime?: string;
  currentReplicas?: number;
  desiredReplicas?: number;
  suspended?: boolean;
  appliedCronPolicies?: { name: string; lastScheduleTime: string }[];
  currentCapacity?: { available: number };
  lastDecision?: { time: string; reason: string; message: string; currentReplicas: number; desiredReplicas: number };
  conditions?: Condition[];
}

/** The edge's autoscaler spec for a PoolAutoscaler (pure; the edge validates it again). */
export function autoscalerSpecOf(pa: PoolAutoscalerObject): z.input<typeof AutoscalerSpec> {
  const s = pa.spec;
  const window = (w: { stabilizationWindowSeconds?: number } | undefined) => (w?.stabilizationWindowSeconds === undefined ? undefined : { stabilizationWindowSeconds: w.stabilizationWindowSeconds });
  const c = s.capacityPolicy;
  return {
    minReplicas: s.minReplicas ?? 0,
    maxReplicas: s.maxReplicas,
    cronPolicies: (s.cronPolicies ?? []).map((p) => ({ name: p.name, schedule: p.schedule, targetReplicas: p.targetReplicas, ...(p.timeZone ? { timeZone: p.timeZone } : {}) })),
    ...(c && {
      capacityPolicy: {
        targetAvailable: c.targetAvailable,
        ...(c.tolerance !== undefined && { tolerance: c.tolerance }),
        ...(window(c.scaleUp) && { scaleUp: window(c.scaleUp) }),
        ...(window(c.scaleDown) && { scaleDown: window(c.scaleDown) }),
      },
    }),
    suspend: s.suspend ?? false,
  };
}

/** The object's status from the edge's (pure): conditions keep their transition times. */
export function statusOf(prev: PoolAutoscalerStatus | undefined, generation: number, edge: AutoscalerStatusReply, now: string): PoolAutoscalerStatus {
  let conditions = prev?.conditions;
  for (const c of edge.conditions) conditions = setCondition(conditions, { ...c, observedGeneration: generation }, now);
  return {
    observedGeneration: generation,
    // A null would be dropped by the merge patch, and then differ on every comparison.
    ...(edge.lastScaleTime && { lastScaleTime: edge.lastScaleTime }),
    currentReplicas: edge.currentReplicas,
    desiredReplicas: edge.desiredReplicas,
    suspended: edge.suspended,
    appliedCronPolicies: edge.appliedCronPolicies,
    currentCapacity: edge.currentCapacity,
    ...(edge.lastDecision && { lastDecision: edge.lastDecision }),
    conditions,
  };
}

/** The status after the edge refused the object (e.g. its SandboxSet is not on the edge yet). */
export function refusedStatusOf(prev: PoolAutoscalerStatus | undefined, generation: number, reply: Pick<ReplyItem, "code" | "message">, now: string): PoolAutoscalerStatus {
  const reason = reply.code === "template_not_found" ? "FailedGetTarget" : "FailedScale";
  const conditions = setCondition(prev?.conditions, { type: "AbleToScale", status: "False", reason, message: reply.message ?? reply.code ?? "", observedGeneration: generation }, now);
  return { ...prev, observedGeneration: generation, conditions };
}

/** A stable Event name per reported scale (so a restarted agent does not post it again). */
export function eventName(paName: string, e: { time: string; reason: string }): string {
  return `${paName.slice(0, 200)}.${Date.parse(e.time).toString(16)}.${e.reason.toLowerCase()}`;
}

/** How a PoolAutoscaler differs from the other objects the edge runs (edge-object-sync.ts). */
export const POOL_AUTOSCALER: EdgeObjectKind<PoolAutoscalerObject, PoolAutoscalerStatus> = {
  kind: KIND,
  plural: PLURAL,
  call: "autoscalers",
  upsert: (pa) => ({ target: pa.spec.scaleTargetRef.name, spec: autoscalerSpecOf(pa) }),
  status: (prev, generation, reply, now) => reply.autoscaler && statusOf(prev, generation, reply.autoscaler, now),
  refused: refusedStatusOf,
  events: (name, reply) =>
    (reply.autoscaler?.events ?? []).map((e) => ({ name: eventName(name, e), time: new Date(e.time), type: e.type === "Warning" ? "Warning" : "Normal", reason: e.reason, message: e.message })),
};

export class PoolAutoscalerSync extends EdgeObjectSync<PoolAutoscalerObject, PoolAutoscalerStatus> {
  constructor(opts: EdgeObjectSyncOptions) {
    super(POOL_AUTOSCALER, opts);
  }

  get autoscalers() {
    return this.objects;
  }
}
