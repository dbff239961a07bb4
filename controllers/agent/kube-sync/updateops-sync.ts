// CRD sync for SandboxUpdateOps (OpenKruise Agents §1.6): each object of the namespace is a run of
// team = namespace on the edge (UpdateOpsDO, the same machine the admin API drives), sent as an
// `updateops` item over the agent's session (the push, status and Events: edge-object-sync.ts).
// `kubectl patch … spec.paused` pauses and unpauses it; a new value of the annotation
// `agents.kruise.io/retry-failed` retries its failed sandboxes (the admin API's `resume`);
// `spec.lifecycle` (preUpgrade/postUpgrade exec hooks) is the run's hooks. The
// status shows the phase, the counts, the Progressing condition and one line per sandbox; each
// event of the run (UpgradeStarted, UpgradeSucceeded, UpgradeFailed, …) is a Kubernetes Event on
// the object, and one about a sandbox is also an Event on that sandbox's Sandbox object (`kubectl
// describe sandbox` lists its upgrade steps).
//
// Upstream fields with no equivalent here: `patch` (the target is always the template's current
// revision) is refused with an InvalidSpec condition, and the object is not pushed.
import type { KubernetesObject } from "@kubernetes/client-node";
import { EdgeObjectSync, type EdgeEvent, type EdgeObjectKind, type EdgeObjectSyncOptions } from "./edge-object-sync.ts";
import { UpdateOpsSpec } from "../../../schema/api/update-ops.ts";
import { setCondition, type Condition } from "../../../schema/crd/conditions.ts";
import type { ReplyItem, UpdateOpsStatusReply } from "../../../schema/protocol/index.ts";

/** Its value changed: the run's failed sandboxes are tried again. */
export const RETRY_ANNOTATION = "agents.kruise.io/retry-failed";

export interface UpdateOpsObject extends KubernetesObject {
  spec: {
    selector: { matchLabels?: Record<string, string>; matchExpressions?: { key: string; operator: string; values?: string[] }[] };
    updateStrategy?: { type?: string; maxUnavailable?: number | string };
    patch?: unknown;
    lifecycle?: unknown;
    paused?: boolean;
    stateFilter?: { states?: string[] };
  };
  status?: UpdateOpsStatus;
}

export interface UpdateOpsStatus {
  observedGeneration?: number;
  phase?: string;
  replicas?: number;
  updatedReplicas?: number;
  failedReplicas?: number;
  updatingReplicas?: number;
  conditions?: Condition[];
  sandboxes?: { sandboxID: string; status: string; fromRevision: string; toRevision: string; paused: boolean; attempt: number; message?: string }[];
}

/** The edge's spec for the object, or why it cannot be run here (pure). */
export function opsSpecOf(o: UpdateOpsObject): { spec: UpdateOpsSpec } | { problem: string } {
  const s = o.spec;
  if (s.patch !== undefined && s.patch !== null) return { problem: "spec.patch is not supported: a run upgrades to the template's current revision" };
  const parsed = UpdateOpsSpec.safeParse({
    selector: s.selector ?? {},
    ...(s.updateStrategy && { updateStrategy: s.updateStrategy }),
    paused: s.paused ?? false,
    ...(s.stateFilter && { stateFilter: s.stateFilter }),
    // preUpgrade/postUpgrade: the CRD's exec hooks are the edge's (failurePolicy Fail).
    ...(s.lifecycle !== undefined && s.lifecycle !== null && { lifecycle: s.lifecycle }),
  });
  return parsed.success ? { spec: parsed.data } : { problem: parsed.error.issues.map((i) => `spec.${i.path.join(".")}: ${i.message}`).join("; ") };
}

