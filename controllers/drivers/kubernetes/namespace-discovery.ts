// With --all-namespaces: the namespaces (= teams) holding a SandboxSet or a SandboxClaim, found by
// two cluster-wide informers that keep only names, so a team that applies its first SandboxSet
// while the agent runs is synced from then on. Needs cluster-wide list/watch (k8s/README.md).
import { CustomObjectsApi, type KubeConfig, type KubernetesObject } from "@kubernetes/client-node";
import { GROUP, VERSION } from "../../../schema/crd/labels.ts";
import { ObjectCache } from "./object-cache.ts";

export class NamespaceDiscovery {
  readonly #caches: ObjectCache<KubernetesObject>[];
  readonly #seen = new Set<string>();

  constructor(kc: KubeConfig, onNamespace: (ns: string) => void, onError: (err: unknown) => void) {
    const custom = kc.makeApiClient(CustomObjectsApi);
    this.#caches = ["sandboxsets", "sandboxclaims"].map(
      (plural) =>
        new ObjectCache<KubernetesObject>(kc, {
          path: `/apis/${GROUP}/${VERSION}/${plural}`,
          list: () => custom.listClusterCustomObject({ group: GROUP, version: VERSION, plural }),
          // Keyed by namespace/name: the cache is keyed by name, and names repeat across namespaces.
          slim: (raw: KubernetesObject) => ({
            metadata: { name: `${raw.metadata?.namespace}/${raw.metadata?.name}`, namespace: raw.metadata?.namespace, resourceVersion: raw.metadata?.resourceVersion },
          }),
          onError,
        }),
    );
    for (const c of this.#caches) {
      c.onChange((o, verb) => {
        const ns = o.metadata?.namespace;
        if (verb === "delete" || !ns || this.#seen.has(ns)) return;
        this.#seen.add(ns);
        onNamespace(ns);
      });
    }
  }

  /** Resolves after the first lists (their namespaces already reported). */
  async start(): Promise<void> {
    await Promise.all(this.#caches.map((c) => c.start()));
  }

  async stop(): Promise<void> {
    await Promise.all(this.#caches.map((c) => c.stop()));
  }
}
