// The test's kubelet (and scheduler): watches sandbox pods in a namespace and writes what a node
// would report through the pods/status subresource. Images containing `pull-error` fail to pull;
// pods whose nodeSelector asks for `sandbox.test/unschedulable` are never scheduled; every other
// pod becomes Running and Ready with an IP from 10.244.0.0/16.
import { CoreV1Api, makeInformer, PatchStrategy, setHeaderOptions, type KubeConfig, type V1Pod } from "@kubernetes/client-node";

const mergePatch = setHeaderOptions("Content-Type", PatchStrategy.MergePatch);

export class TestKubelet {
  readonly #core: CoreV1Api;
  readonly #informer;
  readonly #handled = new Map<string, string>();
  #next = 1;
  /** Pods the kubelet must not touch (a test drives them by hand). */
  readonly hold = new Set<string>();
  patches = 0;

  constructor(kc: KubeConfig, namespace: string) {
    this.#core = kc.makeApiClient(CoreV1Api);
    this.#informer = makeInformer<V1Pod>(kc, `/api/v1/namespaces/${namespace}/pods`, () => this.#core.listNamespacedPod({ namespace }));
    const handle = (pod: V1Pod) => void this.#handle(pod).catch(() => {});
    this.#informer.on("add", handle);
    this.#informer.on("update", handle);
  }

  start(): Promise<void> {
    return this.#informer.start();
  }

  stop(): Promise<void> {
    return this.#informer.stop();
  }

  async #handle(pod: V1Pod): Promise<void> {
    const name = pod.metadata!.name!;
    const uid = pod.metadata!.uid!;
    if (this.hold.has(name) || this.#handled.get(name) === uid || pod.metadata?.deletionTimestamp) return;
    this.#handled.set(name, uid);
    const now = new Date();
    const containers = pod.spec!.containers;
    let status: object;
    if (pod.spec?.nodeSelector?.["sandbox.test/unschedulable"]) {
      status = {
        phase: "Pending",
        conditions: [{ type: "PodScheduled", status: "False", reason: "Unschedulable", message: "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector.", lastTransitionTime: now }],
      };
    } else if (containers.some((c) => c.image?.includes("pull-error"))) {
      status = {
        phase: "Pending",
        conditions: [{ type: "PodScheduled", status: "True", lastTransitionTime: now }],
        containerStatuses: containers.map((c) => ({
          name: c.name,
          image: c.image,
          imageID: "",
          ready: false,
          restartCount: 0,
          state: c.image?.includes("pull-error")
            ? { waiting: { reason: "ErrImagePull", message: `failed to pull and unpack image "${c.image}": not found` } }
            : { running: { startedAt: now } },
        })),
      };
    } else {
      const ip = `10.244.${Math.floor(this.#next / 250)}.${(this.#next++ % 250) + 1}`;
      status = {
        phase: "Running",
        podIP: ip,
        podIPs: [{ ip }],
        hostIP: "10.0.0.10",
        startTime: now,
        conditions: ["PodScheduled", "Initialized", "ContainersReady", "Ready"].map((type) => ({ type, status: "True", lastTransitionTime: now })),
        containerStatuses: containers.map((c) => ({ name: c.name, image: c.image, imageID: "", ready: true, started: true, restartCount: 0, state: { running: { startedAt: now } } })),
      };
    }
    this.patches++;
    await this.#core.patchNamespacedPodStatus({ name, namespace: pod.metadata!.namespace!, body: { status } }, mergePatch);
  }
}
