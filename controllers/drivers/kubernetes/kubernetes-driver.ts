// The kubernetes driver: each sandbox is a Sandbox object (agents.kruise.io) in one namespace,
// owning a Pod built from its SandboxSet's template (agent-runtime injected) and PVCs from the
// volumeClaimTemplates. Reads come from informers; writes go to the API server and are remembered
// until the watch catches up. Objects are found by the sandbox-id label, never by name.
//
//   Running        Sandbox + PVCs + Pod; status mirrors the pod (Ready, IP, scheduling, pulls)
//   Paused, Stop   the Pod is deleted, the PVCs and the Sandbox stay; Running recreates the Pod
//   Paused, Freeze the Pod stays; the runtime freezes every process (POST /freeze)
//   destroy        Pod, PVCs, then the Sandbox (its finalizer is ours)
import {
  CoreV1Api,
  CustomObjectsApi,
  KubeConfig,
  PatchStrategy,
  setHeaderOptions,
  type KubernetesObject,
  type V1OwnerReference,
  type V1PersistentVolumeClaim,
  type V1Pod,
  type V1PodTemplateSpec,
} from "@kubernetes/client-node";
import { createHash } from "node:crypto";
import { EventReason, ReadyReason } from "../../../schema/crd/conditions.ts";
import { ANNOTATION, API_VERSION, GROUP, LABEL, RUNTIME_PORT, SANDBOX_FINALIZER, VERSION } from "../../../schema/crd/labels.ts";
import { userAnnotations, userLabels } from "../../../schema/crd/user-metadata.ts";
import type { SpawnRequest } from "../../runtime/sandbox-view.ts";
import { KeyedSerial } from "../../../lib/keyed-serial.ts";
import {
  isTerminal,
  SandboxNotFoundError,
  TerminalError,
  UnsupportedError,
  type DesiredSandbox,
  type Driver,
  type DriverCapabilities,
  type ExecResult,
  type InplaceUpdate,
  type SandboxObservation,
  type SnapshotRef,
} from "../driver.ts";
import type { ObjectCache } from "./object-cache.ts";
import { NAMESPACE_PATTERN, NamespaceScope } from "./namespace-scope.ts";
import { poolConnections } from "./pooled-connections.ts";
import { buildPod, buildPvc, imageTemplate, templateHash, type VolumeClaimTemplate } from "./pod-spec.ts";
import { sandboxState, sandboxStatus, type SandboxFacts, type SandboxStatus } from "./pod-state.ts";
import { poolRevision } from "./pool-status.ts";

/** A Sandbox object as the driver reads it. */
export interface SandboxObject extends KubernetesObject {
  spec: {
    paused?: boolean;
    template?: V1PodTemplateSpec;
    volumeClaimTemplates?: VolumeClaimTemplate[];
    pauseStrategy?: { type?: string };
  };
  status?: SandboxStatus;
}

/** A SandboxSet as the driver reads it. */
export interface SandboxSetObject extends KubernetesObject {
  spec: { replicas?: number; template?: V1PodTemplateSpec; volumeClaimTemplates?: VolumeClaimTemplate[] };
  status?: { updateRevision?: string };
}

/**
 * The desired state plus where the sandbox belongs. `pool` names the SandboxSet (its template is
 * used, and it owns the sandbox while unclaimed); without it `template` is a SandboxSet name in
 * the namespace, or else an image.
 */
export interface KubeDesiredSandbox extends DesiredSandbox {
  pool?: string;
  /** False while a warm pool member; true once claimed or when created on demand. */
  claimed?: boolean;
  /** The runtime's access token, sent with freeze/thaw once the sandbox has one. */
  accessToken?: string | null;
}

/** A driver observation plus what only a remote runtime has: where it is and whether it is ready. */
export interface KubeSandboxObservation extends SandboxObservation {
  ready: boolean;
  /** `http://<podIP>:49983` (or the runtime-url annotation) once the pod has an IP. */
  endpoint?: string;
  reason?: string;
}

/** A change a user made to a Sandbox object, for the edge to apply (proposal: agent → edge `requests`). */
export interface SandboxRequest {
  sandboxId: string;
  action: "pause" | "resume" | "kill";
  /** The edge generation (the agents.kruise.io/edge-generation annotation) the Sandbox showed when
   * the user edited it: the edge refuses an edit made against a generation it has moved past. Read
   * from the edited object itself, so an edit found by the first list after a restart keeps the
   * generation it was made at even when a redelivered intent rewrites the annotation before the
   * agent's link is up. */
  generation: number;
}

export interface KubernetesDriverOptions {
  kubeConfig: KubeConfig;
  namespace: string;
  /** Image of the injected agent-runtime sidecar. */
  runtimeImage: string;
  /** Told whenever a sandbox's objects change (pod ready, IP assigned, pod lost). */
  onChange?: (id: string) => void;
  /** A user changed a Sandbox with kubectl (patched spec.paused, or deleted it). The edge decides:
   * the driver does not act on it until an intent with a newer generation arrives. */
  onRequest?: (req: SandboxRequest) => void;
  /** Namespaces watched from start() on besides `namespace` (team namespaces: their Sandboxes are
   * adopted, their orphans found, their SandboxSets read after a restart before any intent
   * arrives), or "all": every namespace holding a Sandbox when start() runs (a cluster-wide list,
   * which needs cluster-wide RBAC). Other team namespaces are still watched from their first intent. */
  watchNamespaces?: string[] | "all";
  now?: () => number;
  log?: (msg: string) => void;
}

