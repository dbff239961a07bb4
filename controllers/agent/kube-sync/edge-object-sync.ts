// The shape shared by the syncs of objects the edge runs (PoolAutoscaler, SandboxUpdateOps,
// TrafficPolicy and the cluster-scoped GlobalTrafficPolicy): each object of the namespace (or of
// the cluster, `namespace: null`) is pushed to the edge over the agent's session when it is new or
// its spec changed, its deletion is pushed too, and while it exists its status is asked for every
// `statusMs` and written onto its status subresource, each event the edge reports becoming a
// Kubernetes Event on it. Level-based: a restarted agent pushes every object again (the edge keeps
// the newest generation per uid) and then, for kinds with one, the namespace's inventory (the edge
// drops those deleted while it was down); Event names are derived from the event itself, so one
// posted before a restart is not posted twice. A kind says only what differs (kube-sync/*-sync.ts).
import { CoreV1Api, CustomObjectsApi, type KubeConfig, type KubernetesObject } from "@kubernetes/client-node";
import type { EdgeCall, Link } from "../link.ts";
import { GROUP, VERSION } from "../../../schema/crd/labels.ts";
import type { ReplyItem } from "../../../schema/protocol/index.ts";
import { WorkQueue } from "../../lib/work-queue.ts";
import { ObjectCache } from "../../drivers/kubernetes/object-cache.ts";
import { slimCustom } from "../../drivers/kubernetes/slim.ts";
import { mergePatch, postEvent, stableJson } from "../../drivers/kubernetes/kube-api.ts";

/** Queue key of the inventory push (no object name has underscores). */
const INVENTORY = "__inventory__";

export interface EdgeEvent {
  /** The Event's name: stable per reported event. */
  name: string;
  time: Date;
  type: "Normal" | "Warning";
  reason: string;
  message: string;
  /** Another object of the namespace the Event is about (a run's step on one Sandbox); default
   * the synced object itself. */
  about?: { apiVersion: string; kind: string; name: string; uid?: string };
}

/** What one kind of object differs in. */
export interface EdgeObjectKind<O extends KubernetesObject & { status?: S }, S> {
  kind: string;
  plural: string;
  /** The link item type. */
  call: "autoscalers" | "updateops" | "trafficpolicyobjects" | "securityprofileobjects";
  /** False: the edge takes no inventory of this kind (objects deleted while the agent was down
   * stay there until deleted otherwise). Default true. */
  inventory?: boolean;
  /** True: an object that cannot be sent any more (`upsert` gives a problem) is withdrawn from the
   * edge, so an older version of it does not go on running there. Default false. */
  withdrawRefused?: boolean;
  /** What the edge needs besides `{namespace, name, uid, generation}`, or why the object cannot
   * be sent (it is then not pushed: a frame the edge cannot parse would end the session). */
  upsert(o: O): Record<string, unknown> | { problem: string };
  /** Besides uid and generation, what makes a push due (e.g. an annotation; default none). */
  pushKey?(o: O): string;
  /** The status after the edge's answer (undefined: the answer has none). */
  status(prev: S | undefined, generation: number, reply: ReplyItem, now: string, name?: string): S | undefined;
  /** The status after the edge refused the object, or (`here`) `upsert` found a problem. */
  refused(prev: S | undefined, generation: number, reply: Pick<ReplyItem, "code" | "message"> & { here?: boolean }, now: string): S;
  /** The events of the edge's answer, newest list (the edge keeps a bounded one; default none). */
  events?(name: string, reply: ReplyItem): EdgeEvent[];
}

export interface EdgeObjectSyncOptions {
  kubeConfig: KubeConfig;
  /** The namespace whose objects sync; null: a cluster-scoped kind's, the cluster's. */
  namespace: string | null;
  link: Pick<Link, "call">;
  log?: (msg: string) => void;
  retryMs?: number;
  /** How often an applied object's status is read from the edge (default 5 s). */
  statusMs?: number;
}

export class EdgeObjectSync<O extends KubernetesObject & { status?: S }, S> {
  readonly objects: ObjectCache<O>;
  readonly #k: EdgeObjectKind<O, S>;
  readonly #o: EdgeObjectSyncOptions;
  readonly #custom: CustomObjectsApi;
  readonly #core: CoreV1Api;
  readonly #queue: WorkQueue;
  /** name → the push key handled (accepted by the edge, or refused here). */
  readonly #synced = new Map<string, string>();
  /** Names the edge holds a version of. */
  readonly #held = new Set<string>();
  /** name → uid of the object last seen (a delete event's object may be all that is left). */
  readonly #uids = new Map<string, string>();
  /** Event names posted (bounded per object by the edge's event list). */
  readonly #posted = new Map<string, Set<string>>();

