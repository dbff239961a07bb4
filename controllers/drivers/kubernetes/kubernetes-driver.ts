// The kubernetes driver: each sandbox is a Sandbox object (agents.kruise.io) in one namespace,
// owning a Pod built from its SandboxSet's template (agent-runtime injected) and PVCs from the
// volumeClaimTemplates. Reads come from informers; writes go to the API server and are remembered
// until the watch catches up. Objects are found by the sandbox-id label, never by name.
//
//   Running        Sandbox + PVCs + Pod; status mirrors the pod (Ready, IP, scheduling, pulls)
//   Paused, Stop   the Pod is deleted, the PVCs and the Sandbox stay; Running recreates the Pod
//   Paused, Freeze the Pod stays; the runtime freezes every process (POST /freeze)
//   destroy        Pod, PVCs, then the Sandbox (its finalizer is ours)
//
// This file wires the parts: scopes.ts (namespaces, informers), sandbox-object.ts (the Sandbox),
// pod-writer.ts (Pod, PVCs, in-place update, runtime calls), status-writer.ts (status,
// conditions, Events), user-requests.ts (kubectl edits → edge requests).
import { randomBytes } from "node:crypto";
import { NetworkingV1Api, VersionApi, type KubeConfig, type V1PersistentVolumeClaim, type V1Pod } from "@kubernetes/client-node";
import type { TrafficPolicyEntry } from "../../../schema/api/traffic-policy.ts";
import type { SecurityProfileEntry } from "../../../schema/api/security-profile.ts";
import { TrafficPolicySet } from "../../traffic/governed.ts";
import { PolicySetStore, PROFILES } from "./policy-store.ts";
import { PodAuditCollector } from "./pod-audit.ts";
import type { NetworkAuditRecord } from "../../../schema/api/network-audit.ts";
import { hasTrafficProxy, TrafficObjects } from "./traffic-objects.ts";
import { DEFAULT_CLUSTER_CIDRS, DEFAULT_CLUSTER_DNS, nativeSidecarsFor, PolicyTooLargeError, TRAFFIC_CONTAINER, trafficConfigMapName, unsafePodSpec, UnsafePodSpecError } from "./traffic-pod.ts";
import { EventReason, ReadyReason } from "../../../schema/crd/conditions.ts";
import { ANNOTATION, LABEL } from "../../../schema/crd/labels.ts";
import { INJECTION_COMPONENTS, POD_POLICY_KEY } from "../../../schema/crd/injection.ts";
import type { SpawnRequest } from "../../runtime/sandbox-view.ts";
import { KeyedSerial } from "../../../lib/keyed-serial.ts";
import { isTerminal, SandboxNotFoundError, TerminalError, UnsupportedError, type DesiredSandbox, type Driver, type DriverCapabilities, type ExecResult, type SnapshotRef } from "../driver.ts";
import { apiMessage, stableJson } from "./kube-api.ts";
import type { ObjectCache } from "./object-cache.ts";
import { NAMESPACE_PATTERN, type NamespaceScope } from "./namespace-scope.ts";
import { KUBERNETES_FLAGS } from "./flags.ts";
import { KUBERNETES_CAPABILITIES, type KubeDesiredSandbox, type KubernetesDriverOptions, type KubeSandboxObservation, type SandboxObject, type SandboxRequest, type SandboxSetObject } from "./objects.ts";
import { imageTemplate, runtimeUrl, templateHash } from "./pod-spec.ts";
import { podCost, unsizedRuntimeProblems } from "./pod-resources.ts";
import { inplaceImageProblem } from "./inplace-image.ts";
import { InjectionConfigSource } from "./injection-config.ts";
import { PodWriter } from "./pod-writer.ts";
import { poolConnections } from "./pooled-connections.ts";
import { SandboxObjects } from "./sandbox-object.ts";
import { Scopes } from "./scopes.ts";
import { StatusWriter, StatusWriteTimeout } from "./status-writer.ts";
import { CsiMounter } from "./csi-mounts.ts";
import { runtimeTokenKey } from "./runtime-token.ts";
import { CheckpointSnapshots } from "./checkpoint/snapshots.ts";
import type { CsiMountConfig } from "../../../schema/crd/csi-mount.ts";
import { UserRequests } from "./user-requests.ts";
import { ClaimWrites } from "./claim-writes.ts";

export { idLabel, sandboxName } from "./objects.ts";

/** Status recomputes in flight at once in a namespace's first pass (#recomputeAll). */
const STATUS_PASS_CONCURRENCY = 8;

const lowerKeys = (values: Record<string, string>) => new Map(Object.entries(values).map(([k, v]) => [k.toLowerCase(), v]));
export type { KubeDesiredSandbox, KubernetesDriverOptions, KubeSandboxObservation, SandboxObject, SandboxRequest, SandboxSetObject } from "./objects.ts";

/** Why: no Checkpoint controller yet (Stop pause keeps PVC data only). */

export class KubernetesDriver implements Driver {
  readonly name = "kubernetes";
  readonly capabilities: DriverCapabilities = KUBERNETES_CAPABILITIES;

  /** The namespace of sandboxes whose intent names no team (and of the SandboxSet sync). */
  readonly namespace: string;
  /** The cluster it talks to (the CRD syncs reuse it). */
  readonly kubeConfig: KubeConfig;
  /** The injection config in force (the agent namespace's ConfigMaps) and whether it is valid. */
  readonly injection: InjectionConfigSource;
  /** Counts API requests this driver sent (writes and status patches; informer traffic excluded). */
  requests = 0;