const mergePatch = setHeaderOptions("Content-Type", PatchStrategy.MergePatch);
const strategicPatch = setHeaderOptions("Content-Type", PatchStrategy.StrategicMergePatch);
const PLURAL = { sandbox: "sandboxes", sandboxSet: "sandboxsets" } as const;

/** JSON with object keys sorted, so an object compares equal to the API server's copy of it. */
function stableJson(v: unknown): string {
  return JSON.stringify(v, (_k, val: unknown) =>
    val && typeof val === "object" && !Array.isArray(val) ? Object.fromEntries(Object.entries(val).sort(([a], [b]) => (a < b ? -1 : 1))) : val,
  );
}

function statusCode(err: unknown): number | undefined {
  const e = err as { code?: number; statusCode?: number };
  return e?.code ?? e?.statusCode;
}

/** The API server's own message of a failed request (its Status body), else the error's. */
function apiMessage(err: unknown): string {
  const body = (err as { body?: unknown }).body;
  try {
    const status = (typeof body === "string" ? JSON.parse(body) : body) as { message?: string } | undefined;
    if (status?.message) return status.message;
  } catch {
    // not JSON: fall through
  }
  return (err as Error).message;
}

/** Ignores 404 (already gone) and 409 AlreadyExists where a retry is harmless. */
async function tolerate<T>(p: Promise<T>, codes: number[]): Promise<T | undefined> {
  try {
    return await p;
  } catch (err) {
    if (codes.includes(statusCode(err) ?? 0)) return undefined;
    throw err;
  }
}

/** The sandbox-id label value: the id itself, or (ids over 63 characters, which no label value
 * may hold) a hash of it; the id is then kept in the sandbox-id annotation. */
export function idLabel(id: string): string {
  return id.length <= 63 ? id : `h${createHash("sha256").update(id).digest("hex").slice(0, 40)}`;
}

/** The Sandbox/Pod name for an id: `{pool}-{id}` or `sbx-{id}`. Names may exceed 63 characters. */
export function sandboxName(id: string, pool?: string): string {
  return `${pool ?? "sbx"}-${id}`.slice(0, 253);
}

/** What a sandbox's phase, readiness, endpoint and status are computed from, of a (slim) pod. */
function podFacts(p: V1Pod): string {
  const m = p.metadata;
  return JSON.stringify([m?.uid, m?.deletionTimestamp, m?.annotations, p.spec?.nodeName, p.status]);
}

export class KubernetesDriver implements Driver {
  readonly name = "kubernetes";
  readonly capabilities: DriverCapabilities = {
    level: "kubernetes",
    rootView: true,
    networkIsolation: false,
    limits: { cpu: true, memory: true, pids: false },
    freeze: "signal",
    kill: "namespace",
    snapshotFs: false,
    memorySnapshot: false,
    survivesAgentRestart: true,
    hostView: false,
    notes: [
      "the runtime runs in each pod; the agent reaches it at <podIP>:49983 (no host view)",
      "Stop pause deletes the pod and keeps its PVCs; only PVC data survives",
      "filesystem snapshots and exec through the driver are not implemented (use the runtime's envd API)",
      "allowInternetAccess=false is not enforced yet (TrafficPolicy data plane not implemented)",
    ],
  };

  /** The namespace of sandboxes whose intent names no team (and of the SandboxSet sync). */
  readonly namespace: string;
  /** The cluster it talks to (the CRD syncs reuse it). */
  readonly kubeConfig: KubeConfig;
  /** Counts API requests this driver sent (writes and status patches; informer traffic excluded). */
  requests = 0;

  readonly #core: CoreV1Api;
  readonly #custom: CustomObjectsApi;
  readonly #opts: KubernetesDriverOptions;
  readonly #now: () => number;
  readonly #tokens = new Map<string, string>();
  /** Last Ready reason an Event was emitted for, per sandbox, so each transition is reported once. */
  readonly #eventReason = new Map<string, string>();
  /** One set of informers per namespace with sandboxes of ours; the first is `namespace`'s. */
  readonly #scopes = new Map<string, NamespaceScope>();
  readonly #home: NamespaceScope;
  readonly #statusTimers = new Map<string, NodeJS.Timeout>();
  /** Each sandbox's chain of writes (see #serial). */
  readonly #writes = new KeyedSerial();
  /** Metadata-only changes (a claim, a new generation) not yet written: the claim's critical path
   * is the runtime's re-init, so the Sandbox and pod relabel trail it by a few milliseconds. */
  readonly #deferred = new Map<string, KubeDesiredSandbox>();
  /** Last user request reported per sandbox (`action@generation`), so each is reported once. */
  readonly #requested = new Map<string, string>();
  readonly #destroying = new Set<string>();
  /** The last failed ensure of each sandbox still being retried, shown as its Ready condition. */
  readonly #failing = new Map<string, { reason: ReadyReason; message: string }>();

  constructor(opts: KubernetesDriverOptions) {
    this.#opts = opts;
    this.namespace = opts.namespace;
    this.kubeConfig = opts.kubeConfig;
    this.#now = opts.now ?? Date.now;
    poolConnections(opts.kubeConfig);
    this.#core = opts.kubeConfig.makeApiClient(CoreV1Api);
    this.#custom = opts.kubeConfig.makeApiClient(CustomObjectsApi);
    this.#home = this.#scope(opts.namespace);
  }

  /** The home namespace's informers (the SandboxSet sync and tests read them). */
  get pods(): ObjectCache<V1Pod> {
    return this.#home.pods;
  }
  get pvcs(): ObjectCache<V1PersistentVolumeClaim> {
    return this.#home.pvcs;
  }
  get sandboxes(): ObjectCache<SandboxObject> {
    return this.#home.sandboxes;
  }
  get sandboxSets(): ObjectCache<SandboxSetObject> {
    return this.#home.sandboxSets;
  }

