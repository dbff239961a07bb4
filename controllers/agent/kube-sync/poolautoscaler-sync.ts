// CRD sync for PoolAutoscalers (OpenKruise Agents §1.9): each PoolAutoscaler of the namespace sets
// the autoscaler of its SandboxSet's pool on the edge (team = namespace, template = the target's
// name), sent as an `autoscalers` item over the agent's session; the edge runs it (PoolDO) and is
// the authority. While the object exists its status is asked for every `statusMs` and written
// onto the object's status subresource (the last decision and why, the conditions, the replicas),
// and each scale the edge reports (`SuccessfulRescale`, `ScaleBlocked`, `CronPolicyActive`) becomes
// a Kubernetes Event on the object. Level-based: a restarted agent pushes every object again (the
// edge keeps the newest generation per uid) and then the namespace's inventory (the edge drops
// those deleted while it was down); Event names are derived from the scale's time, so
// one posted before a restart is not posted twice.
//
// Upstream fields with no equivalent here: `scaleTargetRef.kind` (SandboxSet is the only target)
// and `scaleTargetRef.apiVersion` (ignored); upstream's controller flags
// `--sampling-interval-seconds` / `--observation-window-seconds` are the edge spec's `sampling`,
// left at their defaults (5 s, 30 s). The autoscaler sizes the edge's pool (and so the member
// pods); it does not write the SandboxSet's `spec.replicas` as upstream does, which would make the
// SandboxSet's next generation fight it. Condition reasons `ConflictingAutoscaler` is not produced
// (the edge keeps one autoscaler per pool: the last object applied wins); `FailedGetTarget` and
// `FailedScale` are, from the edge's refusal.
import { CoreV1Api, CustomObjectsApi, type KubeConfig, type KubernetesObject } from "@kubernetes/client-node";
import type { z } from "zod";
import type { Link } from "../link.ts";
import type { AutoscalerSpec } from "../../../schema/api/autoscaler.ts";
import { setCondition, type Condition } from "../../../schema/crd/conditions.ts";
import { GROUP, VERSION } from "../../../schema/crd/labels.ts";
import type { AutoscalerStatusReply, ReplyItem } from "../../../schema/protocol/index.ts";
import { WorkQueue } from "../../lib/work-queue.ts";
import { ObjectCache } from "../../drivers/kubernetes/object-cache.ts";
import { slimCustom } from "../../drivers/kubernetes/slim.ts";
import { mergePatch, postEvent, stableJson } from "../../drivers/kubernetes/kube-api.ts";

const PLURAL = "poolautoscalers";
/** Queue key of the inventory push (no object name has underscores). */
const INVENTORY = "__inventory__";
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

export interface PoolAutoscalerSyncOptions {
  kubeConfig: KubeConfig;
  namespace: string;
  link: Pick<Link, "call">;
  log?: (msg: string) => void;
  retryMs?: number;
  /** How often an applied object's status is read from the edge (default 5 s). */
  statusMs?: number;
}

export class PoolAutoscalerSync {
  readonly autoscalers: ObjectCache<PoolAutoscalerObject>;
  readonly #o: PoolAutoscalerSyncOptions;
  readonly #custom: CustomObjectsApi;
  readonly #core: CoreV1Api;
  readonly #queue: WorkQueue;
  /** name → `uid/generation` the edge accepted. */
  readonly #synced = new Map<string, string>();
  /** name → uid of the object last seen (a delete event's object may be all that is left). */
  readonly #uids = new Map<string, string>();
  /** Event names posted (bounded per object by the edge's event list). */
  readonly #posted = new Map<string, Set<string>>();

  constructor(opts: PoolAutoscalerSyncOptions) {
    this.#o = opts;
    this.#custom = opts.kubeConfig.makeApiClient(CustomObjectsApi);
    this.#core = opts.kubeConfig.makeApiClient(CoreV1Api);
    this.#queue = new WorkQueue({
      name: "poolautoscaler",
      work: async (name) => {
        if (name === INVENTORY) return void (await this.#prune());
        const present = await this.reconcile(name);
        return present ? { requeueAfterMs: opts.statusMs ?? 5000 } : undefined;
      },
      backoff: { baseMs: opts.retryMs ?? 1000, maxMs: 30_000 },
      onError: (name, err) => opts.log?.(`poolautoscaler ${name}: ${(err as Error).message}`),
    });
    const ns = opts.namespace;
    this.autoscalers = new ObjectCache<PoolAutoscalerObject>(opts.kubeConfig, {
      path: `/apis/${GROUP}/${VERSION}/namespaces/${ns}/${PLURAL}`,
      list: () => this.#custom.listNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: ns, plural: PLURAL }),
      slim: slimCustom,
      onError: (err) => opts.log?.(`poolautoscalers watch: ${(err as Error).message}`),
    });
    // A new object, a changed spec or a delete is pushed at once; our own status writes are not.
    this.autoscalers.onChange((pa, verb) => {
      const name = pa.metadata!.name!;
      if (pa.metadata?.uid) this.#uids.set(name, pa.metadata.uid);
      if (verb === "delete" || this.#synced.get(name) !== `${pa.metadata?.uid}/${pa.metadata?.generation}`) this.#queue.add(name);
    });
  }