/** The object's status from the edge's view of the run (pure). */
export function opsStatusOf(prev: UpdateOpsStatus | undefined, generation: number, edge: UpdateOpsStatusReply): UpdateOpsStatus {
  let conditions = prev?.conditions;
  for (const c of edge.conditions) {
    const at = new Date(c.lastTransitionTime).toISOString();
    conditions = setCondition(conditions, { type: c.type, status: c.status, reason: c.reason, message: c.message ?? "", observedGeneration: generation }, at);
  }
  return {
    observedGeneration: generation,
    phase: edge.phase,
    replicas: edge.replicas,
    updatedReplicas: edge.updatedReplicas,
    failedReplicas: edge.failedReplicas,
    updatingReplicas: edge.updatingReplicas,
    conditions,
    sandboxes: edge.sandboxes.map((l) => ({
      sandboxID: l.id,
      status: l.status,
      fromRevision: l.from,
      toRevision: l.to,
      paused: l.paused,
      attempt: l.attempt,
      ...(l.message && { message: l.message }),
    })),
  };
}

/** The status after the edge (or the agent) refused the object. */
export function opsRefusedStatusOf(prev: UpdateOpsStatus | undefined, generation: number, reply: Pick<ReplyItem, "code" | "message">, now: string): UpdateOpsStatus {
  const reason = reply.code === "bad_request" ? "InvalidSpec" : "Refused";
  const conditions = setCondition(prev?.conditions, { type: "Progressing", status: "False", reason, message: reply.message ?? reply.code ?? "", observedGeneration: generation }, now);
  return { ...prev, observedGeneration: generation, conditions };
}

/** Where a sandbox's Sandbox object is (the driver's cache), to put its Events on it. */
export type SandboxRef = (sandboxId: string) => { apiVersion: string; kind: string; name: string; uid?: string } | undefined;

/** Kubernetes Events of the run's events; each name stable per event (time, reason, sandbox). An
 * event about a sandbox whose Sandbox `sandboxRef` finds is also an Event on that Sandbox. */
export function opsEvents(name: string, edge: UpdateOpsStatusReply | undefined, sandboxRef?: SandboxRef): EdgeEvent[] {
  return (edge?.events ?? []).flatMap((e) => {
    const event: EdgeEvent = {
      name: `${name.slice(0, 120)}.${e.at.toString(16)}.${e.reason.toLowerCase()}${e.sandboxId ? `.${e.sandboxId.toLowerCase().replace(/[^a-z0-9-]/g, "").slice(0, 60)}` : ""}`,
      time: new Date(e.at),
      type: e.type,
      reason: e.reason,
      message: e.sandboxId ? `${e.sandboxId}: ${e.message}` : e.message,
    };
    const sbx = e.sandboxId ? sandboxRef?.(e.sandboxId) : undefined;
    return sbx ? [event, { ...event, name: `${event.name}.sbx`, message: `SandboxUpdateOps ${name}: ${e.message}`, about: sbx }] : [event];
  });
}

export const SANDBOX_UPDATE_OPS: EdgeObjectKind<UpdateOpsObject, UpdateOpsStatus> = {
  kind: "SandboxUpdateOps",
  plural: "sandboxupdateops",
  call: "updateops",
  upsert(o) {
    const r = opsSpecOf(o);
    if ("problem" in r) return { problem: r.problem };
    const retry = o.metadata?.annotations?.[RETRY_ANNOTATION];
    return { spec: r.spec, ...(retry && { retry: retry.slice(0, 256) }) };
  },
  pushKey: (o) => o.metadata?.annotations?.[RETRY_ANNOTATION] ?? "",
  status: (prev, generation, reply) => reply.updateOps && opsStatusOf(prev, generation, reply.updateOps),
  refused: opsRefusedStatusOf,
  events: (name, reply) => opsEvents(name, reply.updateOps),
};

export class UpdateOpsSync extends EdgeObjectSync<UpdateOpsObject, UpdateOpsStatus> {
  constructor(opts: EdgeObjectSyncOptions & { sandboxRef?: SandboxRef }) {
    super({ ...SANDBOX_UPDATE_OPS, events: (name, reply) => opsEvents(name, reply.updateOps, opts.sandboxRef) }, opts);
  }
}
