// A claim's dynamic CSI mounts (issue 18.3; upstream: the manager after claim, the controller after
// resume, concurrency 3). The Sandbox carries them as its `csi-volume-config` annotation; once its
// pod is Ready, each mount goes to the pod's agent-runtime (`POST /v1/storage/mounts`, upstream's
// shape: the CSI driver's name and a NodePublishVolumeRequest), which hands it to the pod's CSI
// node plugin. A pod mounted is recorded by uid, so the new pod of a Stop resume mounts again.
//
// Tenants name PVs, so a PV is used only when it is bound (`spec.claimRef`) into the sandbox's own
// namespace: a platform team gives a team a volume by pre-binding it there, and no team can mount
// another's. The claim's `attributes` override the PV's `volumeAttributes` for this mount only;
// the PV object is never written. The agent never reads Secrets: a PV's nodePublishSecretRef is
// passed on as a reference for the node plugin, as the kubelet would.
import type { V1PersistentVolume } from "@kubernetes/client-node";
import { SandboxConditionType, setCondition, type Condition } from "../../../schema/crd/conditions.ts";
import { parseCsiAnnotation, type CsiMountConfig } from "../../../schema/crd/csi-mount.ts";
import { ANNOTATION } from "../../../schema/crd/labels.ts";
import { isReservedKey } from "../../../schema/crd/user-metadata.ts";
import { clipText } from "../../../schema/api/limits.ts";
import { backoffMs } from "../../lib/work-queue.ts";
import type { DriverContext } from "./context.ts";
import { apiMessage, statusCode } from "./kube-api.ts";
import { runtimeUrl } from "./pod-spec.ts";

/** CSI access modes for the PV's Kubernetes ones (the most permissive the PV allows). */
const ACCESS: Record<string, string> = {
  ReadWriteMany: "MULTI_NODE_MULTI_WRITER",
  ReadOnlyMany: "MULTI_NODE_READER_ONLY",
  ReadWriteOnce: "SINGLE_NODE_WRITER",
  ReadWriteOncePod: "SINGLE_NODE_SINGLE_WRITER",
};

export interface MountRequest {
  driver: string;
  mountID?: string;
  /** A CSI NodePublishVolumeRequest (protobuf JSON names). */
  publishRequest: {
    volumeId: string;
    targetPath: string;
    readonly: boolean;
    volumeCapability: { mount: { fsType: string; mountFlags: string[] }; accessMode: { mode: string } };
    volumeContext: Record<string, string>;
  };
  subPath?: string;
  nodePublishSecretRef?: { name: string; namespace: string };
}

/** The request for one mount from its PV, or why the PV cannot be used for this sandbox. */
export function mountRequest(pv: V1PersistentVolume | undefined, m: CsiMountConfig, namespace: string): { ok: true; request: MountRequest } | { ok: false; message: string } {
  if (!pv) return { ok: false, message: `PersistentVolume ${m.pvName} not found` };
  const csi = pv.spec?.csi;
  if (!csi) return { ok: false, message: `PersistentVolume ${m.pvName} is not a CSI volume` };
  const bound = pv.spec?.claimRef?.namespace;
  if (bound !== namespace) return { ok: false, message: `PersistentVolume ${m.pvName} is not bound to a claim in namespace ${namespace}` };
  const modes = pv.spec?.accessModes ?? [];
  const mode = ["ReadWriteMany", "ReadWriteOncePod", "ReadWriteOnce", "ReadOnlyMany"].find((x) => modes.includes(x));
  // A claim may make a mount read-only, never a read-only PV (or a ReadOnlyMany one) writable.
  const readonly = m.readOnly === true || csi.readOnly === true || mode === "ReadOnlyMany";
  // The platform's keys are the runtime's to set (parsing refuses them; an older annotation may hold them).
  const attributes = Object.fromEntries(Object.entries(m.attributes ?? {}).filter(([k]) => !isReservedKey(k)));
  return {
    ok: true,
    request: {
      driver: csi.driver,
      ...(m.mountID ? { mountID: m.mountID } : {}),
      publishRequest: {
        volumeId: csi.volumeHandle,
        targetPath: m.mountPath,
        readonly,
        volumeCapability: { mount: { fsType: csi.fsType ?? "", mountFlags: pv.spec?.mountOptions ?? [] }, accessMode: { mode: readonly && mode !== "ReadOnlyMany" ? "MULTI_NODE_READER_ONLY" : ACCESS[mode ?? "ReadWriteOnce"]! } },
        volumeContext: { ...(csi.volumeAttributes ?? {}), ...attributes },
      },
      ...(m.subPath ? { subPath: m.subPath } : {}),
      ...(csi.nodePublishSecretRef?.name ? { nodePublishSecretRef: { name: csi.nodePublishSecretRef.name, namespace: csi.nodePublishSecretRef.namespace ?? namespace } } : {}),
    },
  };
}

/** Runs `work` over `items`, at most `limit` at a time; answers every result in order. */
async function pooled<T, R>(items: T[], limit: number, work: (item: T) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array(items.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(limit, items.length) }, async () => {
      while (next < items.length) {
        const i = next++;
        out[i] = await work(items[i]!);
      }
    }),
  );
  return out;
}