  /** The scope of a namespace, made (not started) on first use. */
  #scope(ns: string): NamespaceScope {
    let sc = this.#scopes.get(ns);
    if (sc) return sc;
    sc = new NamespaceScope({
      kubeConfig: this.#opts.kubeConfig,
      core: this.#core,
      custom: this.#custom,
      namespace: ns,
      onError: (err) => this.#opts.log?.(`watch ${ns}: ${(err as Error)?.message ?? err}`),
      count: () => this.requests++,
    });
    const scope = sc;
    const changed = (o: V1Pod, verb: string, old?: V1Pod) => {
      // A relabel (the claim's own patch) changes nothing the sandbox's state is made of.
      if (verb === "update" && old && podFacts(old) === podFacts(o)) return;
      const id = this.#idOf(o, scope);
      if (!id) return;
      this.#scheduleStatus(id);
      this.#opts.onChange?.(id);
    };
    sc.pods.onChange(changed);
    sc.sandboxes.onChange((o, verb) => {
      if (verb !== "delete") this.#userRequest(o);
    });
    this.#scopes.set(ns, sc);
    return sc;
  }

  /** The scope holding a sandbox's objects (the home scope for one not seen anywhere). */
  #scopeOf(id: string): NamespaceScope {
    const label = idLabel(id);
    if (this.#home.sandboxes.forSandbox(label).length || this.#home.pods.forSandbox(label).length) return this.#home;
    for (const sc of this.#scopes.values()) {
      if (sc.sandboxes.forSandbox(label).length || sc.pods.forSandbox(label).length) return sc;
    }
    return this.#home;
  }

  /** The sandbox id of a Sandbox or of a pod/PVC (through its Sandbox when the label is a hash). */
  #idOf(o: KubernetesObject, sc: NamespaceScope): string | undefined {
    const label = o.metadata?.labels?.[LABEL.sandboxId];
    if (!label) return undefined;
    const own = o.metadata?.annotations?.[ANNOTATION.sandboxId];
    if (own) return own;
    return sc.sandboxes.forSandbox(label)[0]?.metadata?.annotations?.[ANNOTATION.sandboxId] ?? label;
  }

  /** Spots kubectl edits: spec.paused differing from what the edge last asked for, or a delete the
   * agent did not make (its finalizer holds the object until the edge confirms). */
  #userRequest(o: SandboxObject): void {
    const id = o.metadata?.annotations?.[ANNOTATION.sandboxId];
    if (!id || !this.#opts.onRequest || this.#destroying.has(id)) return;
    const generation = Number(o.metadata?.annotations?.[ANNOTATION.generation] ?? 0);
    let action: SandboxRequest["action"] | undefined;
    if (o.metadata?.deletionTimestamp) action = "kill";
    else {
      const wanted = o.metadata?.annotations?.[ANNOTATION.desiredPaused];
      if (wanted !== undefined && String(Boolean(o.spec.paused)) !== wanted) action = o.spec.paused ? "pause" : "resume";
    }
    if (!action) return;
    const key = `${action}@${generation}`;
    if (this.#requested.get(id) === key) return;
    this.#requested.set(id, key);
    this.#opts.onRequest({ sandboxId: id, action, generation });
  }

  /** Starts the informers of the home namespace, of `watchNamespaces` (with "all": of every
   * namespace holding a Sandbox or a sandbox pod) and waits for their first list. Any other team's
   * namespace is watched from the first intent naming the team. */
  async start(): Promise<void> {
    const w = this.#opts.watchNamespaces;
    const namespaces = new Set([this.namespace, ...(w === "all" ? await this.#namespacesWithSandboxes() : (w ?? []))]);
    await Promise.all([...namespaces].map((ns) => this.watchNamespace(ns)));
  }

  /** The namespaces of the cluster's Sandboxes and sandbox pods (one list each, names only). */
  async #namespacesWithSandboxes(): Promise<string[]> {
    this.requests += 2;
    const [sandboxes, pods] = await Promise.all([
      this.#custom.listClusterCustomObject({ group: GROUP, version: VERSION, plural: PLURAL.sandbox, labelSelector: LABEL.sandboxId }) as Promise<{ items: KubernetesObject[] }>,
      this.#core.listPodForAllNamespaces({ labelSelector: `${LABEL.createdBy}=sandbox` }),
    ]);
    return [...new Set([...sandboxes.items, ...pods.items].map((o) => o.metadata!.namespace!))];
  }

  /** Starts watching a namespace (once) and resolves after its first list; its SandboxSets are then
   * in the returned scope (the CRD link reads them). */
  async watchNamespace(ns: string): Promise<NamespaceScope> {
    if (!NAMESPACE_PATTERN.test(ns)) throw new Error(`"${ns}" is not a valid Kubernetes namespace name (lowercase letters, digits and '-', at most 63)`);
    const sc = this.#scope(ns);
    await sc.start();
    return sc;
  }

  async stop(): Promise<void> {
    for (const t of this.#statusTimers.values()) clearTimeout(t);
    await Promise.all([...this.#scopes.values()].map((sc) => sc.stop()));
  }

  #sandbox(id: string): SandboxObject | undefined {
    return this.#scopeOf(id).sandboxes.forSandbox(idLabel(id))[0];
  }

  #pod(id: string): V1Pod | undefined {
    const pods = this.#scopeOf(id).pods.forSandbox(idLabel(id));
    return pods.find((p) => !p.metadata?.deletionTimestamp) ?? pods[0];
  }

  #ownerRef(sbx: SandboxObject): V1OwnerReference {
    return { apiVersion: API_VERSION, kind: "Sandbox", name: sbx.metadata!.name!, uid: sbx.metadata!.uid!, controller: true, blockOwnerDeletion: true };
  }

  /** The template a new sandbox is built from: its pool's, a SandboxSet named like its template, or the image. */
  #resolveTemplate(d: KubeDesiredSandbox, sc: NamespaceScope): { set?: SandboxSetObject; template: V1PodTemplateSpec; vcts: VolumeClaimTemplate[] } {
    const set = sc.sandboxSets.get(d.pool ?? d.template);
    if (set?.spec.template) return { set, template: set.spec.template, vcts: set.spec.volumeClaimTemplates ?? [] };
    return { template: imageTemplate(d.template), vcts: [] };
  }

  async #createSandbox(d: KubeDesiredSandbox, sc: NamespaceScope): Promise<SandboxObject> {
    const { set, template, vcts } = this.#resolveTemplate(d, sc);
    const pool = set?.metadata?.name;
    const claimed = d.claimed ?? pool === undefined;
    const labels: Record<string, string> = {
      ...userLabels(d.labels),
      [LABEL.sandboxId]: idLabel(d.id),
      [LABEL.claimed]: String(claimed),
      [LABEL.templateHash]: set ? poolRevision(set) : templateHash(template),
    };
    if (pool) Object.assign(labels, { [LABEL.pool]: pool, [LABEL.template]: pool });
    const ownerReferences =
      set && !claimed ? [{ apiVersion: API_VERSION, kind: "SandboxSet", name: pool!, uid: set.metadata!.uid!, controller: true, blockOwnerDeletion: true }] : [];
    const body: SandboxObject = {
      apiVersion: API_VERSION,
      kind: "Sandbox",
      metadata: {
        name: sandboxName(d.id, pool),
        namespace: sc.namespace,
        labels,
        annotations: {
          ...userAnnotations(d.annotations),
          [ANNOTATION.sandboxId]: d.id,
          [ANNOTATION.generation]: String(d.generation),
          [ANNOTATION.pauseStrategy]: d.pauseStrategy,
          [ANNOTATION.desiredPaused]: String(d.state === "Paused"),
        },
        finalizers: [SANDBOX_FINALIZER],
        ownerReferences,
      },
      spec: { template, volumeClaimTemplates: vcts, paused: d.state === "Paused", pauseStrategy: { type: "Stop" } },
    };
    this.requests++;
    const created = (await this.#custom.createNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: sc.namespace, plural: PLURAL.sandbox, body })) as SandboxObject;
    return sc.sandboxes.remember(created);
  }

  /** Brings labels, owner, pause and generation of an existing Sandbox in line with `d`. */
  async #updateSandbox(sbx: SandboxObject, d: KubeDesiredSandbox): Promise<SandboxObject> {
    const meta = sbx.metadata!;
    const claimedNow = meta.labels?.[LABEL.claimed] === "true";
    // Without a word on ownership (a caller that does not know pools) the current label stands.
    const claimed = d.claimed ?? claimedNow;
    const patch: { metadata: Record<string, unknown>; spec?: Record<string, unknown> } = { metadata: {} };
    if (claimed !== claimedNow) {
      patch.metadata.labels = { [LABEL.claimed]: String(claimed) };
      if (claimed) {
        // Leaving the pool: the SandboxSet no longer owns it and counts one fewer warm member.
        patch.metadata.ownerReferences = (meta.ownerReferences ?? []).filter((r) => r.kind !== "SandboxSet");
        patch.metadata.annotations = { [ANNOTATION.claimTimestamp]: new Date(this.#now()).toISOString() };
      }
    }
    // User labels and annotations (a claim's, E2B metadata) go on the Sandbox and its pod; added
    // or changed, never removed (a warm member has none: they come with the claim).
    const added = Object.fromEntries(Object.entries(userLabels(d.labels)).filter(([k, v]) => meta.labels?.[k] !== v));
    if (Object.keys(added).length) patch.metadata.labels = { ...added, ...(patch.metadata.labels as Record<string, string> | undefined) };
    const addedAnnotations = Object.fromEntries(Object.entries(userAnnotations(d.annotations)).filter(([k, v]) => meta.annotations?.[k] !== v));
    const annotations = { ...addedAnnotations, ...(patch.metadata.annotations as Record<string, string> | undefined) };
    if (meta.annotations?.[ANNOTATION.generation] !== String(d.generation)) annotations[ANNOTATION.generation] = String(d.generation);
    if (meta.annotations?.[ANNOTATION.pauseStrategy] !== d.pauseStrategy) annotations[ANNOTATION.pauseStrategy] = d.pauseStrategy;
    const paused = d.state === "Paused";
    if (meta.annotations?.[ANNOTATION.desiredPaused] !== String(paused)) annotations[ANNOTATION.desiredPaused] = String(paused);
    if (Object.keys(annotations).length) patch.metadata.annotations = annotations;
    if (Boolean(sbx.spec.paused) !== paused) patch.spec = { paused };
    if (!Object.keys(patch.metadata).length && !patch.spec) return sbx;
    this.requests++;
    const sc = this.#scopeOf(d.id);
    const pod = this.#pod(d.id);
    // A claim relabels the pod too (selectors over pods see it leave the pool); both in parallel.
    const podLabels = { ...added, ...(claimed && !claimedNow ? { [LABEL.claimed]: "true" } : {}) };
    const podMeta = { ...(Object.keys(podLabels).length ? { labels: podLabels } : {}), ...(Object.keys(addedAnnotations).length ? { annotations: addedAnnotations } : {}) };
    const [updated] = await Promise.all([
      this.#custom.patchNamespacedCustomObject(
        { group: GROUP, version: VERSION, namespace: sc.namespace, plural: PLURAL.sandbox, name: meta.name!, body: patch },
        mergePatch,
      ) as Promise<SandboxObject>,
      Object.keys(podMeta).length && pod ? this.#patchPod(sc, pod, { metadata: podMeta }) : undefined,
    ]);
    return sc.sandboxes.remember(updated);
  }

  async #patchPod(sc: NamespaceScope, pod: V1Pod, body: object): Promise<void> {
    this.requests++;
    const updated = await tolerate(this.#core.patchNamespacedPod({ name: pod.metadata!.name!, namespace: sc.namespace, body }, mergePatch), [404]);
    if (updated) sc.pods.remember(updated);
  }

  async #ensurePvcs(sc: NamespaceScope, sbx: SandboxObject): Promise<void> {
    const labels = { [LABEL.sandboxId]: sbx.metadata!.labels![LABEL.sandboxId]! };
    for (const vct of sbx.spec.volumeClaimTemplates ?? []) {
      const body = buildPvc(vct, { name: sbx.metadata!.name!, namespace: sc.namespace, labels, owner: this.#ownerRef(sbx) });
      if (sc.pvcs.get(body.metadata!.name!)) continue;
      this.requests++;
      const created = await tolerate(this.#core.createNamespacedPersistentVolumeClaim({ namespace: sc.namespace, body }), [409]);
      if (created) sc.pvcs.remember(created);
    }
  }

  async #createPod(sc: NamespaceScope, sbx: SandboxObject, d: KubeDesiredSandbox): Promise<void> {
    const labels = {
      ...userLabels(d.labels),
      ...Object.fromEntries(
        [LABEL.sandboxId, LABEL.pool, LABEL.template, LABEL.claimed, LABEL.templateHash].flatMap((k) => (sbx.metadata?.labels?.[k] ? [[k, sbx.metadata.labels[k]]] : [])),
      ),
    };
    const body = buildPod({
      name: sbx.metadata!.name!,
      namespace: sc.namespace,
      template: sbx.spec.template ?? imageTemplate(d.template),
      volumeClaimTemplates: sbx.spec.volumeClaimTemplates ?? [],
      labels,
      annotations: userAnnotations(d.annotations),
      owner: this.#ownerRef(sbx),
      runtimeImage: this.#opts.runtimeImage,
      resources: d.resources,
    });
    this.requests++;
    try {
      const created = await this.#core.createNamespacedPod({ namespace: sc.namespace, body });
      sc.pods.remember(created);
      await this.#event(sc, sbx, "Normal", EventReason.PodCreated, `created pod ${body.metadata!.name}`);
    } catch (err) {
      if (statusCode(err) === 409) return; // the old pod of a Stop pause is still terminating
      // Invalid: the same pod is refused every time. Other refusals (quota, admission) may clear.
      if (statusCode(err) === 422) throw new TerminalError(ReadyReason.PodCreateFailed, `the API server refused pod ${body.metadata!.name}: ${apiMessage(err)}`);
      throw err;
    }
  }

  async #deletePod(sc: NamespaceScope, pod: V1Pod, graceSeconds: number): Promise<void> {
    if (pod.metadata?.deletionTimestamp) return;
    this.requests++;
    await tolerate(this.#core.deleteNamespacedPod({ name: pod.metadata!.name!, namespace: sc.namespace, gracePeriodSeconds: graceSeconds }), [404]);
    sc.pods.forget(pod.metadata!.name!);
  }

  #runtimeUrl(pod: V1Pod | undefined): string | undefined {
    if (!pod) return undefined;
    return pod.metadata?.annotations?.[ANNOTATION.runtimeUrl] ?? (pod.status?.podIP ? `http://${pod.status.podIP}:${RUNTIME_PORT}` : undefined);
  }

  async #runtimeCall(id: string, path: "/freeze" | "/unfreeze"): Promise<void> {
    const url = this.#runtimeUrl(this.#pod(id));
    if (!url) throw new SandboxNotFoundError(id, "no running pod with an IP");
    const token = this.#tokens.get(id);
    const res = await fetch(`${url}${path}`, { method: "POST", headers: token ? { "X-Access-Token": token } : {}, signal: AbortSignal.timeout(10_000) });
    if (!res.ok) throw new Error(`runtime ${path} for ${id}: HTTP ${res.status} ${await res.text()}`);
  }

  #facts(sbx: SandboxObject | undefined, id: string): SandboxFacts {
    const pod = this.#pod(id);
    return {
      paused: Boolean(sbx?.spec.paused),
      pauseStrategy: sbx?.metadata?.annotations?.[ANNOTATION.pauseStrategy] === "Freeze" ? "Freeze" : "Stop",
      frozen: Boolean(pod) && sbx?.metadata?.annotations?.[ANNOTATION.frozenPod] === pod?.metadata?.uid,
      pod,
    };
  }

  async ensure(desired: DesiredSandbox): Promise<KubeSandboxObservation> {
    const d = desired as KubeDesiredSandbox;
    if (d.accessToken) this.#tokens.set(d.id, d.accessToken);
    // The team's objects are only seen once its namespace is watched.
    if (d.namespace && d.namespace !== this.namespace && NAMESPACE_PATTERN.test(d.namespace)) await this.#scope(d.namespace).start();
    const sbx = this.#sandbox(d.id);
    const live = sbx && this.#pod(d.id);
    if (sbx && live && d.state === "Running" && !sbx.spec.paused && !live.metadata?.deletionTimestamp && !this.#facts(sbx, d.id).frozen && !this.#inplacePending(sbx, d)) {
      // Running and staying so: only labels, owner and annotations can differ; write them behind.
      this.#deferred.set(d.id, d);
      this.#failing.delete(d.id);
      this.#scheduleStatus(d.id);
      return this.#observe(d.id)!;
    }
    this.#deferred.delete(d.id);
    return this.#serial(d.id, () => this.#converge(d).catch((err: unknown) => this.#failed(d.id, err)));
  }

  /**
   * A failed converge: the Sandbox shows it as its Ready condition (ReconcileError while the agent
   * retries, or the terminal reason) before the error goes back to the reconciler, which decides
   * (TerminalError: Failed; anything else: retried). The status write is best effort: the API
   * server may be what failed.
   */
  async #failed(id: string, err: unknown): Promise<never> {
    const message = apiMessage(err);
    const reason = isTerminal(err) && Object.values<string>(ReadyReason).includes(err.reason) ? (err.reason as ReadyReason) : ReadyReason.ReconcileError;
    this.#failing.set(id, { reason, message });
    await this.#writeStatus(id).catch(() => {});
    if (isTerminal(err)) throw err;
    throw new Error(message, { cause: err });
  }

  /** The slow half of ensure: creates, pod changes and the status write, in the sandbox's chain. */
  async #converge(d: KubeDesiredSandbox): Promise<KubeSandboxObservation> {
    let sbx = this.#sandbox(d.id);
    // A sandbox stays where it was made; a new one goes to its team's namespace.
    const sc = sbx ? this.#scopeOf(d.id) : await this.#scopeForNew(d);
    sbx = sbx ? await this.#updateSandbox(sbx, d) : await this.#createSandbox(d, sc);
    if (sbx.metadata?.deletionTimestamp) throw new Error(`sandbox ${d.id} is being deleted`);
    const pod = this.#pod(d.id);
    if (d.state === "Running") {
      await this.#ensurePvcs(sc, sbx);
      if (!pod) await this.#createPod(sc, sbx, d);
      else if (this.#inplacePending(sbx, d)) sbx = await this.#inplace(sc, sbx, pod, d.inplaceUpdate!);
      else if (this.#facts(sbx, d.id).frozen) {
        await this.thaw(d.id);
        await this.#event(sc, sbx, "Normal", EventReason.Resumed, "thawed");
      }
    } else if (d.pauseStrategy === "Stop") {
      if (pod) {
        await this.#deletePod(sc, pod, 5);
        await this.#event(sc, sbx, "Normal", EventReason.Paused, "pod deleted, PVCs kept");
      }
    } else if (pod && !this.#facts(sbx, d.id).frozen) {
      if (this.#runtimeUrl(pod)) {
        await this.freeze(d.id);
        await this.#event(sc, sbx, "Normal", EventReason.Paused, "processes frozen");
      }
    }
    this.#failing.delete(d.id);
    await this.#writeStatus(d.id);
    return this.#observe(d.id)!;
  }

  /** What the inplace-update annotation says once `u` is applied to the pod `podUid` (a pod made
   * again after a Stop pause is built from the template and gets the update again). */
  #inplaceRecord(u: InplaceUpdate, podUid: string | undefined): string {
    return stableJson({ ...u, pod: podUid });
  }

  /** Whether `d` asks for an in-place update the current pod has not had yet. */
  #inplacePending(sbx: SandboxObject, d: KubeDesiredSandbox): boolean {
    const u = d.inplaceUpdate;
    if (!u || (!u.image && !u.cpuCount)) return false;
    return sbx.metadata?.annotations?.[ANNOTATION.inplaceUpdate] !== this.#inplaceRecord(u, this.#pod(d.id)?.metadata?.uid);
  }

  /** Changes the main container's image and CPU without recreating the pod, then records it. */
  async #inplace(sc: NamespaceScope, sbx: SandboxObject, pod: V1Pod, u: InplaceUpdate): Promise<SandboxObject> {
    const name = pod.metadata!.name!;
    const container = sbx.spec.template?.spec?.containers?.[0]?.name ?? "sandbox";
    if (u.image) {
      this.requests++;
      const updated = await this.#core
        .patchNamespacedPod({ name, namespace: sc.namespace, body: { spec: { containers: [{ name: container, image: u.image }] } } }, strategicPatch)
        .catch((err: unknown) => {
          throw new Error(`in-place image change of pod ${name}: ${apiMessage(err)}`);
        });
      sc.pods.remember(updated);
    }
    if (u.cpuCount) {
      const cpu = String(u.cpuCount);
      this.requests++;
      // The resize subresource is the only way to change resources of a running pod; a cluster
      // without in-place resize answers 404 (no subresource) or 422 (feature off): a clear error.
      const updated = await this.#core
        .patchNamespacedPodResize({ name, namespace: sc.namespace, body: { spec: { containers: [{ name: container, resources: { requests: { cpu }, limits: { cpu } } }] } } }, strategicPatch)
        .catch((err: unknown) => {
          throw new Error(`in-place resize of pod ${name}: ${apiMessage(err)}`);
        });
      sc.pods.remember(updated);
    }
    this.requests++;
    const updated = (await this.#custom.patchNamespacedCustomObject(
      { group: GROUP, version: VERSION, namespace: sc.namespace, plural: PLURAL.sandbox, name: sbx.metadata!.name!, body: { metadata: { annotations: { [ANNOTATION.inplaceUpdate]: this.#inplaceRecord(u, pod.metadata?.uid) } } } },
      mergePatch,
    )) as SandboxObject;
    await this.#event(sc, sbx, "Normal", EventReason.InplaceUpdated, `in place: ${[u.image && `image ${u.image}`, u.cpuCount && `cpu ${u.cpuCount}`].filter(Boolean).join(", ")}`);
    return sc.sandboxes.remember(updated);
  }

  /** The namespace a new sandbox goes to: its team's (informers started on first use), else home. */
  async #scopeForNew(d: KubeDesiredSandbox): Promise<NamespaceScope> {
    const ns = d.namespace ?? this.namespace;
    if (!NAMESPACE_PATTERN.test(ns)) throw new TerminalError(ReadyReason.InvalidSpec, `team "${ns}" is not a valid Kubernetes namespace name (lowercase letters, digits and '-', at most 63)`);
    const sc = this.#scope(ns);
    await sc.start();
    return sc;
  }

  #observe(id: string): KubeSandboxObservation | undefined {
    const sbx = this.#sandbox(id);
    const pod = this.#pod(id);
    if (!sbx && !pod) return undefined;
    if (!sbx) {
      return { id, generation: 0, phase: "Failed", level: "kubernetes", createdAt: pod!.metadata?.creationTimestamp?.toString() ?? "", enforced: this.#enforced(), ready: false, message: "pod without a Sandbox (orphan)" };
    }
    const facts = this.#facts(sbx, id);
    const state = sandboxState(facts);
    return {
      id,
      generation: Math.max(Number(sbx.metadata?.annotations?.[ANNOTATION.generation] ?? 0), this.#deferred.get(id)?.generation ?? 0),
      phase: state.driverPhase,
      pauseStrategy: facts.paused ? facts.pauseStrategy : undefined,
      level: "kubernetes",
      createdAt: new Date(String(sbx.metadata?.creationTimestamp ?? this.#now())).toISOString(),
      enforced: this.#enforced(),
      ready: state.ready,
      endpoint: state.driverPhase === "Running" ? this.#runtimeUrl(pod) : undefined,
      reason: state.reason,
      message: state.message || undefined,
    };
  }

  #enforced() {
    return { cpu: true, memory: true, pids: false, network: false };
  }

  async observe(id: string): Promise<KubeSandboxObservation | undefined> {
    return this.#observe(id);
  }

  async list(): Promise<KubeSandboxObservation[]> {
    const ids = new Set<string>();
    for (const o of [...this.#scopes.values()].flatMap((sc) => [...sc.sandboxes.list(), ...sc.pods.list()])) {
      const id = o.metadata?.annotations?.[ANNOTATION.sandboxId] ?? o.metadata?.labels?.[LABEL.sandboxId];
      if (id) ids.add(id);
    }
    return [...ids].map((id) => this.#observe(id)!).filter(Boolean);
  }

  /** Refreshes a Sandbox's status from its pod soon (coalesces bursts of pod events). */
  #scheduleStatus(id: string, delayMs = 20): void {
    if (this.#statusTimers.has(id)) return;
    this.#statusTimers.set(
      id,
      setTimeout(() => {
        this.#statusTimers.delete(id);
        this.#serial(id, () => this.#sync(id)).catch((err: unknown) => {
          this.#opts.log?.(`sync of ${id}: ${(err as Error).message}`);
          this.#scheduleStatus(id, 500);
        });
      }, delayMs),
    );
  }

  /**
   * Runs `fn` after every earlier write of this sandbox has finished. Every status and metadata
   * write goes through here: two patches in flight can land out of order, and an older status
   * (PodStarting, computed before the kubelet's Ready) landing last stays on the Sandbox with no
   * event left to correct it (its SandboxSet then never counts it available).
   */
  #serial<T>(id: string, fn: () => Promise<T>): Promise<T> {
    return this.#writes.run(id, fn);
  }

  /** Writes deferred metadata (claim labels, owner, generation), then the status. */
  async #sync(id: string): Promise<void> {
    const pending = this.#deferred.get(id);
    const sbx = this.#sandbox(id);
    if (pending && sbx) {
      await this.#updateSandbox(sbx, pending);
      if (this.#deferred.get(id) === pending) this.#deferred.delete(id);
    }
    await this.#writeStatus(id);
  }

  /** Writes the Sandbox status when it differs from what is stored, and an Event per new failure reason. */
  async #writeStatus(id: string): Promise<void> {
    const sc = this.#scopeOf(id);
    const sbx = this.#sandbox(id);
    if (!sbx || sbx.metadata?.deletionTimestamp) return;
    const facts = this.#facts(sbx, id);
    const failing = this.#failing.get(id);
    const state = failing ? { ...sandboxState(facts), ready: false, ...failing } : sandboxState(facts);
    const now = new Date(this.#now()).toISOString();
    const status = sandboxStatus(sbx.status, state, facts, sbx.metadata?.generation, now);
    const comparable = (s: SandboxStatus | undefined) => stableJson({ ...s, conditions: s?.conditions?.map((c) => ({ ...c, lastTransitionTime: "" })) });
    if (comparable(sbx.status) !== comparable(status)) {
      this.requests++;
      const updated = await tolerate(
        this.#custom.patchNamespacedCustomObjectStatus(
          { group: GROUP, version: VERSION, namespace: sc.namespace, plural: PLURAL.sandbox, name: sbx.metadata!.name!, body: { status } },
          mergePatch,
        ) as Promise<SandboxObject>,
        [404],
      );
      if (updated) sc.sandboxes.remember(updated);
    }
    if (this.#eventReason.get(id) !== state.reason) {
      this.#eventReason.set(id, state.reason);
      if (state.reason === "Unschedulable") await this.#event(sc, sbx, "Warning", EventReason.FailedScheduling, state.message);
      if (state.reason === "ImagePullFailed") await this.#event(sc, sbx, "Warning", EventReason.ImagePullFailed, state.message);
      if (state.reason === ReadyReason.ReconcileError) await this.#event(sc, sbx, "Warning", EventReason.ReconcileError, state.message);
    }
  }

  async #event(sc: NamespaceScope, sbx: SandboxObject, type: "Normal" | "Warning", reason: string, message: string): Promise<void> {
    const now = new Date(this.#now());
    this.requests++;
    await tolerate(
      this.#core.createNamespacedEvent({
        namespace: sc.namespace,
        body: {
          metadata: { generateName: `${sbx.metadata!.name!.slice(0, 200)}.`, namespace: sc.namespace },
          involvedObject: { apiVersion: API_VERSION, kind: "Sandbox", name: sbx.metadata!.name!, namespace: sc.namespace, uid: sbx.metadata!.uid },
          type,
          reason,
          message,
          source: { component: "sandbox-agent" },
          firstTimestamp: now,
          lastTimestamp: now,
          count: 1,
        },
      }),
      [403, 404, 409],
    ).catch((err) => this.#opts.log?.(`event ${reason} for ${sbx.metadata!.name}: ${(err as Error).message}`));
  }

  view(_id: string): never {
    throw new UnsupportedError("view", "the runtime runs inside each pod; reach it at the observation's endpoint");
  }

  async exec(_id: string, _req: SpawnRequest, _opts?: { timeoutMs?: number; stdin?: string }): Promise<ExecResult> {
    throw new UnsupportedError("exec", "the kubernetes driver runs commands through the pod's agent-runtime (envd process API), not the driver");
  }

  async freeze(id: string): Promise<void> {
    await this.#runtimeCall(id, "/freeze");
    await this.#markFrozen(id, this.#pod(id)?.metadata?.uid ?? null);
  }

  async thaw(id: string): Promise<void> {
    await this.#runtimeCall(id, "/unfreeze");
    await this.#markFrozen(id, null);
  }

  /** Records which pod the runtime froze (an annotation, so a concurrent status write cannot lose it). */
  async #markFrozen(id: string, podUid: string | null): Promise<void> {
    const sc = this.#scopeOf(id);
    const sbx = this.#sandbox(id);
    if (!sbx) throw new SandboxNotFoundError(id);
    this.requests++;
    const updated = (await this.#custom.patchNamespacedCustomObject(
      { group: GROUP, version: VERSION, namespace: sc.namespace, plural: PLURAL.sandbox, name: sbx.metadata!.name!, body: { metadata: { annotations: { [ANNOTATION.frozenPod]: podUid } } } },
      mergePatch,
    )) as SandboxObject;
    sc.sandboxes.remember(updated);
    // Not awaited: freeze/thaw also run inside ensure's chain, which writes the status at its end.
    this.#scheduleStatus(id);
  }

  /**
   * Labels the Sandboxes a SandboxClaim took `agents.kruise.io/claim-name=<claim>` (upstream's
   * selector for a claim's sandboxes); the intent cannot carry it, as it names the claim only by
   * uid. In each sandbox's write chain; one already labelled, or not (yet) here, is skipped.
   */
  async labelClaimed(ids: string[], claimName: string): Promise<void> {
    await Promise.all(
      ids.map((id) =>
        this.#serial(id, async () => {
          const sbx = this.#sandbox(id);
          if (!sbx || sbx.metadata?.deletionTimestamp || sbx.metadata?.labels?.[LABEL.claimName] === claimName) return;
          this.requests++;
          const body = { metadata: { labels: { [LABEL.claimName]: claimName } } };
          const updated = await tolerate(
            this.#custom.patchNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: this.#scopeOf(id).namespace, plural: PLURAL.sandbox, name: sbx.metadata!.name!, body }, mergePatch),
            [404],
          );
          if (updated) this.#scopeOf(id).sandboxes.remember(updated);
        }),
      ),
    );
  }

  async snapshotFs(_id: string): Promise<SnapshotRef> {
    throw new UnsupportedError("snapshotFs", "no checkpoint controller in this cluster; Stop pause keeps PVC data only");
  }

  async restoreFs(_id: string, _snapshot: SnapshotRef): Promise<void> {
    throw new UnsupportedError("restoreFs", "no checkpoint controller in this cluster");
  }

  async deleteSnapshot(_snapshot: SnapshotRef): Promise<void> {
    throw new UnsupportedError("deleteSnapshot", "no checkpoint controller in this cluster");
  }

  async destroy(id: string): Promise<void> {
    const label = idLabel(id);
    const sc = this.#scopeOf(id);
    this.#destroying.add(id);
    for (const pod of sc.pods.forSandbox(label)) await this.#deletePod(sc, pod, 0);
    for (const pvc of sc.pvcs.forSandbox(label)) {
      this.requests++;
      await tolerate(this.#core.deleteNamespacedPersistentVolumeClaim({ name: pvc.metadata!.name!, namespace: sc.namespace }), [404]);
      sc.pvcs.forget(pvc.metadata!.name!);
    }
    for (const sbx of sc.sandboxes.forSandbox(label)) {
      const name = sbx.metadata!.name!;
      this.requests += 2;
      await tolerate(
        this.#custom.patchNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: sc.namespace, plural: PLURAL.sandbox, name, body: { metadata: { finalizers: null } } }, mergePatch),
        [404],
      );
      await tolerate(this.#custom.deleteNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: sc.namespace, plural: PLURAL.sandbox, name }), [404]);
      sc.sandboxes.forget(name);
    }
    this.#tokens.delete(id);
    this.#eventReason.delete(id);
    this.#failing.delete(id);
    this.#deferred.delete(id);
    this.#requested.delete(id);
    this.#destroying.delete(id);
  }
}