  async start(): Promise<void> {
    await this.autoscalers.start();
    for (const pa of this.autoscalers.list()) this.#queue.add(pa.metadata!.name!);
    this.#queue.add(INVENTORY);
  }

  /** Tells the edge every object the namespace holds, so it drops those deleted while we were down. */
  async #prune(): Promise<void> {
    const reply = await this.#call({ namespace: this.#o.namespace, present: this.autoscalers.list().map((pa) => pa.metadata!.name!) });
    if (reply.result === "rejected") throw new Error(`edge refused the PoolAutoscaler inventory: ${reply.code}: ${reply.message}`);
  }

  async stop(): Promise<void> {
    this.#queue.close();
    await this.autoscalers.stop();
  }

  /** Pushes the object (or its deletion), then writes the edge's status; true while it exists. */
  async reconcile(name: string): Promise<boolean> {
    const pa = this.autoscalers.get(name);
    const ref = { namespace: this.#o.namespace, name, uid: pa?.metadata?.uid ?? this.#uids.get(name) ?? "" };
    if (!pa || pa.metadata?.deletionTimestamp) {
      if (ref.uid) await this.#call({ ...ref, deleted: true });
      this.#synced.delete(name);
      this.#uids.delete(name);
      this.#posted.delete(name);
      return false;
    }
    const generation = pa.metadata?.generation ?? 0;
    const now = new Date().toISOString();
    const key = `${ref.uid}/${generation}`;
    const pushed = this.#synced.get(name) !== key;
    const reply = pushed
      ? await this.#call({ ...ref, generation, target: pa.spec.scaleTargetRef.name, spec: autoscalerSpecOf(pa) as never })
      : await this.#call({ ...ref, status: true });
    if (reply.result === "rejected") {
      if (!pushed) this.#synced.delete(name); // the edge lost it: push it again
      await this.#write(pa, refusedStatusOf(pa.status, generation, reply, now));
      throw new Error(`edge refused PoolAutoscaler ${ref.namespace}/${name}: ${reply.code}: ${reply.message}`);
    }
    if (pushed) this.#synced.set(name, key);
    if (reply.autoscaler) {
      await this.#write(pa, statusOf(pa.status, generation, reply.autoscaler, now));
      await this.#postEvents(pa, reply.autoscaler.events);
    }
    return true;
  }

  async #call(item: Parameters<Link["call"]>[0]["item"]): Promise<ReplyItem> {
    return this.#o.link.call({ type: "autoscalers", item } as Parameters<Link["call"]>[0]);
  }

  /** Patches the status subresource when it changed. */
  async #write(pa: PoolAutoscalerObject, status: PoolAutoscalerStatus): Promise<void> {
    if (stableJson(pa.status ?? {}) === stableJson(status)) return;
    const updated = await this.#custom.patchNamespacedCustomObjectStatus(
      { group: GROUP, version: VERSION, namespace: this.#o.namespace, plural: PLURAL, name: pa.metadata!.name!, body: { status } },
      mergePatch,
    );
    this.autoscalers.remember(updated);
  }

  async #postEvents(pa: PoolAutoscalerObject, events: AutoscalerStatusReply["events"]): Promise<void> {
    const name = pa.metadata!.name!;
    const posted = this.#posted.get(name) ?? new Set<string>();
    this.#posted.set(name, posted);
    const about = { apiVersion: `${GROUP}/${VERSION}`, kind: KIND, name, namespace: this.#o.namespace, uid: pa.metadata!.uid };
    const current = new Set<string>();
    for (const e of events) {
      const id = eventName(name, e);
      current.add(id);
      if (posted.has(id)) continue;
      await postEvent(this.#core, about, e.type === "Warning" ? "Warning" : "Normal", e.reason, e.message, new Date(e.time), this.#o.log ?? (() => {}), id);
      posted.add(id);
    }
    // Only the edge's current list is remembered (it keeps the latest 20).
    for (const id of posted) if (!current.has(id)) posted.delete(id);
  }
}