export interface CsiMounterHooks {
  /** Calls the sandbox's runtime with the token it holds (PodWriter.withToken). */
  withToken(id: string, call: (token: string | undefined) => Promise<Response>): Promise<Response>;
  /** Records the pod whose mounts are made (an annotation write in the sandbox's chain). */
  markMounted(id: string, podUid: string): Promise<void>;
  /** The condition changed: write the status (and an Event on failure). */
  changed(id: string, failure?: string): void;
}

export class CsiMounter {
  readonly #ctx: DriverContext;
  readonly #hooks: CsiMounterHooks;
  /** The `VolumesMounted` condition per sandbox (added to its status by the status writer). */
  readonly #conditions = new Map<string, Omit<Condition, "lastTransitionTime">>();
  readonly #inFlight = new Set<string>();
  readonly #attempts = new Map<string, number>();
  readonly #retries = new Map<string, NodeJS.Timeout>();

  constructor(ctx: DriverContext, hooks: CsiMounterHooks) {
    this.#ctx = ctx;
    this.#hooks = hooks;
  }

  condition(id: string): Omit<Condition, "lastTransitionTime"> | undefined {
    return this.#conditions.get(id);
  }

  /** Adds the condition to a status's conditions (or leaves them as they are). */
  withCondition(id: string, conditions: Condition[], now: string): Condition[] {
    const c = this.#conditions.get(id);
    return c ? setCondition(conditions, c, now) : conditions;
  }

  forget(id: string): void {
    this.#conditions.delete(id);
    this.#attempts.delete(id);
    clearTimeout(this.#retries.get(id));
    this.#retries.delete(id);
  }

  stop(): void {
    for (const t of this.#retries.values()) clearTimeout(t);
  }

  /** Starts the mounts of a sandbox whose Ready pod has not had them yet (not awaited by callers:
   * a slow node plugin must not hold the sandbox's status writes). */
  check(id: string, ready: boolean): void {
    const sbx = this.#ctx.sandbox(id);
    const pod = this.#ctx.pod(id);
    const mounts = parseCsiAnnotation(sbx?.metadata?.annotations?.[ANNOTATION.csiVolumeConfig]);
    const uid = pod?.metadata?.uid;
    if (!sbx || !pod || !uid || !ready || !mounts.length || this.#inFlight.has(id) || this.#retries.has(id)) return;
    if (sbx.metadata?.annotations?.[ANNOTATION.csiMountedPod] === uid) return;
    this.#inFlight.add(id);
    void this.#mount(id, uid, mounts, this.#ctx.scopeOf(id).namespace, runtimeUrl(pod))
      .catch((err: unknown) => this.#failed(id, (err as Error).message))
      .finally(() => this.#inFlight.delete(id));
  }

  async #mount(id: string, podUid: string, mounts: CsiMountConfig[], namespace: string, url: string | undefined): Promise<void> {
    if (!url) throw new Error("the pod's runtime has no address yet");
    const results = await pooled(mounts, 3, async (m) => {
      this.#ctx.count();
      let pv: V1PersistentVolume | undefined;
      try {
        pv = await this.#ctx.core.readPersistentVolume({ name: m.pvName });
      } catch (err) {
        if (statusCode(err) !== 404) return `${m.mountPath}: reading PersistentVolume ${m.pvName}: ${apiMessage(err)}`;
      }
      const req = mountRequest(pv, m, namespace);
      if (!req.ok) return `${m.mountPath}: ${req.message}`;
      const res = await this.#hooks.withToken(id, (token) => fetch(`${url}/v1/storage/mounts`, {
        method: "POST",
        headers: { "content-type": "application/json", ...(token ? { "X-Access-Token": token } : {}) },
        body: JSON.stringify(req.request),
        // An answer, never followed (see initRemote in the reconciler).
        redirect: "manual",
        signal: AbortSignal.timeout(60_000),
      })).catch((err: Error) => err);
      if (res instanceof Error) return `${m.mountPath}: the runtime did not answer: ${res.message}`;
      const body = (await res.json().catch(() => ({}))) as { success?: boolean; message?: string };
      if (!res.ok || body.success === false) return `${m.mountPath}: the runtime refused the mount: HTTP ${res.status}${body.message ? ` ${body.message}` : ""}`;
      return undefined;
    });
    const failures = results.filter((r): r is string => r !== undefined);
    if (failures.length) return this.#failed(id, failures.join("; "));
    await this.#hooks.markMounted(id, podUid);
    this.#attempts.delete(id);
    this.#conditions.set(id, { type: SandboxConditionType.VolumesMounted, status: "True", reason: "Mounted", message: `${mounts.length} volume${mounts.length === 1 ? "" : "s"} mounted: ${mounts.map((m) => m.mountPath).join(", ")}` });
    this.#hooks.changed(id);
  }

  /** Shows the failure and tries again later (a PV bound later, a node plugin back up). */
  #failed(id: string, why: string): void {
    const message = clipText(why, 1024);
    this.#conditions.set(id, { type: SandboxConditionType.VolumesMounted, status: "False", reason: "MountFailed", message });
    this.#hooks.changed(id, message);
    const attempt = (this.#attempts.get(id) ?? 0) + 1;
    this.#attempts.set(id, attempt);
    const t = setTimeout(() => {
      this.#retries.delete(id);
      this.#hooks.changed(id);
    }, backoffMs(attempt, { baseMs: 2000, maxMs: 60_000 }));
    this.#retries.set(id, t);
  }
}
