// SandboxSet `.status` from the Sandboxes the agent sees: how many warm (unclaimed) members exist,
// how many are Ready, how many run the current revision, and which revision the rolling update
// (run by the edge's PoolDO) still replaces. Written only when it changed, 50 ms after the first
// change and then at most once a second per namespace, so a burst of claims and refills costs a
// status patch a second, not one per claim (it is kubectl's view: the edge keeps its own counts).
import { PatchStrategy, setHeaderOptions, type CustomObjectsApi } from "@kubernetes/client-node";
import { GROUP, LABEL, VERSION } from "../../../schema/crd/labels.ts";
import type { ObjectCache } from "./object-cache.ts";
import { templateHash } from "./pod-spec.ts";
import type { SandboxObject, SandboxSetObject } from "./objects.ts";

const mergePatch = setHeaderOptions("Content-Type", PatchStrategy.MergePatch);
/** The first change of a quiet pool is written after this; */
const SETTLE_MS = 50;
/** later ones no sooner than this after the last write. */
const MIN_INTERVAL_MS = 1000;

/**
 * The pool's revision: a hash of what its members are built from (openkruise-agents.md §1.2:
 * template, volumes, runtimes, pause strategy). The last two only when set, so the revision of a
 * SandboxSet without them is what it was before they counted (no rollout on an agent upgrade).
 */
export function poolRevision(set: SandboxSetObject): string {
  const { runtimes, pauseStrategy } = set.spec as SandboxSetObject["spec"] & { pauseStrategy?: unknown };
  return templateHash({
    template: set.spec.template,
    volumeClaimTemplates: set.spec.volumeClaimTemplates ?? [],
    ...(runtimes?.length ? { runtimes } : {}),
    ...(pauseStrategy ? { pauseStrategy } : {}),
  });
}

export interface PoolCounts {
  observedGeneration?: number;
  replicas: number;
  availableReplicas: number;
  updatedReplicas: number;
  updatedAvailableReplicas: number;
  updateRevision: string;
  currentRevision: string;
  selector: string;
}

export function poolCounts(set: SandboxSetObject, sandboxes: SandboxObject[]): PoolCounts {
  const name = set.metadata!.name!;
  const revision = poolRevision(set);
  const members = sandboxes.filter(
    (s) => s.metadata?.labels?.[LABEL.pool] === name && s.metadata.labels[LABEL.claimed] === "false" && !s.metadata.deletionTimestamp,
  );
  const ready = (s: SandboxObject) => s.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True") ?? false;
  const updated = members.filter((s) => s.metadata?.labels?.[LABEL.templateHash] === revision);
  // The revision of the oldest member not yet replaced (as a StatefulSet's currentRevision): the
  // update revision again once the rolling update is done.
  let oldest: SandboxObject | undefined;
  for (const s of members) {
    if (s.metadata?.labels?.[LABEL.templateHash] === revision) continue;
    if (!oldest || createdAt(s) < createdAt(oldest)) oldest = s;
  }
  const current = oldest?.metadata?.labels?.[LABEL.templateHash] ?? revision;
  return {
    observedGeneration: set.metadata?.generation,
    replicas: members.length,
    availableReplicas: members.filter(ready).length,
    updatedReplicas: updated.length,
    updatedAvailableReplicas: updated.filter(ready).length,
    updateRevision: revision,
    currentRevision: `${name}-${current}`,
    selector: `${LABEL.pool}=${name},${LABEL.claimed}=false`,
  };
}

function createdAt(s: SandboxObject): number {
  const t = s.metadata?.creationTimestamp;
  return t ? new Date(t).getTime() : 0;
}

export class PoolStatus {
  readonly #d: {
    custom: CustomObjectsApi;
    namespace: string;
    sandboxes: ObjectCache<SandboxObject>;
    sandboxSets: ObjectCache<SandboxSetObject>;
    count: () => void;
  };
  readonly #dirty = new Set<string>();
  #timer?: NodeJS.Timeout;
  #lastFlush = 0;
  /** Flushes run one after another: two in flight could land out of order and leave an older
   * count as the SandboxSet's status with no event left to correct it. */
  #chain: Promise<void> = Promise.resolve();

  constructor(deps: { custom: CustomObjectsApi; namespace: string; sandboxes: ObjectCache<SandboxObject>; sandboxSets: ObjectCache<SandboxSetObject>; count: () => void }) {
    this.#d = deps;
  }

  touch(pool: string | undefined): void {
    if (!pool) return;
    this.#dirty.add(pool);
    if (this.#timer) return;
    const delay = Math.max(SETTLE_MS, this.#lastFlush + MIN_INTERVAL_MS - Date.now());
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      this.#lastFlush = Date.now();
      this.#chain = this.#chain.then(() => this.flush()).catch(() => {});
    }, delay);
  }

  async flush(): Promise<void> {
    const pools = [...this.#dirty];
    this.#dirty.clear();
    const all = this.#d.sandboxes.list();
    for (const name of pools) {
      const set = this.#d.sandboxSets.get(name);
      if (!set || set.metadata?.deletionTimestamp) continue;
      const status = poolCounts(set, all);
      const old = (set as { status?: Partial<PoolCounts> }).status ?? {};
      if (Object.entries(status).every(([k, v]) => old[k as keyof PoolCounts] === v)) continue;
      this.#d.count();
      try {
        const updated = (await this.#d.custom.patchNamespacedCustomObjectStatus(
          { group: GROUP, version: VERSION, namespace: this.#d.namespace, plural: "sandboxsets", name, body: { status } },
          mergePatch,
        )) as SandboxSetObject;
        this.#d.sandboxSets.remember(updated);
      } catch {
        this.touch(name); // deleted meanwhile or a conflict: the next tick re-reads
      }
    }
  }

  stop(): void {
    clearTimeout(this.#timer);
  }
}
