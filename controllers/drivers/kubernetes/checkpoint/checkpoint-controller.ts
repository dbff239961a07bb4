// The Checkpoint controller's shell (on custom-controller.ts: an informer on a namespace's
// Checkpoints and a work queue);
// each pass asks `decideCheckpoint` (machine.ts) and writes what it says: the rebuild count and
// time as annotations (first, so a lost status write cannot repeat a rebuild), the status, an Event.
import type { KubeConfig } from "@kubernetes/client-node";
import { API_VERSION, GROUP, VERSION } from "../../../../schema/crd/labels.ts";
import { mergePatch, postEvent } from "../kube-api.ts";
import { CustomObjectController } from "../custom-controller.ts";
import type { ObjectCache } from "../object-cache.ts";
import { decideCheckpoint, REBUILDS_ANNOTATION, REBUILT_AT_ANNOTATION } from "./machine.ts";
import type { CheckpointObject } from "./snapshots.ts";

const PLURAL = "checkpoints";

export interface CheckpointControllerOptions {
  kubeConfig: KubeConfig;
  namespace: string;
  now?: () => number;
  log?: (msg: string) => void;
}

export class CheckpointController extends CustomObjectController<CheckpointObject> {
  readonly #o: CheckpointControllerOptions;
  readonly #now: () => number;

  constructor(o: CheckpointControllerOptions) {
    super({ kubeConfig: o.kubeConfig, namespace: o.namespace, plural: PLURAL, queue: "checkpoint", log: o.log });
    this.#o = o;
    this.#now = o.now ?? Date.now;
  }

  get checkpoints(): ObjectCache<CheckpointObject> {
    return this.objects;
  }

  async reconcile(name: string): Promise<number | undefined> {
    const cp = this.checkpoints.get(name);
    if (!cp || cp.metadata?.deletionTimestamp) return undefined;
    const ns = this.#o.namespace;
    const a = cp.metadata!.annotations ?? {};
    const now = this.#now();
    const d = decideCheckpoint({
      status: cp.status ?? {},
      rebuilds: Number(a[REBUILDS_ANNOTATION] ?? 0) || 0,
      rebuiltAt: a[REBUILT_AT_ANNOTATION] ? Date.parse(a[REBUILT_AT_ANNOTATION]) : undefined,
      generation: cp.metadata!.generation ?? 1,
      now,
    });
    const target = { group: GROUP, version: VERSION, namespace: ns, plural: PLURAL, name };
    if (d.annotations) this.checkpoints.remember(await this.custom.patchNamespacedCustomObject({ ...target, body: { metadata: { annotations: d.annotations } } }, mergePatch));
    if (d.status) this.checkpoints.remember(await this.custom.patchNamespacedCustomObjectStatus({ ...target, body: { status: d.status } }, mergePatch));
    if (d.event) await postEvent(this.core, { apiVersion: API_VERSION, kind: "Checkpoint", name, namespace: ns, uid: cp.metadata!.uid }, d.event.type, d.event.reason, d.event.message, new Date(now), this.#o.log ?? (() => {}));
    return d.requeueAfterMs;
  }
}

