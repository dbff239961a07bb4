// SandboxSet `.status` from the Sandboxes the agent sees: how many warm (unclaimed) members exist,
// how many are Ready, how many run the current revision, and which revision the rolling update
// (run by the edge's PoolDO) still replaces. Written only when it changed, 50 ms after the first
// change and then at most once a second per namespace, so a burst of claims and refills costs a
// status patch a second, not one per claim (it is kubectl's view: the edge keeps its own counts).
// A member the driver refused (a terminal error: a template it will not run) sets the
// `ReplicaFailure` condition (as a Deployment's) until a member of that revision is ready or the
// template changes: its members are deleted by the edge as they fail, so their own conditions do
// not stay to be read. In memory: a restarted agent shows it again from the next refusal.
import type { CustomObjectsApi } from "@kubernetes/client-node";
import { GROUP, LABEL, VERSION } from "../../../schema/crd/labels.ts";
import { mergePatch, STATUS_WRITE_TIMEOUT_MS, within } from "./kube-api.ts";
import type { ObjectCache } from "./object-cache.ts";
import { templateHash } from "./pod-spec.ts";
import type { SandboxObject, SandboxSetObject } from "./objects.ts";

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

/** The last member the driver refused, per pool. */
export interface PoolRefusal {
  revision: string;
  reason: string;
  message: string;
  at: string;
}

export const REPLICA_FAILURE = "ReplicaFailure";

type Condition = { type: string; status: string; reason?: string; message?: string; lastTransitionTime?: string };

/** The SandboxSet's conditions: others' as they are, ReplicaFailure from the last refusal while
 * no member of its revision (the current one) is ready; undefined when there is nothing to write
 * (no refusal, none shown before). Its lastTransitionTime is when it became True (the first
 * refusal), kept while it stays True: a later refusal does not move it (nor, with the same
 * message, patch the status again). */
export function poolConditions(set: SandboxSetObject, sandboxes: SandboxObject[], refusal: PoolRefusal | undefined, old: Condition[] | undefined): Condition[] | undefined {
  const name = set.metadata!.name!;
  const revision = poolRevision(set);
  const live =
    refusal?.revision === revision &&
    !sandboxes.some((s) => s.metadata?.labels?.[LABEL.pool] === name && s.metadata.labels[LABEL.templateHash] === revision && s.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True"));
  const others = (old ?? []).filter((c) => c.type !== REPLICA_FAILURE);
  if (!live) return others.length !== (old ?? []).length ? others : undefined;
  const message = `members of revision ${revision} are refused: ${refusal.message}`.slice(0, 4096);
  const since = old?.find((c) => c.type === REPLICA_FAILURE && c.status === "True")?.lastTransitionTime ?? refusal.at;
  return [...others, { type: REPLICA_FAILURE, status: "True", reason: refusal.reason, message, lastTransitionTime: since }];
}

type PoolStatusBody = PoolCounts & { conditions?: Condition[] };

/** One pool's flush: the status to write (null: the set is gone or deleting, or nothing changed)
 * and whether its refusal is kept. A set gone or deleting drops it, so a set re-created under
 * that name does not show a refusal that was not its own. */
export function poolFlush(set: SandboxSetObject | undefined, sandboxes: SandboxObject[], refusal: PoolRefusal | undefined): { status: PoolStatusBody | null; keepRefusal: boolean } {
  if (!set || set.metadata?.deletionTimestamp) return { status: null, keepRefusal: false };
  const old = (set as { status?: Partial<PoolStatusBody> }).status ?? {};
  const conditions = poolConditions(set, sandboxes, refusal, old.conditions);
  // Resolved (a member of the revision ready, or a new template): forgotten.
  const keepRefusal = refusal !== undefined && (conditions?.some((c) => c.type === REPLICA_FAILURE) ?? false);
  const status = { ...poolCounts(set, sandboxes), ...(conditions ? { conditions } : {}) };
  const same = Object.entries(status).every(([k, v]) => JSON.stringify(old[k as keyof typeof old]) === JSON.stringify(v));
  return { status: same ? null : status, keepRefusal };
}

export class PoolStatus {
  readonly #d: {
    custom: CustomObjectsApi;
    namespace: string;
    sandboxes: ObjectCache<SandboxObject>;
    sandboxSets: ObjectCache<SandboxSetObject>;
    count: () => void;
    writeTimeoutMs?: number;
  };
  readonly #dirty = new Set<string>();
  #timer?: NodeJS.Timeout;
  #lastFlush = 0;
  /** Flushes run one after another: two in flight could land out of order and leave an older
   * count as the SandboxSet's status with no event left to correct it. */
  #chain: Promise<void> = Promise.resolve();
  readonly #refused = new Map<string, PoolRefusal>();

  constructor(deps: { custom: CustomObjectsApi; namespace: string; sandboxes: ObjectCache<SandboxObject>; sandboxSets: ObjectCache<SandboxSetObject>; count: () => void; writeTimeoutMs?: number }) {
    this.#d = deps;
  }

  /** A member of `pool` at `revision` was refused (terminal): the condition says so. */
  refused(pool: string, refusal: PoolRefusal): void {
    this.#refused.set(pool, refusal);
    this.touch(pool);
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
      const { status, keepRefusal } = poolFlush(this.#d.sandboxSets.get(name), all, this.#refused.get(name));
      if (!keepRefusal) this.#refused.delete(name);
      if (!status) continue;
      this.#d.count();
      try {
        const updated = (await this.#d.custom.patchNamespacedCustomObjectStatus(
          { group: GROUP, version: VERSION, namespace: this.#d.namespace, plural: "sandboxsets", name, body: { status } },
          // Aborted past the bound and written again at the next tick: flushes run one at a time, so one
          // stuck patch would hold every pool's status.
          within(this.#d.writeTimeoutMs ?? STATUS_WRITE_TIMEOUT_MS, mergePatch),
        )) as SandboxSetObject;
        this.#d.sandboxSets.remember(updated);
      } catch {
        this.touch(name); // deleted meanwhile, a conflict or no answer in time: the next tick re-reads
      }
    }
  }

  stop(): void {
    clearTimeout(this.#timer);
  }
}