  readonly #opts: KubernetesDriverOptions;
  readonly #ctx: Scopes;
  readonly #status: StatusWriter;
  readonly #pods: PodWriter;
  readonly #sandboxes: SandboxObjects;
  readonly #requests: UserRequests;
  readonly #mounts: CsiMounter;
  readonly #checkpoints: CheckpointSnapshots;
  readonly #statusTimers = new Map<string, NodeJS.Timeout>();
  /** First-seen status passes running (#recomputeAll), for idle(). */
  readonly #passes = new Set<Promise<void>>();
  #trafficResync: NodeJS.Timeout | undefined;
  #stopped = false;
  /** Each sandbox's chain of writes (see #serial). */
  readonly #writes = new KeyedSerial();
  /** Metadata-only changes (a claim, a new generation) not yet written: the claim's critical path
   * is the runtime's re-init, so the Sandbox and pod relabel trail it (a claim's until claims
   * pause: claim-writes.ts). */
  readonly #deferred = new Map<string, KubeDesiredSandbox>();
  /** Claims whose deferred write waits until claims pause (claim-writes.ts). */
  readonly #claimWrites = new ClaimWrites((id) => this.#scheduleStatus(id, 0));
  /** TrafficPolicies in force (the edge's set), the pods' egress objects, and each sandbox's last
   * desired state (what a policy change is judged against). */
  readonly #policies = new TrafficPolicySet();
  readonly #traffic: TrafficObjects;
  #audit: PodAuditCollector | undefined;
  readonly #desired = new Map<string, KubeDesiredSandbox>();
  /** The UnsafePodSpec warning last posted per sandbox (#warnUnsafe). */
  readonly #warned = new Map<string, string>();
  /** Running sandboxes whose pod kept an older policy: the sets in force did not fit its objects
   * (PolicyTooLarge). Their sidecars do not apply what the sets added (profileEnforcement). */
  readonly #tooLarge = new Set<string>();
  /** Whether the edge's policy set arrived since the start, or the one it sent last was loaded. */
  #policiesKnown = false;
  /** Whether the edge's SecurityProfiles arrived since the start: until then a running pod's file
   * is left as it is (rewritten without them, it would drop what its profiles enforce). */
  #profilesKnown = false;
  /** Secret values from the edge, in memory only (as on the local driver): per sandbox (its
   * `network.rules`) and per team (its profiles' tokenTransformations). Each pod's sidecar gets
   * the ones its file names in its Secret; no other container of the pod mounts that Secret. */
  readonly #sandboxSecrets = new Map<string, ReadonlyMap<string, string>>();
  #teamSecrets: Map<string, ReadonlyMap<string, string>> | undefined;
  readonly #policyStore: PolicySetStore;
  readonly #profileStore: PolicySetStore<SecurityProfileEntry>;

