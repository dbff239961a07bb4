// The driver's namespaces: one NamespaceScope (informers) per namespace with sandboxes of ours,
// the home namespace's first; which scope holds a sandbox; and the DriverContext the driver's
// parts share (API clients and the claim's plain-JSON patch, request counter, clock, log, a sandbox's Sandbox and Pod).
import { CoreV1Api, CustomObjectsApi, type KubeConfig, type KubernetesObject, type V1Pod } from "@kubernetes/client-node";
import { ANNOTATION, GROUP, LABEL, VERSION } from "../../../schema/crd/labels.ts";
import type { DriverContext } from "./context.ts";
import { patchJson, PLURAL } from "./kube-api.ts";
import { NAMESPACE_PATTERN, NamespaceScope } from "./namespace-scope.ts";
import { idLabel, type SandboxObject } from "./objects.ts";

/** What a sandbox's phase, readiness, endpoint and status are computed from, of a (slim) pod. */
function podFacts(p: V1Pod): string {
  const m = p.metadata;
  return JSON.stringify([m?.uid, m?.deletionTimestamp, m?.annotations, p.spec?.nodeName, p.status]);
}

export interface ScopesOptions {
  kubeConfig: KubeConfig;
  namespace: string;
  count: (n: number) => void;
  now: () => number;
  log: (msg: string) => void;
  /** A sandbox's pod in `sc` changed in a way its state is made of. */
  onPodChange: (id: string, sc: NamespaceScope) => void;
  /** A namespace's informers have all done their first list: every Sandbox in it is first seen. */
  onSynced?: (sc: NamespaceScope) => void;
  /** A Sandbox of `namespace` was added or changed (`old`: the version the watch delivered before). */
  onSandbox: (o: SandboxObject, namespace: string, old?: SandboxObject) => void;
  /** The namespace the driver placed a sandbox in, once its intent is known: a Sandbox elsewhere
   * carrying its id (anyone can annotate one) does not move it. */
  placedIn?: (id: string) => string | undefined;
}

export class Scopes implements DriverContext {
  readonly core: CoreV1Api;
  readonly custom: CustomObjectsApi;
  readonly home: NamespaceScope;
  readonly #opts: ScopesOptions;
  readonly #scopes = new Map<string, NamespaceScope>();

  constructor(opts: ScopesOptions) {
    this.#opts = opts;
    this.core = opts.kubeConfig.makeApiClient(CoreV1Api);
    this.custom = opts.kubeConfig.makeApiClient(CustomObjectsApi);
    this.home = this.scope(opts.namespace);
  }

  patchJson(path: string, body: object): Promise<unknown> {
    return patchJson(this.#opts.kubeConfig, path, body);
  }
  count(n = 1): void {
    this.#opts.count(n);
  }
  now(): number {
    return this.#opts.now();
  }
  log(msg: string): void {
    this.#opts.log(msg);
  }

  all(): NamespaceScope[] {
    return [...this.#scopes.values()];
  }

  /** The scope of a namespace, made (not started) on first use. */
  scope(ns: string): NamespaceScope {
    let sc = this.#scopes.get(ns);
    if (sc) return sc;
    sc = new NamespaceScope({
      kubeConfig: this.#opts.kubeConfig,
      core: this.core,
      custom: this.custom,
      namespace: ns,
      onError: (err) => this.#opts.log(`watch ${ns}: ${(err as Error)?.message ?? err}`),
      count: () => this.count(),
      onSynced: () => this.#opts.onSynced?.(scope),
    });
    const scope = sc;
    const changed = (o: V1Pod, verb: string, old?: V1Pod) => {
      // A relabel (the claim's own patch) changes nothing the sandbox's state is made of.
      if (verb === "update" && old && podFacts(old) === podFacts(o)) return;
      const id = this.#idOf(o, scope);
      if (id) this.#opts.onPodChange(id, scope);
    };
    sc.pods.onChange(changed);
    sc.sandboxes.onChange((o, verb, old) => {
      if (verb !== "delete") this.#opts.onSandbox(o, ns, old);
    });
    this.#scopes.set(ns, sc);
    return sc;
  }

  /** Starts watching a namespace (once) and resolves after its first list. */
  async watch(ns: string): Promise<NamespaceScope> {
    if (!NAMESPACE_PATTERN.test(ns)) throw new Error(`"${ns}" is not a valid Kubernetes namespace name (lowercase letters, digits and '-', at most 63)`);
    const sc = this.scope(ns);
    await sc.start();
    return sc;
  }

  scopeOf(id: string): NamespaceScope {
    const placed = this.#opts.placedIn?.(id);
    const known = placed !== undefined && this.#scopes.get(placed);
    if (known) return known;
    const label = idLabel(id);
    if (this.home.sandboxes.forSandbox(label).length || this.home.pods.forSandbox(label).length) return this.home;
    for (const sc of this.#scopes.values()) {
      if (sc.sandboxes.forSandbox(label).length || sc.pods.forSandbox(label).length) return sc;
    }
    return this.home;
  }

  /** The sandbox id of a Sandbox or of a pod/PVC (through its Sandbox when the label is a hash). */
  #idOf(o: KubernetesObject, sc: NamespaceScope): string | undefined {
    const label = o.metadata?.labels?.[LABEL.sandboxId];
    if (!label) return undefined;
    const own = o.metadata?.annotations?.[ANNOTATION.sandboxId];
    if (own) return own;
    return sc.sandboxes.forSandbox(label)[0]?.metadata?.annotations?.[ANNOTATION.sandboxId] ?? label;
  }

  sandbox(id: string): SandboxObject | undefined {
    return this.scopeOf(id).sandboxes.forSandbox(idLabel(id))[0];
  }

  pod(id: string): V1Pod | undefined {
    const pods = this.scopeOf(id).pods.forSandbox(idLabel(id));
    return pods.find((p) => !p.metadata?.deletionTimestamp) ?? pods[0];
  }

  /** The namespaces of the cluster's Sandboxes and sandbox pods (one list each, names only). */
  async namespacesWithSandboxes(): Promise<string[]> {
    this.count(2);
    const [sandboxes, pods] = await Promise.all([
      this.custom.listClusterCustomObject({ group: GROUP, version: VERSION, plural: PLURAL.sandbox, labelSelector: LABEL.sandboxId }) as Promise<{ items: KubernetesObject[] }>,
      this.core.listPodForAllNamespaces({ labelSelector: `${LABEL.createdBy}=sandbox` }),
    ]);
    return [...new Set([...sandboxes.items, ...pods.items].map((o) => o.metadata!.namespace!))];
  }
}
