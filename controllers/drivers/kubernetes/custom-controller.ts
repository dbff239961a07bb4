// The shell a controller of one custom resource in one namespace shares (the Commit and Checkpoint
// controllers, as the claim sync does): an informer on the namespace's objects of `plural` and a
// keyed work queue, one `reconcile` pass per object at a time, every object queued on start and
// on each add or change (a delete needs no pass: the object is gone). A pass answers when to look
// again (undefined: when the object changes); a pass that throws is retried with backoff.
import { CoreV1Api, CustomObjectsApi, type KubeConfig, type KubernetesObject } from "@kubernetes/client-node";
import { GROUP, VERSION } from "../../../schema/crd/labels.ts";
import { WorkQueue } from "../../lib/work-queue.ts";
import { ObjectCache } from "./object-cache.ts";
import { slimCustom } from "./slim.ts";

export interface CustomControllerOptions {
  kubeConfig: KubeConfig;
  namespace: string;
  /** The resource's plural (also the informer's and the log's name). */
  plural: string;
  /** The work queue's name (its metrics). */
  queue: string;
  log?: (msg: string) => void;
}

export abstract class CustomObjectController<O extends KubernetesObject> {
  readonly objects: ObjectCache<O>;
  protected readonly custom: CustomObjectsApi;
  protected readonly core: CoreV1Api;
  readonly #queue: WorkQueue;

  constructor(o: CustomControllerOptions) {
    this.custom = o.kubeConfig.makeApiClient(CustomObjectsApi);
    this.core = o.kubeConfig.makeApiClient(CoreV1Api);
    this.#queue = new WorkQueue({
      name: o.queue,
      work: async (name) => {
        const after = await this.reconcile(name);
        return after === undefined ? undefined : { requeueAfterMs: after };
      },
      backoff: { baseMs: 1000, maxMs: 30_000 },
      onError: (name, err) => o.log?.(`${o.queue} ${name}: ${(err as Error).message}`),
    });
    const ns = o.namespace;
    this.objects = new ObjectCache<O>(o.kubeConfig, {
      path: `/apis/${GROUP}/${VERSION}/namespaces/${ns}/${o.plural}`,
      list: () => this.custom.listNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: ns, plural: o.plural }),
      slim: slimCustom,
      onError: (err) => o.log?.(`${o.plural} watch: ${(err as Error).message}`),
    });
    this.objects.onChange((obj, verb) => {
      if (verb !== "delete") this.#queue.add(obj.metadata!.name!);
    });
  }

  async start(): Promise<void> {
    await this.objects.start();
    for (const obj of this.objects.list()) this.#queue.add(obj.metadata!.name!);
  }

  async stop(): Promise<void> {
    this.#queue.close();
    await this.objects.stop();
  }

  /** One pass over object `name`; answers when to look again (undefined: when it changes). */
  abstract reconcile(name: string): Promise<number | undefined>;
}