  constructor(opts: KubernetesDriverOptions) {
    this.#opts = opts;
    this.namespace = opts.namespace;
    this.kubeConfig = opts.kubeConfig;
    poolConnections(opts.kubeConfig);
    this.#requests = new UserRequests(
      opts.onRequest,
      (m) => opts.log?.(m),
      // Slim objects keep no namespace: the watch that delivered it names it.
      (ns, o, reason, message) => void this.#status.event(this.#ctx.scope(ns), o, "Warning", reason, message),
      (id) => this.#placedIn(id),
    );
    this.#ctx = new Scopes({
      kubeConfig: opts.kubeConfig,
      namespace: opts.namespace,
      count: (n) => (this.requests += n),
      now: opts.now ?? Date.now,
      log: (msg) => opts.log?.(msg),
      onPodChange: (id, sc) => {
        // Before its namespace's first lists are all in, the sandbox's status waits for onSynced.
        if (sc.synced) this.#scheduleStatus(id);
        opts.onChange?.(id);
      },
      placedIn: (id) => this.#placedIn(id),
      onSandbox: (o, ns, old) => {
        if (!this.#requests.seen(o, ns)) return;
        // A status this agent did not write (an earlier agent's write landing late, a user's
        // edit), and every Sandbox seen first (the pod's own event may have come before it): the
        // status is computed again and written if it differs. Nothing else would correct it: the
        // status is only written on pod changes and ensures, and a warm member has neither for long.
        // Those of the namespace's first list are computed once every list is in (onSynced).
        const id = o.metadata?.annotations?.[ANNOTATION.sandboxId];
        if (id && this.#ctx.scope(ns).synced && (!old || (!this.#status.wrote(id, o) && stableJson(old.status) !== stableJson(o.status)))) this.#scheduleStatus(id);
      },
      onSynced: (sc) => {
        const pass = this.#recomputeAll(sc)
          .catch((err: unknown) => opts.log?.(`status pass of ${sc.namespace}: ${(err as Error).message}`))
          .finally(() => this.#passes.delete(pass));
        this.#passes.add(pass);
      },
    });
    this.#status = new StatusWriter(this.#ctx);
    this.injection = new InjectionConfigSource({ kubeConfig: opts.kubeConfig, core: this.#ctx.core, namespace: opts.namespace, log: (msg) => opts.log?.(msg), count: () => this.requests++ });
    this.#pods = new PodWriter(this.#ctx, this.#status, opts.runtimeImage, () => this.injection.current(), opts.interpreterImage ?? KUBERNETES_FLAGS["interpreter-image"].default, {
      key: runtimeTokenKey(opts.runtimeTokenSecret ?? randomBytes(32).toString("base64url")),
      agentNamespace: opts.agentNamespace ?? process.env.POD_NAMESPACE ?? "sandbox-system",
      net: opts.kubeConfig.makeApiClient(NetworkingV1Api),
    }, opts.podRuntimeTracing);
    this.#sandboxes = new SandboxObjects(this.#ctx, this.#pods);
    this.#mounts = new CsiMounter(this.#ctx, {
      withToken: (id, call) => this.#pods.withToken(id, this.#desired.get(id)?.accessToken, call),
      markMounted: (id, podUid) =>
        this.#serial(id, async () => {
          const sbx = this.#ctx.sandbox(id);
          if (sbx) await this.#sandboxes.patchMetadata(id, sbx, { annotations: { [ANNOTATION.csiMountedPod]: podUid } }, true);
        }),
      changed: (id, failure) => {
        if (failure) {
          void this.#serial(id, async () => {
            const sbx = this.#ctx.sandbox(id);
            if (sbx) await this.#status.event(this.#ctx.scopeOf(id), sbx, "Warning", EventReason.VolumeMountFailed, failure);
          });
        }
        this.#scheduleStatus(id);
      },
    });
    this.#status.more = (id, conditions, now) => this.#mounts.withCondition(id, conditions, now);
    this.#checkpoints = new CheckpointSnapshots(this.#ctx, { waitMs: opts.checkpointWaitMs });
    this.#traffic = new TrafficObjects(this.#ctx, opts.kubeConfig.makeApiClient(NetworkingV1Api), this.#policies, { clusterCidrs: opts.clusterCidrs ?? DEFAULT_CLUSTER_CIDRS, dns: opts.clusterDns ?? DEFAULT_CLUSTER_DNS });
    this.#traffic.setSecretSource((d) => this.#secretValues(d));
    this.#policyStore = new PolicySetStore(this.#ctx.core, opts.namespace, () => this.requests++);
    this.#profileStore = new PolicySetStore(this.#ctx.core, opts.namespace, () => this.requests++, PROFILES);
  }

  /** The home namespace's informers (the SandboxSet sync and tests read them). */
  get pods(): ObjectCache<V1Pod> {
    return this.#ctx.home.pods;
  }
  get pvcs(): ObjectCache<V1PersistentVolumeClaim> {
    return this.#ctx.home.pvcs;
  }
  get sandboxes(): ObjectCache<SandboxObject> {
    return this.#ctx.home.sandboxes;
  }
  get sandboxSets(): ObjectCache<SandboxSetObject> {
    return this.#ctx.home.sandboxSets;
  }

  /** Every image the platform runs in sandbox pods: the runtime's (the agent's own image as
   * deployed, k8s/deployment.yaml), the interpreter's and the injection config's components'. A
   * Commit may push to none of their repositories (commit/machine.ts). */
  platformImages(): string[] {
    const injected = INJECTION_COMPONENTS.map((c) => this.injection.current()[c]?.image);
    return [this.#opts.runtimeImage, this.#opts.interpreterImage ?? KUBERNETES_FLAGS["interpreter-image"].default, ...injected].filter((x): x is string => !!x);
  }

  /** Starts the informers of the home namespace, of `watchNamespaces` (with "all": of every
   * namespace holding a Sandbox or a sandbox pod) and waits for their first list. Any other team's
   * namespace is watched from the first intent naming the team. */
  async start(): Promise<void> {
    const w = this.#opts.watchNamespaces;
    const namespaces = new Set([this.namespace, ...(w === "all" ? await this.#ctx.namespacesWithSandboxes() : (w ?? []))]);
    // Without the ConfigMap read (RBAC of an older install) pods get the built-in agent-runtime.
    const injection = this.injection.start().catch((err: unknown) => this.#opts.log?.(`injection config: ${(err as Error).message}; using the built-in`));
    await Promise.all([...[...namespaces].map((ns) => this.watchNamespace(ns)), injection, this.#loadPolicies(), this.#detectNativeSidecars()]);
    this.#startTrafficResync();
  }

  /** Whether new pods get the traffic-proxy as a native sidecar: as configured, or from the API
   * server's version. Unknown (the request failed): a regular container, which every cluster runs. */
  async #detectNativeSidecars(): Promise<void> {
    let native = this.#opts.nativeSidecars;
    if (native === undefined) {
      try {
        this.requests++;
        native = nativeSidecarsFor(await this.kubeConfig.makeApiClient(VersionApi).getCode());
      } catch (err) {
        this.#opts.log?.(`API server version: ${(err as Error).message}; the traffic-proxy is a regular container`);
        native = false;
      }
    }
    this.#pods.nativeSidecar = native;
  }

  /** Puts back egress objects a tenant edited or deleted (traffic-objects.ts); one round at a time. */
  #startTrafficResync(): void {
    let running = false;
    this.#trafficResync = setInterval(() => {
      if (running || this.#stopped) return;
      running = true;
      void this.#traffic.resync(this.#opts.log).finally(() => (running = false));
    }, this.#opts.trafficResyncMs ?? 30_000);
    this.#trafficResync.unref();
  }

  /** The policy and profile sets the edge sent last (policy-store.ts), unless newer ones came
   * meanwhile. */
  async #loadPolicies(): Promise<void> {
    const load = async <T>(what: string, store: PolicySetStore<T>, known: () => boolean, use: (stored: T[]) => void) => {
      try {
        const stored = await store.load();
        if (stored && !known()) use(stored);
      } catch (err) {
        this.#opts.log?.(`stored ${what}: ${(err as Error).message}; waiting for the edge's`);
      }
    };
    await load("traffic policies", this.#policyStore, () => this.#policiesKnown, (s) => {
      this.#policies.replace(s);
      this.#policiesKnown = true;
    });
    await load("security profiles", this.#profileStore, () => this.#profilesKnown, (s) => {
      this.#traffic.setProfiles(s);
      this.#profilesKnown = true;
    });
  }

  /** Starts watching a namespace (once) and resolves after its first list; its SandboxSets are then
   * in the returned scope (the CRD link reads them). */
  watchNamespace(ns: string): Promise<NamespaceScope> {
    return this.#ctx.watch(ns);
  }

  /** A Warning Event about a SandboxSet of `sc` (the CRD link's), written as the driver's own
   * Events are (status-writer.ts: counted, posted once per `key`). */
  sandboxSetEvent(sc: NamespaceScope, set: SandboxSetObject, reason: string, message: string, key: string): Promise<void> {
    return this.#status.setEvent(sc, set, reason, message, key);
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    this.#claimWrites.stop();
    for (const t of this.#statusTimers.values()) clearTimeout(t);
    this.#statusTimers.clear();
    clearInterval(this.#trafficResync);
    this.#audit?.stop();
    this.#mounts.stop();
    await Promise.all([...this.#ctx.all().map((sc) => sc.stop()), this.injection.stop()]);
  }

  /**
   * Resolves once no status recompute is scheduled or running and no write of a sandbox is in
   * flight: whatever the driver was going to write about what it has seen so far has landed. What
   * a test waits on before saying what the driver did not write (rather than a fixed time); after
   * stop(), it waits out the writes already sent.
   */
  async idle(): Promise<void> {
    while (this.#statusTimers.size > 0 || this.#claimWrites.size > 0 || this.#passes.size > 0 || this.#writes.size > 0) {
      // A scheduled recompute (it coalesces bursts) or a held claim write is a timer: polled, then
      // waited for as a write.
      const timers = this.#statusTimers.size > 0 || this.#claimWrites.size > 0 ? new Promise((r) => setTimeout(r, 20)) : undefined;
      await Promise.all([...this.#passes, this.#writes.idle(), timers]);
    }
  }

  async ensure(desired: DesiredSandbox): Promise<KubeSandboxObservation> {
    let d = desired as KubeDesiredSandbox;
    const ctx = this.#ctx;
    // The team's objects are only seen once its namespace is watched.
    if (d.namespace && d.namespace !== this.namespace && NAMESPACE_PATTERN.test(d.namespace)) await ctx.scope(d.namespace).start();
    const sbx = ctx.sandbox(d.id);
    // A new sandbox from a snapshot names the checkpoint its engine restores (one that exists
    // was made with it, and keeps it whatever became of the snapshot since).
    if (d.restoreFrom && !sbx) d = { ...d, restoreCheckpointId: await this.#checkpoints.restoreId(d.namespace ?? this.namespace, d.restoreFrom.id) };
    this.#desired.set(d.id, d);
    const live = sbx && ctx.pod(d.id);
    if (sbx && live && d.state === "Running" && !this.#needsProxyPod(d, live) && !sbx.spec.paused && !live.metadata?.deletionTimestamp && !this.#status.facts(sbx, d.id).frozen && !this.#pods.inplacePending(sbx, d) && !this.#sandboxes.recreatePending(sbx, d) && !this.#sandboxes.restorePending(sbx)) {
      // Running and staying so: only labels, owner and annotations can differ; write them behind.
      const claim = d.claimed && sbx.metadata?.labels?.[LABEL.claimed] === "false";
      this.#deferred.set(d.id, claim ? { ...d, claimedAt: this.#deferred.get(d.id)?.claimedAt ?? ctx.now() } : d);
      this.#status.succeeded(d.id);
      // A claim's relabel waits while claims keep coming (claim-writes.ts), unless its pod has a
      // traffic-proxy: the same write hands the claim's rules to it.
      if (claim && !hasTrafficProxy(live)) this.#claimWrites.claimed(d.id);
      else this.#scheduleStatus(d.id);
      return this.#status.observe(d.id, this.#deferred.get(d.id)?.generation)!;
    }
    this.#deferred.delete(d.id);
    this.#claimWrites.forget(d.id);
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
    this.#status.failing(id, { reason, message });
    await this.#status.write(id).catch(() => {});
    if (isTerminal(err)) {
      // A warm member refused: its SandboxSet says so (pool-status.ts ReplicaFailure); the edge
      // deletes the member and backs off before the next.
      const labels = this.#ctx.sandbox(id)?.metadata?.labels;
      const [pool, revision] = [labels?.[LABEL.pool], labels?.[LABEL.templateHash]];
      if (pool && revision && labels?.[LABEL.claimed] === "false") this.#ctx.scopeOf(id).pools.refused(pool, { revision, reason, message, at: new Date(this.#ctx.now()).toISOString() });
      throw err;
    }
    throw new Error(message, { cause: err });
  }

  /** The slow half of ensure: creates, pod changes and the status write, in the sandbox's chain. */
  async #converge(d: KubeDesiredSandbox): Promise<KubeSandboxObservation> {
    const ctx = this.#ctx;
    let sbx = ctx.sandbox(d.id);
    // A sandbox stays where it was made; a new one goes to its team's namespace.
    const sc = sbx ? ctx.scopeOf(d.id) : await this.#scopeForNew(d);
    sbx = sbx ? await this.#sandboxes.update(sbx, d) : await this.#sandboxes.create(d, sc);
    if (sbx.metadata?.deletionTimestamp) throw new Error(`sandbox ${d.id} is being deleted`);
    let pod = ctx.pod(d.id);
    if (this.#sandboxes.recreatePending(sbx, d)) {
      // Recreate (update ops): the old pod goes first, then the template changes, so a restart
      // between the two finds the revision still pending and finishes the job.
      // CheckpointRestore: the next pod names the snapshot's checkpoint for the cluster's
      // checkpoint engine to restore (what a Checkpoint allows: the agent cannot copy files into
      // a pod itself). The retemplate marks it pending on the Sandbox, and the mark stays until a
      // pod naming it exists: a failure, a restart or a Stop pause before that cannot drop it.
      if (d.restoreFs) d = { ...d, restoreCheckpointId: await this.#checkpoints.restoreId(sc.namespace, d.restoreFs.id) };
      if (pod) await this.#pods.delete(sc, pod, 0);
      sbx = await this.#sandboxes.retemplate(sc, sbx, d);
      const restore = d.restoreCheckpointId ? `; the new pod names checkpoint ${d.restoreCheckpointId} for the checkpoint engine to restore` : "";
      await this.#status.event(sc, sbx, "Normal", EventReason.Recreated, `template revision ${d.revision}: ${pod ? `pod ${pod.metadata!.name} replaced` : "the next pod is new"}, PVCs kept${restore}`);
      pod = undefined;
    }
    const frozen = () => this.#status.facts(sbx, d.id).frozen;
    if (d.state === "Running") {
      const traffic = await this.#trafficFor(sc, sbx, d, pod);
      if (pod && traffic?.governed && !hasTrafficProxy(pod, true)) {
        // Governed now, and a pod cannot gain containers (nor an open one tighten at once): its
        // replacement carries the proxy with the policy from its first packet.
        await this.#pods.delete(sc, pod, 0);
        await this.#status.event(sc, sbx, "Normal", EventReason.Recreated, `egress policy: pod ${pod.metadata!.name} replaced by one with the traffic-proxy`);
        pod = undefined;
      }
      // A pending restore is done once a pod naming it exists (one made before a restart counts).
      const restoring = this.#sandboxes.restorePending(sbx);
      if (restoring && pod) sbx = await this.#sandboxes.restoreDone(d.id, sbx, pod);
      if (!pod) {
        // The pending restore is read back from the Sandbox, which a kubectl user may annotate.
        if (restoring) await this.#checkpoints.checkRestore(sc.namespace, restoring);
        // After #trafficFor judged the template, its claims included: a pod that exists had its
        // PVCs when it was made.
        await this.#pods.ensurePvcs(sc, sbx);
        if (traffic) await this.#traffic.newPodSecret(sc, sbx, d);
        await this.#pods.create(sc, sbx, restoring ? { ...d, restoreCheckpointId: restoring } : d, traffic);
        const made = restoring && ctx.pod(d.id);
        if (made) sbx = await this.#sandboxes.restoreDone(d.id, sbx, made);
      } else if (this.#pods.inplacePending(sbx, d)) {
        // The tenant names the image (E2B metadata, a claim): only the operator's repositories.
        const image = d.inplaceUpdate!.image;
        const refused = image && inplaceImageProblem(image, this.injection.current()[POD_POLICY_KEY]?.inplaceImages ?? []);
        if (refused) {
          await this.#status.event(sc, sbx, "Warning", EventReason.InplaceImageRefused, refused);
          throw new TerminalError(ReadyReason.InvalidSpec, `sandbox ${d.id}: ${refused}`);
        }
        sbx = await this.#pods.inplace(sc, sbx, pod, d.inplaceUpdate!);
      }
      else if (frozen()) {
        await this.thaw(d.id);
        await this.#status.event(sc, sbx, "Normal", EventReason.Resumed, "thawed");
      }
    } else if (d.pauseStrategy === "Stop") {
      if (pod) {
        await this.#pods.delete(sc, pod, 5);
        await this.#status.event(sc, sbx, "Normal", EventReason.Paused, "pod deleted, PVCs kept");
      }
    } else if (pod && !frozen()) {
      if (runtimeUrl(pod)) {
        await this.freeze(d.id);
        await this.#status.event(sc, sbx, "Normal", EventReason.Paused, "processes frozen");
      }
    }
    this.#status.succeeded(d.id);
    // The pod's work is done: a status PATCH the API server does not answer in time is written
    // again by the status scheduler, not a reason to fail (and redo) the converge.
    await this.#status.write(d.id).catch((err: unknown) => {
      if (!(err instanceof StatusWriteTimeout)) throw err;
      this.#opts.log?.(err.message);
      this.#scheduleStatus(d.id, 500);
    });
    return this.#status.observe(d.id, this.#deferred.get(d.id)?.generation)!;
  }

  /** A governed sandbox whose pod was not built governed (no proxy, or one started open: a warm
   * pod claimed with rules, a policy that selects it now). */
  #needsProxyPod(d: KubeDesiredSandbox, pod: V1Pod): boolean {
    return !hasTrafficProxy(pod, true) && this.#traffic.policy(this.#ctx.scopeOf(d.id), d) !== null;
  }

  /** The pod's egress objects, written, when it gets the traffic-proxy: while something governs
   * the sandbox, or when its template lists traffic-proxy (warm pods ready for rules at claim).
   * What the cluster and the template allow is judged for every pod about to be made, governed
   * or not (unsafePodSpec): none yet, or one to replace (governed now, not built governed).
   * Governed without a traffic-proxy image in the injection config, or a template the judge
   * refuses: refused, never run (the pod to replace is deleted). A pod that exists and is not
   * replaced is never judged again: an older agent built pods of such templates with the fields
   * dropped, and its proxy governs them; failing them on an unrelated ensure (a thaw, an in-place
   * update at claim) after an upgrade would end running sandboxes. Their next pod is judged. */
  async #trafficFor(sc: NamespaceScope, sbx: SandboxObject, d: KubeDesiredSandbox, pod: V1Pod | undefined): Promise<{ configMap: string; governed: boolean } | undefined> {
    const governed = this.#traffic.policy(sc, d) !== null;
    const listed = (sbx.spec.runtimes ?? []).some((r) => r.name === "traffic-proxy");
    const making = !pod || (governed && !hasTrafficProxy(pod, true));
    const injection = this.injection.current();
    if (!injection["traffic-proxy"]?.image && governed) {
      if (making) {
        let message = `egress rules or a TrafficPolicy govern sandbox ${d.id}, but the injection config names no traffic-proxy image: nothing in its pod could enforce them`;
        // A pod made before a policy selected it would stay ungoverned: it goes (as #refuseUnsafe).
        if (pod) {
          message += await this.#deleteUngoverned(sc, pod);
          await this.#status.event(sc, sbx, "Warning", EventReason.PodDeleted, message);
        }
        throw new TerminalError(ReadyReason.InvalidSpec, message);
      }
    }
    const proxied = governed || (listed && injection["traffic-proxy"]?.image !== undefined);
    if (making || proxied) {
      const template = sbx.spec.template ?? imageTemplate(d.template);
      const unsafe = [
        ...unsafePodSpec(template.spec ?? { containers: [] }, {
          proxied,
          allow: injection[POD_POLICY_KEY]?.allow,
          tolerationKeys: injection[POD_POLICY_KEY]?.tolerationKeys,
          nodeSelectorKeys: injection[POD_POLICY_KEY]?.nodeSelectorKeys,
          resourceKeys: injection[POD_POLICY_KEY]?.resourceKeys,
          annotations: template.metadata?.annotations,
          volumeClaimTemplates: sbx.spec.volumeClaimTemplates,
        }),
        // CPU and memory the quota cannot count (pod-resources.ts): the SandboxSet sync does not
        // send such a template to the edge, so its pods would run on an older, smaller count (as
        // would a Sandbox whose `spec.template` was edited).
        ...podCost(template.spec ?? { containers: [] }).problems,
        ...unsizedRuntimeProblems(template.spec ?? { containers: [] }, injection["agent-runtime"]?.resources),
      ];
      if (unsafe.length) {
        if (making) await this.#refuseUnsafe(sc, sbx, d, pod, proxied ? (governed ? "egress rules, a TrafficPolicy or a SecurityProfile govern it" : "its template lists traffic-proxy") : undefined, unsafe);
        await this.#warnUnsafe(sc, sbx, d, pod!, unsafe);
      }
    }
    if (!proxied) return undefined;
    // Until the edge's set arrives (an agent restart), a running pod's policy is left as it is:
    // an empty set would open what a TrafficPolicy closed.
    if (pod && hasTrafficProxy(pod) && !(this.#policiesKnown && this.#profilesKnown)) return { configMap: trafficConfigMapName(sbx.metadata!.name!), governed };
    return { configMap: await this.#traffic.sync(sc, sbx, d), governed };
  }

  /** A sandbox whose template the judge refuses (unsafePodSpec): refused (terminal), with an
   * Event on the Sandbox and one (per cause) on its SandboxSet; its pod is not made. `proxied`:
   * why the pod would carry the traffic-proxy (the message says the proxy cannot govern it), or
   * undefined for a pod without it. `pod` is one to replace (it runs without a governing proxy,
   * made before a policy selected it): it is deleted, as it would stay ungoverned. */
  async #refuseUnsafe(sc: NamespaceScope, sbx: SandboxObject, d: KubeDesiredSandbox, pod: V1Pod | undefined, proxied: string | undefined, unsafe: string[]): Promise<never> {
    let message = proxied ? `the traffic-proxy cannot govern sandbox ${d.id} (${proxied}): its template asks for ${unsafe.join("; ")}` : `sandbox ${d.id}'s pod is not made: its template asks for what no sandbox pod may have: ${unsafe.join("; ")}`;
    if (pod) message += await this.#deleteUngoverned(sc, pod);
    await this.#status.event(sc, sbx, "Warning", EventReason.UnsafePodSpec, message);
    const poolMessage = proxied ? `its members cannot be governed by the traffic-proxy: the template asks for ${unsafe.join("; ")}` : `its members' pods are not made: the template asks for ${unsafe.join("; ")}`;
    await this.#status.poolEvent(sc, sbx, EventReason.UnsafePodSpec, poolMessage, `unsafe-${templateHash(unsafe)}`);
    throw new UnsafePodSpecError(ReadyReason.UnsafePodSpec, message);
  }

  /** Deletes a pod that runs without a governing proxy and whose replacement is refused, rather
   * than leave it running ungoverned; what the refusal's message adds about it. */
  async #deleteUngoverned(sc: NamespaceScope, pod: V1Pod): Promise<string> {
    await this.#pods.delete(sc, pod, 0);
    return `; its pod ${pod.metadata!.name} was deleted rather than left running ungoverned`;
  }

  /** A pod that stays although its template would now be refused (made by an older agent, which
   * dropped those fields): a Warning Event, once per pod and cause (a named Event; the agent
   * remembers it posted it, so later ensures send nothing). */
  async #warnUnsafe(sc: NamespaceScope, sbx: SandboxObject, d: KubeDesiredSandbox, pod: V1Pod, unsafe: string[]): Promise<void> {
    const key = `unsafe-${templateHash([pod.metadata?.uid, unsafe])}`;
    if (this.#warned.get(d.id) === key) return;
    const message = `its template asks for ${unsafe.join("; ")}: a new pod of it would be refused (UnsafePodSpec). Pod ${pod.metadata!.name} was made before (without those fields) and keeps running; its next pod (a resume after a Stop pause, a recreate) is refused unless the template changes`;
    await this.#status.event(sc, sbx, "Warning", EventReason.UnsafePodSpec, message, key);
    this.#warned.set(d.id, key);
  }

  /** Replaces the TrafficPolicies in force: pods with a proxy get their new policy (the sidecar
   * re-reads it); a sandbox governed now whose pod has none is requeued, and its ensure replaces it. */
  async setTrafficPolicies(policies: TrafficPolicyEntry[]): Promise<void> {
    this.#policies.replace(policies);
    this.#policiesKnown = true;
    await this.#policyStore.save(policies).catch((err: unknown) => this.#opts.log?.(`traffic policies not stored: ${(err as Error).message}`));
    await this.#refreshPods("traffic policies");
  }

  /** Replaces the SecurityProfiles in force: the sidecar of each pod with a proxy gets those that
   * select its sandbox in its file (its L7 handler enforces them); a sandbox a profile selects
   * now whose pod has no proxy is requeued, and its ensure replaces the pod. */
  async setSecurityProfiles(profiles: SecurityProfileEntry[]): Promise<void> {
    this.#traffic.setProfiles(profiles);
    this.#profilesKnown = true;
    await this.#profileStore.save(profiles).catch((err: unknown) => this.#opts.log?.(`security profiles not stored: ${(err as Error).message}`));
    await this.#refreshPods("security profiles");
  }

  /** How many running pods `ref` (a team's profile, or with namespace null a global one)
   * selects, and in how many the traffic-proxy container is ready (its readiness probe answers
   * once every listener is up): what the profile's Programmed condition says. */
  profileEnforcement(ref: { namespace: string | null; name: string }): { selected: number; ready: number } {
    let selected = 0;
    let ready = 0;
    for (const d of this.#desired.values()) {
      const pod = this.#ctx.pod(d.id);
      if (d.state !== "Running" || !pod || pod.metadata?.deletionTimestamp) continue;
      const file = this.#traffic.policy(this.#ctx.scopeOf(d.id), d);
      if (!file?.securityProfiles?.some((p) => p.team === ref.namespace && p.name === ref.name)) continue;
      selected++;
      // A native sidecar's status is among the init containers'.
      const statuses = [...(pod.status?.containerStatuses ?? []), ...(pod.status?.initContainerStatuses ?? [])];
      // A pod that kept an older policy (too large) does not apply the profile, ready or not.
      if (hasTrafficProxy(pod, true) && !this.#tooLarge.has(d.id) && statuses.some((c) => c.name === TRAFFIC_CONTAINER && c.ready)) ready++;
    }
    return { selected, ready };
  }

  /** The sidecars' audit records (pod-audit.ts) go to `sink` from now on: each inspected pod's
   * sidecar is pulled every couple of seconds while the driver runs. */
  setNetworkAudit(sink: (record: NetworkAuditRecord) => void): void {
    this.#audit?.stop();
    this.#audit = new PodAuditCollector({ sandboxes: () => this.#traffic.inspected(), targetOf: (id) => this.#traffic.auditTarget(id), sink, log: (line) => this.#opts.log?.(line) });
    if (!this.#stopped) this.#audit.start();
  }

  setSandboxSecrets(id: string, values: Record<string, string>): void {
    this.#sandboxSecrets.set(id, lowerKeys(values));
  }

  setProfileSecrets(byTeam: Record<string, Record<string, string>>): void {
    this.#teamSecrets = new Map(Object.entries(byTeam).map(([team, values]) => [team, lowerKeys(values)]));
  }

  /** A sandbox's secret values (its team's, then its own), or undefined until the edge sent them
   * since this start: a pod's Secret is never emptied for lack of them. */
  #secretValues(d: KubeDesiredSandbox): ReadonlyMap<string, string> | undefined {
    const own = this.#sandboxSecrets.get(d.id);
    if (!this.#teamSecrets || (!own && Object.keys(d.networkRules ?? {}).length)) return undefined;
    return new Map([...(this.#teamSecrets.get(d.namespace ?? this.namespace) ?? []), ...(own ?? [])]);
  }

  /** Every running pod's egress objects written again for the sets in force (see the setters). */
  async #refreshPods(what: string): Promise<void> {
    if (!this.#policiesKnown || !this.#profilesKnown) return;
    await Promise.all(
      [...this.#desired.values()].map((d) =>
        this.#serial(d.id, async () => {
          const sbx = this.#ctx.sandbox(d.id);
          const pod = this.#ctx.pod(d.id);
          if (!sbx || !pod || pod.metadata?.deletionTimestamp || d.state !== "Running") return;
          const sc = this.#ctx.scopeOf(d.id);
          try {
            if (hasTrafficProxy(pod)) {
              await this.#traffic.sync(sc, sbx, d);
              this.#tooLarge.delete(d.id);
            } else if (this.#needsProxyPod(d, pod)) this.#opts.onChange?.(d.id);
          } catch (err) {
            // The running pod keeps the objects it had: say so on its Sandbox.
            if (err instanceof PolicyTooLargeError) {
              this.#tooLarge.add(d.id);
              await this.#status.event(sc, sbx, "Warning", EventReason.PolicyTooLarge, `${err.message}; its pod keeps the policy it had`);
            }
            throw err;
          }
        }).catch((err: unknown) => this.#opts.log?.(`${what} of ${d.id}: ${(err as Error).message}`)),
      ),
    );
  }

  /** The namespace the driver placed (or places) a sandbox in, as #scopeForNew decides it;
   * undefined before its intent arrives. */
  #placedIn(id: string): string | undefined {
    const d = this.#desired.get(id);
    return d && (d.namespace ?? this.namespace);
  }

  /** The namespace a new sandbox goes to: its team's (informers started on first use), else home. */
  async #scopeForNew(d: KubeDesiredSandbox): Promise<NamespaceScope> {
    const ns = d.namespace ?? this.namespace;
    if (!NAMESPACE_PATTERN.test(ns)) throw new TerminalError(ReadyReason.InvalidSpec, `team "${ns}" is not a valid Kubernetes namespace name (lowercase letters, digits and '-', at most 63)`);
    const sc = this.#ctx.scope(ns);
    await sc.start();
    return sc;
  }

  async observe(id: string): Promise<KubeSandboxObservation | undefined> {
    return this.#status.observe(id, this.#deferred.get(id)?.generation);
  }

  async list(): Promise<KubeSandboxObservation[]> {
    const ids = new Set<string>();
    for (const o of this.#ctx.all().flatMap((sc) => [...sc.sandboxes.list(), ...sc.pods.list()])) {
      const id = o.metadata?.annotations?.[ANNOTATION.sandboxId] ?? o.metadata?.labels?.[LABEL.sandboxId];
      if (id) ids.add(id);
    }
    return [...ids].map((id) => this.#status.observe(id, this.#deferred.get(id)?.generation)!).filter(Boolean);
  }

  /**
   * Every Sandbox of a namespace whose informers just did their first list is first seen: its
   * status is computed again from its pod and written if it differs. Only now: a Sandbox listed
   * before its pod (the two lists end in either order) would read as having none, and get a wrong
   * not-Ready status written and then corrected: at 10,000 sandboxes, ~20,000 status patches at
   * once, the agent's heap 4–7 times its settled size for 20–40 s (bench/kube.ts). A few at a
   * time, so a namespace of statuses that are really stale is a bounded stream of writes.
   */
  async #recomputeAll(sc: NamespaceScope): Promise<void> {
    const ids = sc.sandboxes.list().map((o) => o.metadata?.annotations?.[ANNOTATION.sandboxId]);
    let next = 0;
    const worker = async () => {
      while (next < ids.length && !this.#stopped) {
        const id = ids[next++];
        if (!id || this.#statusTimers.has(id)) continue;
        await this.#serial(id, () => this.#sync(id)).catch((err: unknown) => {
          this.#opts.log?.(`sync of ${id}: ${(err as Error).message}`);
          this.#scheduleStatus(id, 500);
        });
      }
    };
    await Promise.all(Array.from({ length: STATUS_PASS_CONCURRENCY }, worker));
  }

  /** Refreshes a Sandbox's status from its pod soon (coalesces bursts of pod events). */
  #scheduleStatus(id: string, delayMs = 20): void {
    // A stopped driver's caches no longer follow the cluster: what it computed would be stale.
    if (this.#stopped || this.#statusTimers.has(id)) return;
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
    const sbx = this.#ctx.sandbox(id);
    if (pending && sbx) {
      await this.#sandboxes.update(sbx, pending);
      if (this.#deferred.get(id) === pending) this.#deferred.delete(id);
    }
    // New rules or labels of a running sandbox (updateNetwork, a claim's metadata) reach its proxy.
    const d = this.#desired.get(id);
    if (d && sbx && this.#policiesKnown && this.#profilesKnown && hasTrafficProxy(this.#ctx.pod(id))) await this.#traffic.sync(this.#ctx.scopeOf(id), sbx, d);
    await this.#status.write(id);
    this.#mounts.check(id, this.#status.observe(id)?.ready ?? false);
  }

  view(_id: string): never {
    throw new UnsupportedError("view", "the runtime runs inside each pod; reach it at the observation's endpoint");
  }

  async exec(_id: string, _req: SpawnRequest, _opts?: { timeoutMs?: number; stdin?: string }): Promise<ExecResult> {
    throw new UnsupportedError("exec", "the kubernetes driver runs commands through the pod's agent-runtime (envd process API), not the driver");
  }

  runtimeTokens(id: string): string[] {
    return [...new Set([this.#pods.token(id), this.#pods.podToken(id)].filter((t): t is string => !!t))];
  }

  runtimeInitialized(id: string, token: string): void {
    this.#pods.setToken(id, token);
  }

  async freeze(id: string): Promise<void> {
    await this.#pods.runtimeCall(id, "/freeze", this.#desired.get(id)?.accessToken);
    await this.#sandboxes.markFrozen(id, this.#ctx.pod(id)?.metadata?.uid ?? null);
    // Not awaited: freeze/thaw also run inside ensure's chain, which writes the status at its end.
    this.#scheduleStatus(id);
  }

  async thaw(id: string): Promise<void> {
    await this.#pods.runtimeCall(id, "/unfreeze", this.#desired.get(id)?.accessToken);
    await this.#sandboxes.markFrozen(id, null);
    this.#scheduleStatus(id);
  }

  /**
   * Labels the Sandboxes a SandboxClaim took `agents.kruise.io/claim-name=<claim>` (upstream's
   * selector for a claim's sandboxes); the intent cannot carry it, as it names the claim only by
   * uid. In each sandbox's write chain; one already labelled, or not (yet) here, is skipped.
   */
  async labelClaimed(ids: string[], claimName: string, mounts: CsiMountConfig[] = []): Promise<void> {
    const csi = mounts.length ? JSON.stringify(mounts) : undefined;
    await Promise.all(
      ids.map((id) =>
        this.#serial(id, async () => {
          const sbx = this.#ctx.sandbox(id);
          const meta = sbx?.metadata;
          if (!sbx || meta?.deletionTimestamp) return;
          const labelled = meta?.labels?.[LABEL.claimName] === claimName;
          // The claim's dynamic mounts: written once, made once the pod is Ready (csi-mounts.ts).
          const annotate = csi !== undefined && meta?.annotations?.[ANNOTATION.csiVolumeConfig] === undefined;
          if (labelled && !annotate) return;
          const updated = await this.#sandboxes.patchMetadata(id, sbx, { labels: { [LABEL.claimName]: claimName }, ...(annotate ? { annotations: { [ANNOTATION.csiVolumeConfig]: csi } } : {}) }, true);
          if (updated && annotate) this.#scheduleStatus(id);
        }),
      ),
    );
  }

  /** A Checkpoint for the cluster's checkpoint engine, waited on (checkpoint/snapshots.ts). */
  async snapshotFs(id: string, snapshotId?: string): Promise<SnapshotRef> {
    const sbx = this.#ctx.sandbox(id);
    if (!sbx) throw new SandboxNotFoundError(id);
    const snapId = snapshotId ?? `${id}-${Date.now().toString(36)}`;
    return this.#checkpoints.take(this.#ctx.scopeOf(id), sbx, this.#ctx.pod(id)?.metadata?.name, id, snapId);
  }

  async restoreFs(_id: string, _snapshot: Pick<SnapshotRef, "id">): Promise<void> {
    throw new UnsupportedError("restoreFs", "a running pod's files are not replaced in place; a new sandbox from the snapshot restores its checkpoint");
  }

  async deleteSnapshot(snapshot: Pick<SnapshotRef, "id">): Promise<void> {
    await this.#checkpoints.delete(this.#ctx.all(), snapshot.id);
  }

  async destroy(id: string): Promise<void> {
    const sc = this.#ctx.scopeOf(id);
    await this.#requests.destroying(id, async () => {
      const name = this.#ctx.sandbox(id)?.metadata?.name;
      // Forgotten first, so no later sync writes its egress objects again. Its objects are deleted
      // in its chain, after any sync already queued there (the pod's delete event schedules one):
      // a status patch still in flight when the Sandbox is deleted could otherwise be answered
      // after the delete and its watch event, and a sync queued later finds the Sandbox gone.
      this.#desired.delete(id);
      this.#sandboxSecrets.delete(id);
      this.#warned.delete(id);
      this.#tooLarge.delete(id);
      await this.#pods.deleteAll(sc, id);
      await this.#serial(id, async () => {
        if (name) await this.#traffic.delete(sc, name);
        if (name) await this.#pods.deleteTokenSecret(sc, name);
        await this.#sandboxes.delete(sc, id);
      });
      this.#status.forget(id);
      this.#mounts.forget(id);
      this.#pods.forgetToken(id);
      this.#deferred.delete(id);
      this.#claimWrites.forget(id);
    });
  }
}
