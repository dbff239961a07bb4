// The Checkpoint controller's shell: an informer on a namespace's Checkpoints and a work queue;
// each pass asks `decideCheckpoint` (machine.ts) and writes what it says: the rebuild count and
// time as annotations (first, so a lost status write cannot repeat a rebuild), the status, an Event.
import { CoreV1Api, CustomObjectsApi, type KubeConfig } from "@kubernetes/client-node";
import { API_VERSION, GROUP, VERSION } from "../../../../schema/crd/labels.ts";
import { WorkQueue } from "../../../lib/work-queue.ts";
import { mergePatch, postEvent } from "../kube-api.ts";
import { ObjectCache } from "../object-cache.ts";
import { slimCustom } from "../slim.ts";
import { decideCheckpoint, REBUILDS_ANNOTATION, REBUILT_AT_ANNOTATION } from "./machine.ts";
import type { CheckpointObject } from "./snapshots.ts";

const PLURAL = "checkpoints";

export interface CheckpointControllerOptions {
  kubeConfig: KubeConfig;
  namespace: string;
  now?: () => number;
  log?: (msg: string) => void;
}

export class CheckpointController {
  readonly checkpoints: ObjectCache<CheckpointObject>;
  readonly #o: CheckpointControllerOptions;
  readonly #custom: CustomObjectsApi;
  readonly #core: CoreV1Api;
  readonly #queue: WorkQueue;
  readonly #now: () => number;

  constructor(o: CheckpointControllerOptions) {
    this.#o = o;
    this.#now = o.now ?? Date.now;
    this.#custom = o.kubeConfig.makeApiClient(CustomObjectsApi);
    this.#core = o.kubeConfig.makeApiClient(CoreV1Api);
    this.#queue = new WorkQueue({
      name: "checkpoint",
      work: async (name) => {
        const after = await this.reconcile(name);
        return after === undefined ? undefined : { requeueAfterMs: after };
      },
      backoff: { baseMs: 1000, maxMs: 30_000 },
      onError: (name, err) => o.log?.(`checkpoint ${name}: ${(err as Error).message}`),
    });
    const ns = o.namespace;
    this.checkpoints = new ObjectCache(o.kubeConfig, {
      path: `/apis/${GROUP}/${VERSION}/namespaces/${ns}/${PLURAL}`,
      list: () => this.#custom.listNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: ns, plural: PLURAL }),
      slim: slimCustom,
      onError: (err) => o.log?.(`checkpoints watch: ${(err as Error).message}`),
    });
    this.checkpoints.onChange((c, verb) => {
      if (verb !== "delete") this.#queue.add(c.metadata!.name!);
    });
  }

  async start(): Promise<void> {
    await this.checkpoints.start();
    for (const c of this.checkpoints.list()) this.#queue.add(c.metadata!.name!);
  }

  async stop(): Promise<void> {
    this.#queue.close();
    await this.checkpoints.stop();
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
    if (d.annotations) this.checkpoints.remember(await this.#custom.patchNamespacedCustomObject({ ...target, body: { metadata: { annotations: d.annotations } } }, mergePatch));
    if (d.status) this.checkpoints.remember(await this.#custom.patchNamespacedCustomObjectStatus({ ...target, body: { status: d.status } }, mergePatch));
    if (d.event) await postEvent(this.#core, { apiVersion: API_VERSION, kind: "Checkpoint", name, namespace: ns, uid: cp.metadata!.uid }, d.event.type, d.event.reason, d.event.message, new Date(now), this.#o.log ?? (() => {}));
    return d.requeueAfterMs;
  }
}