  constructor(kind: EdgeObjectKind<O, S>, opts: EdgeObjectSyncOptions) {
    this.#k = kind;
    this.#o = opts;
    this.#custom = opts.kubeConfig.makeApiClient(CustomObjectsApi);
    this.#core = opts.kubeConfig.makeApiClient(CoreV1Api);
    this.#queue = new WorkQueue({
      name: kind.plural,
      work: async (name) => {
        if (name === INVENTORY) return void (await this.#prune());
        const present = await this.reconcile(name);
        return present ? { requeueAfterMs: opts.statusMs ?? 5000 } : undefined;
      },
      backoff: { baseMs: opts.retryMs ?? 1000, maxMs: 30_000 },
      onError: (name, err) => opts.log?.(`${kind.kind} ${name}: ${(err as Error).message}`),
    });
    const ns = opts.namespace;
    const api = { group: GROUP, version: VERSION, plural: kind.plural };
    this.objects = new ObjectCache<O>(opts.kubeConfig, {
      path: ns === null ? `/apis/${GROUP}/${VERSION}/${kind.plural}` : `/apis/${GROUP}/${VERSION}/namespaces/${ns}/${kind.plural}`,
      list: () => (ns === null ? this.#custom.listClusterCustomObject(api) : this.#custom.listNamespacedCustomObject({ ...api, namespace: ns })),
      slim: slimCustom,
      onError: (err) => opts.log?.(`${kind.plural} watch: ${(err as Error).message}`),
    });
    // A new object, a changed spec or a delete is pushed at once; our own status writes are not.
    this.objects.onChange((o, verb) => {
      const name = o.metadata!.name!;
      if (o.metadata?.uid) this.#uids.set(name, o.metadata.uid);
      if (verb === "delete" || this.#synced.get(name) !== this.#key(o)) this.#queue.add(name);
    });
  }

  #key(o: O): string {
    return `${o.metadata?.uid}/${o.metadata?.generation}/${this.#k.pushKey?.(o) ?? ""}`;
  }

  async start(): Promise<void> {
    await this.objects.start();
    for (const o of this.objects.list()) this.#queue.add(o.metadata!.name!);
    if (this.#k.inventory !== false) this.#queue.add(INVENTORY);
  }

  async stop(): Promise<void> {
    this.#queue.close();
    await this.objects.stop();
  }

  /** Tells the edge every object the namespace holds, so it drops those deleted while we were down. */
  async #prune(): Promise<void> {
    const reply = await this.#call({ namespace: this.#o.namespace, present: this.objects.list().map((o) => o.metadata!.name!) });
    if (reply.result === "rejected") throw new Error(`edge refused the ${this.#k.kind} inventory: ${reply.code}: ${reply.message}`);
  }

  /** Pushes the object (or its deletion), then writes the edge's status; true while it exists. */
  async reconcile(name: string): Promise<boolean> {
    const o = this.objects.get(name);
    const ref = { namespace: this.#o.namespace, name, uid: o?.metadata?.uid ?? this.#uids.get(name) ?? "" };
    if (!o || o.metadata?.deletionTimestamp) {
      if (ref.uid) await this.#call({ ...ref, deleted: true });
      this.#synced.delete(name);
      this.#held.delete(name);
      this.#uids.delete(name);
      this.#posted.delete(name);
      return false;
    }
    const generation = o.metadata?.generation ?? 0;
    const now = new Date().toISOString();
    const key = this.#key(o);
    const pushed = this.#synced.get(name) !== key;
    const upsert = this.#k.upsert(o);
    if ("problem" in upsert) {
      // Never sent (nor asked about) until the object changes.
      if (this.#k.withdrawRefused && this.#held.has(name)) await this.#call({ ...ref, deleted: true });
      this.#held.delete(name);
      this.#synced.set(name, key);
      await this.#write(o, this.#k.refused(o.status, generation, { code: "bad_request", message: String(upsert.problem), here: true }, now));
      return false;
    }
    const reply = pushed ? await this.#call({ ...ref, generation, ...upsert }) : await this.#call({ ...ref, status: true });
    if (reply.result === "rejected") {
      if (!pushed) this.#synced.delete(name); // the edge lost it: push it again
      await this.#write(o, this.#k.refused(o.status, generation, reply, now));
      throw new Error(`edge refused ${this.#k.kind} ${ref.namespace}/${name}: ${reply.code}: ${reply.message}`);
    }
    if (pushed) this.#synced.set(name, key);
    this.#held.add(name);
    const status = this.#k.status(o.status, generation, reply, now, name);
    if (status) {
      await this.#write(o, status);
      await this.#postEvents(o, this.#k.events?.(name, reply) ?? []);
    }
    return true;
  }

  async #call(item: Record<string, unknown>): Promise<ReplyItem> {
    return this.#o.link.call({ type: this.#k.call, item } as EdgeCall);
  }

  /** Patches the status subresource when it changed. */
  async #write(o: O, status: S): Promise<void> {
    if (stableJson(o.status ?? {}) === stableJson(status)) return;
    const ns = this.#o.namespace;
    const req = { group: GROUP, version: VERSION, plural: this.#k.plural, name: o.metadata!.name!, body: { status } };
    const updated = ns === null ? await this.#custom.patchClusterCustomObjectStatus(req, mergePatch) : await this.#custom.patchNamespacedCustomObjectStatus({ ...req, namespace: ns }, mergePatch);
    this.objects.remember(updated);
  }

  async #postEvents(o: O, events: EdgeEvent[]): Promise<void> {
    if (events.length === 0 && !this.#posted.has(o.metadata!.name!)) return;
    const name = o.metadata!.name!;
    const posted = this.#posted.get(name) ?? new Set<string>();
    this.#posted.set(name, posted);
    // A cluster-scoped object's Events live in `default`, as Kubernetes' own controllers put them.
    const about = { apiVersion: `${GROUP}/${VERSION}`, kind: this.#k.kind, name, namespace: this.#o.namespace ?? "default", uid: o.metadata!.uid };
    const current = new Set<string>();
    for (const e of events) {
      current.add(e.name);
      if (posted.has(e.name)) continue;
      await postEvent(this.#core, e.about ? { ...e.about, namespace: about.namespace } : about, e.type, e.reason, e.message, e.time, this.#o.log ?? (() => {}), e.name);
      posted.add(e.name);
    }
    // Only the edge's current list is remembered.
    for (const id of posted) if (!current.has(id)) posted.delete(id);
  }
}
