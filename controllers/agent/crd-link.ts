// The cluster's custom resources over the agent's session (`--driver kubernetes`): SandboxSets and
// SandboxClaims (and PoolAutoscalers and SandboxUpdateOps) of the watched namespaces, and the team quota annotated on each such Namespace, (the agent's own, `--watch-namespaces`, or with
// `--all-namespaces` every namespace holding one; team = namespace) go to the edge as
// `sandboxsets`/`claims`/`quotas`/`autoscalers`/`updateops` items, and kubectl edits
// of a Sandbox (spec.paused, delete) as `requests`. The edge decides; the driver acts only on the
// intents that follow. Everything is level-based and retried (with the work queue's backoff) until the edge answers.
import type { KubeConfig } from "@kubernetes/client-node";
import type { KubernetesDriver, SandboxRequest } from "../drivers/kubernetes/kubernetes-driver.ts";
import { LinkClaimer, SandboxClaimSync } from "./kube-sync/sandboxclaim-sync.ts";
import { NamespaceDiscovery } from "../drivers/kubernetes/namespace-discovery.ts";
import { LinkPoolSink, SandboxSetSync, type UncountableSandboxSet } from "./kube-sync/sandboxset-sync.ts";
import { poolRevision } from "../drivers/kubernetes/pool-status.ts";
import type { SandboxSetObject } from "../drivers/kubernetes/objects.ts";
import { NamespaceQuotaSync } from "./kube-sync/namespace-quota-sync.ts";
import { PoolAutoscalerSync } from "./kube-sync/poolautoscaler-sync.ts";
import { UpdateOpsSync } from "./kube-sync/updateops-sync.ts";
import { TrafficPolicySync } from "./kube-sync/trafficpolicy-sync.ts";
import { SecurityProfileSync } from "./kube-sync/securityprofile-sync.ts";
import type { Link } from "./link.ts";
import { backoffMs } from "../lib/work-queue.ts";
import { CommitController } from "../drivers/kubernetes/commit/commit-controller.ts";
import { CheckpointController } from "../drivers/kubernetes/checkpoint/checkpoint-controller.ts";
import type { CommitJobOptions } from "../drivers/kubernetes/commit/job-spec.ts";
import { idLabel } from "../drivers/kubernetes/objects.ts";
import { API_VERSION } from "../../schema/crd/labels.ts";

export interface CrdLinkOptions {
  link: Link;
  driver: KubernetesDriver;
  kubeConfig: KubeConfig;
  /** The driver's home namespace; its name is the team's on the edge. */
  namespace: string;
  /** More namespaces whose SandboxSets/SandboxClaims sync (each its own team), or "all": every
   * namespace holding a SandboxSet or SandboxClaim, now or later (cluster-wide RBAC). */
  watchNamespaces?: string[] | "all";
  cluster: string;
  /** The forwarder the driver was built with (edits it reported before the link existed wait there). */
  requests?: KubectlRequests;
  log?: (msg: string) => void;
  retryMs?: number;
  /** How often each namespace's quota annotations are read (default 10 s). */
  quotaPollMs?: number;
  /** How often each PoolAutoscaler's and SandboxUpdateOps' status is read from the edge (default 5 s). */
  autoscalerStatusMs?: number;
  /** The Commit controller (feature gate `Commit`); absent: Commits are not looked at. */
  commit?: { enabled: boolean; job: CommitJobOptions };
}

export interface NamespaceSync {
  sets: SandboxSetSync;
  claims: SandboxClaimSync;
  quota: NamespaceQuotaSync;
  autoscalers: PoolAutoscalerSync;
  updateOps: UpdateOpsSync;
  trafficPolicies: TrafficPolicySync;
  securityProfiles: SecurityProfileSync;
  commits?: CommitController;
  checkpoints: CheckpointController;
}

export interface CrdLink {
  /** The home namespace's syncs. */
  sets: SandboxSetSync;
  claims: SandboxClaimSync;
  /** Every synced namespace's, by namespace (the home one included). */
  namespaces: Map<string, Promise<NamespaceSync>>;
  requests: KubectlRequests;
  stop(): Promise<void>;
}

