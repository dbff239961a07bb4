// What the driver keeps in memory of each object: only the fields it reads. A full Pod with its
// managedFields is several KiB; these projections are a few hundred bytes, and identical pod
// templates of a pool's Sandboxes are shared (interned) rather than stored once per sandbox.
import type { KubernetesObject, V1ObjectMeta, V1Pod } from "@kubernetes/client-node";
import { ANNOTATION, RUNTIME_CONTAINER } from "../../../schema/crd/labels.ts";
import { RESTORE_ANNOTATION } from "./checkpoint/snapshots.ts";
import { TRAFFIC_CONTAINER } from "./traffic-pod.ts";

const iso = (v: unknown): string | undefined => (v instanceof Date ? v.toISOString() : (v as string | undefined) ?? undefined);

/** Annotations the driver reads on pods. */
const POD_ANNOTATIONS = [ANNOTATION.runtimeUrl, RESTORE_ANNOTATION];

const words = new Map<string, string>();

/** Label keys and values repeat across thousands of objects (pool name, "false", hashes): one copy each. */
function word(v: string): string {
  const hit = words.get(v);
  if (hit !== undefined) return hit;
  if (words.size > 10_000) words.clear();
  words.set(v, v);
  return v;
}

function strings(map: Record<string, string> | undefined): Record<string, string> | undefined {
  if (!map) return map;
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(map)) out[word(k)] = v.length <= 64 ? word(v) : v;
  return out;
}

function meta(m: V1ObjectMeta | undefined, keepAnnotations?: readonly string[]): V1ObjectMeta {
  const out: V1ObjectMeta = {
    name: m?.name,
    uid: m?.uid,
    resourceVersion: m?.resourceVersion,
    generation: m?.generation,
    labels: strings(m?.labels),
    creationTimestamp: iso(m?.creationTimestamp) as never,
  };
  if (m?.deletionTimestamp) out.deletionTimestamp = iso(m.deletionTimestamp) as never;
  const annotations = keepAnnotations ? Object.fromEntries(Object.entries(m?.annotations ?? {}).filter(([k]) => keepAnnotations.includes(k))) : m?.annotations;
  if (annotations && Object.keys(annotations).length) out.annotations = strings(annotations);
  if (!keepAnnotations) {
    if (m?.finalizers?.length) out.finalizers = m.finalizers;
    if (m?.ownerReferences?.length) out.ownerReferences = m.ownerReferences;
  }
  return out;
}

export function slimPod(raw: V1Pod): V1Pod {
  const s = raw.status;
  // Waiting containers (their reason is the Ready reason), and the runtime container always: its
  // readiness and restarts are the RuntimeHealthy condition (pod-state.ts `runtimeHealth`). The
  // traffic-proxy's readiness: whether the pod's SecurityProfiles are in force (profileEnforcement).
  const kept = (list: NonNullable<V1Pod["status"]>["containerStatuses"]) =>
    list
      ?.filter((c) => c.state?.waiting || c.name === RUNTIME_CONTAINER || c.name === TRAFFIC_CONTAINER)
      .map((c) => {
        const out: Record<string, unknown> = { name: c.name, state: c.state?.waiting ? { waiting: { reason: c.state.waiting.reason, message: c.state.waiting.message } } : {} };
        if (c.name === TRAFFIC_CONTAINER) return { ...out, ready: c.ready } as never;
        if (c.name !== RUNTIME_CONTAINER) return out as never;
        const last = c.lastState?.terminated;
        return { ...out, ready: c.ready, restartCount: c.restartCount, ...(last ? { lastState: { terminated: { exitCode: last.exitCode, reason: last.reason, finishedAt: iso(last.finishedAt) } } } : {}) } as never;
      });
  return {
    metadata: meta(raw.metadata, POD_ANNOTATIONS),
    spec: { nodeName: raw.spec?.nodeName } as never,
    status: s
      ? {
          phase: s.phase,
          podIP: s.podIP,
          message: s.message,
          conditions: s.conditions?.filter((c) => c.type === "Ready" || c.type === "PodScheduled").map((c) => ({ type: c.type, status: c.status, reason: c.reason, message: c.message }) as never),
          containerStatuses: kept(s.containerStatuses),
          initContainerStatuses: kept(s.initContainerStatuses),
        }
      : undefined,
  };
}

/** PVCs: identity only (the driver creates and deletes them, never reads their spec). */
export function slimPvc(raw: KubernetesObject): KubernetesObject {
  return { metadata: meta(raw.metadata, []) };
}

const interned = new Map<string, unknown>();

/** One shared copy per distinct value (pod templates repeat across a pool's members). */
function intern<T>(v: T): T {
  if (v === undefined) return v;
  const key = JSON.stringify(v);
  const hit = interned.get(key);
  if (hit !== undefined) return hit as T;
  if (interned.size > 1000) interned.clear();
  interned.set(key, v);
  return v;
}

/** Custom objects (Sandbox, SandboxSet): everything but managedFields, templates interned. */
export function slimCustom<T extends KubernetesObject & { spec?: Record<string, unknown> }>(raw: T): T {
  const spec = raw.spec ? { ...raw.spec, template: intern(raw.spec.template), volumeClaimTemplates: intern(raw.spec.volumeClaimTemplates) } : raw.spec;
  return { ...raw, metadata: meta(raw.metadata), spec };
}
