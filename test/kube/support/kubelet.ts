// The test's kubelet (and scheduler): watches sandbox pods in a namespace and writes what a node
// would report through the pods/status subresource. Images containing `pull-error` fail to pull;
// pods whose nodeSelector asks for `sandbox.test/unschedulable` are never scheduled; every other
// pod becomes Running and Ready with an IP from 10.244.0.0/16 (its init containers completed, its
// native sidecars running). It watches through the driver's own
// informer (ObjectCache), which resumes after a watch ends: client-node's informer stops for good
// on any error but a timeout, and a kubelet that stops watching leaves new pods Pending.
import { CoreV1Api, PatchStrategy, setHeaderOptions, type KubeConfig, type V1Pod } from "@kubernetes/client-node";
import { ObjectCache } from "../../../controllers/drivers/kubernetes/object-cache.ts";
import { note } from "./failure-logs.ts";

const mergePatch = setHeaderOptions("Content-Type", PatchStrategy.MergePatch);

export class TestKubelet {
  readonly #core: CoreV1Api;
  readonly #pods: ObjectCache<V1Pod>;
  readonly #handled = new Map<string, string>();
  #next = 1;
  #stopped = false;
  /** Status writes that did not get through (each is tried again): what a failed test's log shows. */
  failedWrites = 0;
  /** Pods the kubelet must not touch (a test drives them by hand). */
  readonly hold = new Set<string>();
  /** Pods held back while this answers true for them (a test stops a rollout part-way);
   * `release()` ends the hold and starts them. */
  holdWhere: ((pod: V1Pod) => boolean) | undefined;
  patches = 0;

  readonly #ipFor: (pod: V1Pod) => string | undefined;

  /** `watchTimeoutMs`: how long a quiet watch lasts before it is resumed (tests of resuming);
   * `ipFor`: the address a pod gets, when a test runs it somewhere reachable (else 10.244.x.y). */
  constructor(kc: KubeConfig, namespace: string, opts: { watchTimeoutMs?: number; ipFor?: (pod: V1Pod) => string | undefined } = {}) {
    this.#ipFor = opts.ipFor ?? (() => undefined);
    this.#core = kc.makeApiClient(CoreV1Api);
    this.#pods = podCache(kc, namespace, opts.watchTimeoutMs);
    this.#pods.onChange((pod, verb) => verb !== "delete" && this.#kick(pod));
  }

  start(): Promise<void> {
    return this.#pods.start();
  }

  stop(): Promise<void> {
    this.#stopped = true;
    return this.#pods.stop();
  }

  release(): void {
    this.holdWhere = undefined;
    for (const pod of this.#pods.list()) this.#kick(pod);
  }

  /** What the kubelet did, for a failed test's log. */
  describe(): string {
    const held = this.#pods.list().filter((p) => !this.#handled.has(p.metadata!.name!)).map((p) => p.metadata!.name!);
    return `status writes ${this.patches}, failed ${this.failedWrites}; pods never written: ${held.join(", ") || "none"}; held by name: ${[...this.hold].join(", ") || "none"}; holdWhere ${this.holdWhere ? "set" : "unset"}`;
  }

  #kick(pod: V1Pod): void {
    void this.#handle(pod).catch((err: unknown) => note("kubelet", `pod ${pod.metadata?.name}: ${(err as Error)?.message ?? err}`));
  }

  async #handle(pod: V1Pod): Promise<void> {
    const name = pod.metadata!.name!;
    const uid = pod.metadata!.uid!;
    if (this.hold.has(name) || this.holdWhere?.(pod) || this.#handled.get(name) === uid || pod.metadata?.deletionTimestamp) return;
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
      const ip = this.#ipFor(pod) ?? `10.244.${Math.floor(this.#next / 250)}.${(this.#next++ % 250) + 1}`;
      status = {
        phase: "Running",
        podIP: ip,
        podIPs: [{ ip }],
        hostIP: "10.0.0.10",
        startTime: now,
        conditions: ["PodScheduled", "Initialized", "ContainersReady", "Ready"].map((type) => ({ type, status: "True", lastTransitionTime: now })),
        containerStatuses: containers.map((c) => ({ name: c.name, image: c.image, imageID: "", ready: true, started: true, restartCount: 0, state: { running: { startedAt: now } } })),
        // Init containers done; those with restartPolicy Always (native sidecars) running and
        // ready, as a kubelet reports them.
        ...(pod.spec!.initContainers?.length
          ? {
              initContainerStatuses: pod.spec!.initContainers.map((c) =>
                c.restartPolicy === "Always"
                  ? { name: c.name, image: c.image, imageID: "", ready: true, started: true, restartCount: 0, state: { running: { startedAt: now } } }
                  : { name: c.name, image: c.image, imageID: "", ready: true, restartCount: 0, state: { terminated: { exitCode: 0, reason: "Completed", startedAt: now, finishedAt: now } } },
              ),
            }
          : {}),
      };
    }
    this.patches++;
    try {
      await persist(() => this.#core.patchNamespacedPodStatus({ name, namespace: pod.metadata!.namespace!, body: { status } }, mergePatch));
    } catch (err) {
      // Not handled after all: a node keeps reporting until its write lands. Marked handled and
      // left, the pod stayed Pending with no later event to retry it, and its pool waited out the
      // edge's 5-minute create timeout.
      this.failedWrites++;
      if (this.#handled.get(name) === uid) this.#handled.delete(name);
      note("kubelet", `status of pod ${name} not written (tried again in 1 s): ${(err as Error)?.message ?? err}`);
      if (!this.#stopped) setTimeout(() => {
        const now = this.#pods.get(name);
        if (now?.metadata?.uid === uid && !this.#stopped) this.#kick(now);
      }, 1000).unref();
    }
  }
}

/** A namespace's pods, whole, through an informer that resumes its watch whenever it ends. */
export function podCache(kc: KubeConfig, namespace: string, watchTimeoutMs?: number): ObjectCache<V1Pod> {
  const core = kc.makeApiClient(CoreV1Api);
  return new ObjectCache<V1Pod>(kc, { path: `/api/v1/namespaces/${namespace}/pods`, list: () => core.listNamespacedPod({ namespace }), slim: (raw: V1Pod) => raw, watchTimeoutMs });
}

/** Retries a write until it gets through (a node keeps reporting): a status write lost to a busy
 * API server or a dropped connection left the pod Pending for good, and its pool never filled.
 * A 404 (the pod is gone) ends it. */
export async function persist<T>(write: () => Promise<T>): Promise<T | undefined> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await write();
    } catch (err) {
      if ((err as { code?: number }).code === 404) return undefined;
      if (attempt >= 20) throw err;
      await new Promise((r) => setTimeout(r, 100 * Math.min(10, attempt + 1)));
    }
  }
}
