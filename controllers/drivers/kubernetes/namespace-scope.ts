// The informers of one namespace: pods, PVCs, Sandboxes and SandboxSets, and the SandboxSet status
// they feed. The driver keeps one scope per team namespace it has sandboxes in (the team's name is
// the namespace), started the first time a sandbox of that team is ensured.
import type { CoreV1Api, CustomObjectsApi, KubeConfig, V1PersistentVolumeClaim, V1Pod } from "@kubernetes/client-node";
import { GROUP, LABEL, VERSION } from "../../../schema/crd/labels.ts";
import type { SandboxObject, SandboxSetObject } from "./objects.ts";
import { ObjectCache } from "./object-cache.ts";
import { PoolStatus } from "./pool-status.ts";
import { slimCustom, slimPod, slimPvc } from "./slim.ts";

/** Namespace names are DNS-1123 labels; a team name that is not one cannot be a namespace. */
export const NAMESPACE_PATTERN = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;

export class NamespaceScope {
  readonly namespace: string;
  readonly pods: ObjectCache<V1Pod>;
  readonly pvcs: ObjectCache<V1PersistentVolumeClaim>;
  readonly sandboxes: ObjectCache<SandboxObject>;
  readonly sandboxSets: ObjectCache<SandboxSetObject>;
  readonly pools: PoolStatus;
  /** Whether every informer has done its first list: until then a Sandbox may be held without
   * its pod (the two lists finish in either order), and what is computed from it is wrong. */
  synced = false;
  readonly #onSynced?: () => void;
  #started?: Promise<void>;

  constructor(deps: { kubeConfig: KubeConfig; core: CoreV1Api; custom: CustomObjectsApi; namespace: string; onError: (err: unknown) => void; count: () => void; onSynced?: () => void }) {
    const { kubeConfig: kc, core, custom, namespace: ns, onError } = deps;
    this.namespace = ns;
    this.#onSynced = deps.onSynced;
    const crList = (plural: string) => () => custom.listNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: ns, plural });
    const crPath = (plural: string) => `/apis/${GROUP}/${VERSION}/namespaces/${ns}/${plural}`;
    const podSelector = `${LABEL.createdBy}=sandbox`;
    this.pods = new ObjectCache<V1Pod>(kc, {
      path: `/api/v1/namespaces/${ns}/pods`,
      list: () => core.listNamespacedPod({ namespace: ns, labelSelector: podSelector }),
      labelSelector: podSelector,
      slim: slimPod,
      onError,
    });
    this.pvcs = new ObjectCache<V1PersistentVolumeClaim>(kc, {
      path: `/api/v1/namespaces/${ns}/persistentvolumeclaims`,
      list: () => core.listNamespacedPersistentVolumeClaim({ namespace: ns, labelSelector: LABEL.sandboxId }),
      labelSelector: LABEL.sandboxId,
      slim: slimPvc,
      onError,
    });
    this.sandboxes = new ObjectCache<SandboxObject>(kc, { path: crPath("sandboxes"), list: crList("sandboxes"), slim: slimCustom, onError });
    this.sandboxSets = new ObjectCache<SandboxSetObject>(kc, { path: crPath("sandboxsets"), list: crList("sandboxsets"), slim: slimCustom, onError });
    this.pools = new PoolStatus({ custom, namespace: ns, sandboxes: this.sandboxes, sandboxSets: this.sandboxSets, count: deps.count });
    this.sandboxes.onChange((o) => this.pools.touch(o.metadata?.labels?.[LABEL.pool]));
    this.sandboxSets.onChange((o) => this.pools.touch(o.metadata?.name));
  }

  /** Starts the informers; resolves after their first list (`onSynced` has run by then). */
  start(): Promise<void> {
    // A failed first list is not kept (nor is each informer's): a later start (the next ensure or
    // watch of the namespace) lists again, so RBAC granted after the agent started, or an API
    // server back after its retries, still makes the namespace synced and its statuses written.
    this.#started ??= Promise.all([this.pods.start(), this.pvcs.start(), this.sandboxes.start(), this.sandboxSets.start()]).then(
      () => {
        this.synced = true;
        this.#onSynced?.();
      },
      (err: unknown) => {
        this.#started = undefined;
        throw err;
      },
    );
    return this.#started;
  }

  async stop(): Promise<void> {
    this.pools.stop();
    await Promise.all([this.pods.stop(), this.pvcs.stop(), this.sandboxes.stop(), this.sandboxSets.stop()]);
  }
}