/**
 * The driver's `onRequest`, from the moment the driver exists: kubectl edits the driver reports
 * before the link is up (made while the agent was down, found by its first list) wait here; each
 * is sent as a `requests` item with the edge generation the edited Sandbox showed (the driver
 * reads it from the object), retried (with the work queue's backoff) until the edge answers.
 */
export class KubectlRequests {
  #link: Pick<Link, "call"> | undefined;
  #log: (msg: string) => void = () => {};
  #retryMs = 1000;
  #stopped = false;
  readonly #waiting: SandboxRequest[] = [];
  readonly #timers = new Set<NodeJS.Timeout>();

  readonly onRequest = (req: SandboxRequest): void => {
    if (this.#stopped) return;
    if (this.#link) this.#send(req);
    else this.#waiting.push(req);
  };

  attach(link: Pick<Link, "call">, log: (msg: string) => void, retryMs: number): void {
    this.#link = link;
    this.#log = log;
    this.#retryMs = retryMs;
    for (const req of this.#waiting.splice(0)) this.#send(req);
  }

  stop(): void {
    this.#stopped = true;
    for (const t of this.#timers) clearTimeout(t);
  }

  #send(req: SandboxRequest, attempt = 1): void {
    if (this.#stopped) return;
    const what = `kubectl ${req.action} of ${req.sandboxId}`;
    this.#link!
      .call({ type: "requests", item: { sandboxId: req.sandboxId as never, namespace: req.namespace, action: req.action, generation: req.generation, ...(req.autoPausePolicy && { autoPausePolicy: req.autoPausePolicy as never }), ...(req.lifecycle && { lifecycle: req.lifecycle as never }), ...(req.resync && { resync: true as const }) } })
      .then((reply) => {
        if (reply.result !== "applied") this.#log(`${what}: ${reply.result}${reply.code ? ` ${reply.code}` : ""}${reply.message ? `: ${reply.message}` : ""}`);
      })
      .catch((err) => {
        if (this.#stopped) return;
        // Not connected, or the session dropped before the answer: the edit still stands.
        this.#log(`${what}: ${(err as Error).message}; retrying`);
        const t = setTimeout(() => {
          this.#timers.delete(t);
          this.#send(req, attempt + 1);
        }, backoffMs(attempt, { baseMs: this.#retryMs, maxMs: 30_000 }));
        this.#timers.add(t);
      });
  }
}

export async function startCrdLink(o: CrdLinkOptions): Promise<CrdLink> {
  const log = o.log ?? (() => {});
  const retryMs = o.retryMs ?? 1000;
  const sink = new LinkPoolSink(o.link);
  const claimer = new LinkClaimer(o.link);
  const namespaces = new Map<string, Promise<NamespaceSync>>();
  const sync = (ns: string): Promise<NamespaceSync> => {
    let started = namespaces.get(ns);
    if (started) return started;
    started = (async () => {
      // The driver's informers of the namespace hold its SandboxSets (and its Sandboxes from now on).
      const scope = await o.driver.watchNamespace(ns);
      const refused = async (set: SandboxSetObject, err: UncountableSandboxSet) => {
        const message = `generation ${set.metadata?.generation ?? 0} is not sent to the edge: ${err.message}`.slice(0, 1024);
        scope.pools.refused(set.metadata!.name!, { revision: poolRevision(set), reason: "UncountableResources", message, at: new Date().toISOString() });
        await o.driver.sandboxSetEvent(scope, set, "UncountableResources", message, `uncountable-${set.metadata?.generation ?? 0}`);
      };
      const sets = new SandboxSetSync({ sandboxSets: scope.sandboxSets, namespace: ns, cluster: o.cluster, sink, log, retryMs, refused });
      const claims = new SandboxClaimSync({ kubeConfig: o.kubeConfig, namespace: ns, claimer, log, retryMs, onClaimed: (ids, name, mounts) => o.driver.labelClaimed(ids, name, mounts) });
      const quota = new NamespaceQuotaSync({ kubeConfig: o.kubeConfig, namespace: ns, link: o.link, pollMs: o.quotaPollMs, log });
      const autoscalers = new PoolAutoscalerSync({ kubeConfig: o.kubeConfig, namespace: ns, link: o.link, log, retryMs, statusMs: o.autoscalerStatusMs });
      const sandboxRef = (id: string) => {
        const sbx = scope.sandboxes.forSandbox(idLabel(id))[0];
        return sbx && { apiVersion: API_VERSION, kind: "Sandbox", name: sbx.metadata!.name!, uid: sbx.metadata!.uid };
      };
      const updateOps = new UpdateOpsSync({ kubeConfig: o.kubeConfig, namespace: ns, link: o.link, log, retryMs, statusMs: o.autoscalerStatusMs, sandboxRef });
      const trafficPolicies = new TrafficPolicySync({ kubeConfig: o.kubeConfig, namespace: ns, link: o.link, log, retryMs, statusMs: o.autoscalerStatusMs });
      // Each pod's traffic-proxy enforces the profiles selecting it: Programmed says in how many.
      const securityProfiles = new SecurityProfileSync({ kubeConfig: o.kubeConfig, namespace: ns, link: o.link, log, retryMs, statusMs: o.autoscalerStatusMs, pods: (ref) => o.driver.profileEnforcement(ref) });
      const commits = o.commit && new CommitController({ kubeConfig: o.kubeConfig, namespace: ns, enabled: o.commit.enabled, job: o.commit.job, platformImages: () => o.driver.platformImages(), log });
      await claims.start();
      sets.start();
      quota.start();
      await autoscalers.start();
      await updateOps.start();
      await trafficPolicies.start();
      await securityProfiles.start();
      await commits?.start();
      // Snapshots are Checkpoints (the driver makes them); this one rebuilds an unhealthy one.
      const checkpoints = new CheckpointController({ kubeConfig: o.kubeConfig, namespace: ns, log });
      await checkpoints.start();
      return { sets, claims, quota, autoscalers, updateOps, trafficPolicies, securityProfiles, commits, checkpoints };
    })();
    namespaces.set(ns, started);
    return started;
  };
  const w = o.watchNamespaces;
  const home = await sync(o.namespace);
  // GlobalTrafficPolicies and GlobalSecurityProfiles are cluster-scoped: one sync each for the cluster.
  const globalTraffic = new TrafficPolicySync({ kubeConfig: o.kubeConfig, namespace: null, link: o.link, log, retryMs, statusMs: o.autoscalerStatusMs });
  // Without the ClusterRoleBinding (k8s/rbac.yaml) they cannot be read: said, not fatal.
  await globalTraffic.start().catch((err: unknown) => log(`globaltrafficpolicies: not synced: ${(err as Error).message}`));
  const globalSecurity = new SecurityProfileSync({ kubeConfig: o.kubeConfig, namespace: null, link: o.link, log, retryMs, statusMs: o.autoscalerStatusMs, pods: (ref) => o.driver.profileEnforcement(ref) });
  await globalSecurity.start().catch((err: unknown) => log(`globalsecurityprofiles: not synced: ${(err as Error).message}`));
  await Promise.all((w === "all" ? [] : (w ?? [])).map(sync));
  const discovery =
    w === "all"
      ? new NamespaceDiscovery(o.kubeConfig, (ns) => void sync(ns).catch((err) => log(`namespace ${ns}: ${(err as Error).message}`)), (err) => log(`namespace discovery: ${(err as Error)?.message ?? err}`))
      : undefined;
  await discovery?.start();
  const requests = o.requests ?? new KubectlRequests();
  requests.attach(o.link, log, retryMs);
  return {
    ...home,
    namespaces,
    requests,
    async stop() {
      requests.stop();
      await globalTraffic.stop();
      await globalSecurity.stop();
      await discovery?.stop();
      for (const started of namespaces.values()) {
        const s = await started.catch(() => undefined);
        s?.sets.stop();
        await s?.claims.stop();
        await s?.quota.stop();
        await s?.autoscalers.stop();
        await s?.updateOps.stop();
        await s?.trafficPolicies.stop();
        await s?.securityProfiles.stop();
        await s?.commits?.stop();
        await s?.checkpoints.stop();
      }
    },
  };
}
