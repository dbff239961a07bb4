// CRD sync for SandboxClaims (OpenKruise Agents §1.4): each claim takes `replicas` sandboxes from
// its SandboxSet's pool through the edge (the authority: a claim there is a pop from the PoolDO),
// sent as a `claims` item over the agent's session, and the outcome flows back as the claim's
// status. Level-based: the edge counts the sandboxes a claim already holds (their
// `kruise-claim-uid` metadata), so a repeated item or a restarted agent never claims twice; a
// Completed claim is deleted `ttlAfterCompleted` later (its sandboxes stay).
import { CustomObjectsApi, PatchStrategy, setHeaderOptions, type KubeConfig, type KubernetesObject } from "@kubernetes/client-node";
import type { Link } from "../link.ts";
import { MAX_TIMEOUT_S } from "../../../schema/api/limits.ts";
import { ClaimCompletedReason, setCondition, type Condition } from "../../../schema/crd/conditions.ts";
import type { ClaimItemInput } from "../../../schema/protocol/index.ts";
import { GROUP, VERSION } from "../../../schema/crd/labels.ts";
import { annotationsProblem, labelProblem } from "../../../schema/crd/user-metadata.ts";
import { WorkQueue } from "../../lib/work-queue.ts";
import { ObjectCache } from "../../drivers/kubernetes/object-cache.ts";
import { parseQuantity } from "../../../schema/crd/quantity.ts";
import { slimCustom } from "../../drivers/kubernetes/slim.ts";
import { durationMs } from "../../../schema/crd/duration.ts";
import { csiMountsProblem, type CsiMountConfig } from "../../../schema/crd/csi-mount.ts";

export { CLAIM_METADATA_KEY } from "../../../schema/protocol/index.ts";

export interface SandboxClaimObject extends KubernetesObject {
  spec: {
    templateName: string;
    replicas?: number;
    claimTimeout?: string;
    ttlAfterCompleted?: string;
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
    envVars?: Record<string, string>;
    shutdownTime?: string;
    createOnNoStock?: boolean;
    waitReadyTimeout?: string;
    inplaceUpdate?: { image?: string; resources?: { limits?: Record<string, string>; requests?: Record<string, string> } };
    dynamicVolumesMount?: CsiMountConfig[];
  };
  status?: { phase?: "Claiming" | "Completed"; claimedReplicas?: number; claimStartTime?: string; completionTime?: string; message?: string; conditions?: Condition[] };
}

/** How the controller reaches the edge's pools. */
export interface Claimer {
  /** Asks the edge to bring the claim up to `replicas` sandboxes; answers every id it holds. */
  claim(req: Omit<ClaimItemInput, "id">): Promise<{ sandboxIds: string[]; notFound: boolean; error?: string }>;
}

/** Claims over the agent's session (`claims` items). */
export class LinkClaimer implements Claimer {
  readonly #link: Pick<Link, "call">;
  constructor(link: Pick<Link, "call">) {
    this.#link = link;
  }

  async claim(req: Omit<ClaimItemInput, "id">): ReturnType<Claimer["claim"]> {
    const r = await this.#link.call({ type: "claims", item: req });
    const sandboxIds = r.sandboxIds ?? [];
    if (r.result === "applied") return { sandboxIds, notFound: false };
    return { sandboxIds, notFound: r.code === "template_not_found", error: `${r.code}: ${r.message}` };
  }
}

/** The claim's in-place change: its image, and its CPU (limit, else request) in cores. */
function inplaceOf(u: SandboxClaimObject["spec"]["inplaceUpdate"]): { image?: string; cpuCount?: number } | undefined {
  if (!u) return undefined;
  const cpu = parseQuantity(u.resources?.limits?.cpu ?? u.resources?.requests?.cpu);
  const out = { ...(u.image ? { image: u.image } : {}), ...(cpu ? { cpuCount: cpu } : {}) };
  return Object.keys(out).length ? out : undefined;
}

/** Why the claim's labels or annotations cannot go on its Sandboxes (undefined: they can). The
 * API server would refuse the Sandbox's update, so the claim is refused before anything is taken. */
export function claimMetadataProblem(spec: Pick<SandboxClaimObject["spec"], "labels" | "annotations" | "dynamicVolumesMount">): string | undefined {
  const mounts = spec.dynamicVolumesMount ? csiMountsProblem(spec.dynamicVolumesMount, "spec.dynamicVolumesMount") : undefined;
  if (mounts) return mounts;
  for (const [k, v] of Object.entries(spec.labels ?? {})) {
    const problem = labelProblem(k, v);
    if (problem) return `spec.labels: ${problem}`;
  }
  const problem = annotationsProblem(spec.annotations ?? {});
  return problem && `spec.annotations: ${problem}`;
}

export { durationMs };

const mergePatch = setHeaderOptions("Content-Type", PatchStrategy.MergePatch);

export interface SandboxClaimSyncOptions {
  kubeConfig: KubeConfig;
  namespace: string;
  claimer: Claimer;
  now?: () => number;
  log?: (msg: string) => void;
  /** How often an unfinished claim is looked at again. */
  retryMs?: number;
  /** Called with the sandboxes the claim holds after each pass (the driver labels them). */
  onClaimed?: (sandboxIds: string[], claimName: string, mounts: CsiMountConfig[]) => Promise<void>;
}

export class SandboxClaimSync {
  readonly claims: ObjectCache<SandboxClaimObject>;
  readonly #o: SandboxClaimSyncOptions;
  readonly #custom: CustomObjectsApi;
  readonly #now: () => number;
  /** One pass per claim at a time; an unfinished claim is looked at again after the pass's delay,
   * a failed pass after the queue's backoff (from `retryMs`). */
  readonly #queue: WorkQueue;
  /** Generation each claim was last scheduled for. */
  readonly #seen = new Map<string, number>();

  constructor(opts: SandboxClaimSyncOptions) {
    this.#o = opts;
    this.#now = opts.now ?? Date.now;
    this.#custom = opts.kubeConfig.makeApiClient(CustomObjectsApi);
    this.#queue = new WorkQueue({
      name: "sandboxclaim",
      work: async (name) => {
        const after = await this.reconcile(name);
        return after === undefined ? undefined : { requeueAfterMs: after };
      },
      backoff: { baseMs: opts.retryMs ?? 2000, maxMs: 30_000 },
      onError: (name, err) => opts.log?.(`sandboxclaim ${name}: ${(err as Error).message}`),
    });
    const ns = opts.namespace;
    this.claims = new ObjectCache<SandboxClaimObject>(opts.kubeConfig, {
      path: `/apis/${GROUP}/${VERSION}/namespaces/${ns}/sandboxclaims`,
      list: () => this.#custom.listNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: ns, plural: "sandboxclaims" }),
      slim: slimCustom,
      onError: (err) => opts.log?.(`sandboxclaims watch: ${(err as Error).message}`),
    });
    // A new claim, or a changed spec, is looked at at once; our own status writes are not events.
    this.claims.onChange((c, verb) => {
      const name = c.metadata!.name!;
      if (verb === "delete") return this.#seen.delete(name);
      if (this.#seen.get(name) === c.metadata?.generation) return;
      this.#seen.set(name, c.metadata?.generation ?? 0);
      this.#queue.add(name);
    });
  }

  async start(): Promise<void> {
    await this.claims.start();
  }

  async stop(): Promise<void> {
    this.#queue.close();
    await this.claims.stop();
  }

  /** One pass over one claim; returns when to look again (undefined: not until it changes). */
  async reconcile(name: string): Promise<number | undefined> {
    const claim = this.claims.get(name);
    if (!claim || claim.metadata?.deletionTimestamp) return undefined;
    const now = this.#now();
    const status = claim.status ?? {};
    if (status.phase === "Completed") {
      const ttl = durationMs(claim.spec.ttlAfterCompleted, 60 * 60_000);
      if (ttl < 0) return undefined;
      const due = Date.parse(status.completionTime ?? "") + ttl;
      if (now < due) return due - now;
      await this.#custom.deleteNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: this.#o.namespace, plural: "sandboxclaims", name }).catch(() => {});
      return undefined;
    }
    const team = this.#o.namespace;
    const uid = claim.metadata!.uid!;
    const want = claim.spec.replicas ?? 1;
    const startedAt = status.claimStartTime ?? new Date(now).toISOString();
    const deadline = Date.parse(startedAt) + durationMs(claim.spec.claimTimeout, 60_000);
    const shutdownMs = claim.spec.shutdownTime ? Date.parse(claim.spec.shutdownTime) - now : undefined;
    const invalid = claimMetadataProblem(claim.spec);
    if (invalid) {
      const iso = new Date(now).toISOString();
      const conditions = setCondition(status.conditions, { type: "Completed", status: "True", reason: ClaimCompletedReason.InvalidMetadata, message: invalid }, iso);
      return this.#writeStatus(name, claim, { phase: "Completed", claimedReplicas: 0, claimStartTime: startedAt, message: invalid, conditions, completionTime: iso });
    }
    // The edge claims at most 50 per item (upstream's batch) and says how many the claim holds.
    const r = await this.#o.claimer.claim({
      namespace: team,
      claim: { name, uid },
      templateName: claim.spec.templateName,
      replicas: want,
      envVars: claim.spec.envVars ?? {},
      labels: claim.spec.labels ?? {},
      annotations: claim.spec.annotations ?? {},
      // The claim's shutdownTime is the sandboxes' E2B end of life (within the edge's bounds).
      timeoutS: shutdownMs === undefined ? undefined : Math.min(MAX_TIMEOUT_S, Math.max(1, Math.ceil(shutdownMs / 1000))),
      createOnNoStock: claim.spec.createOnNoStock ?? true,
      waitReadyMs: claim.spec.waitReadyTimeout ? durationMs(claim.spec.waitReadyTimeout, 30_000) : undefined,
      inplaceUpdate: inplaceOf(claim.spec.inplaceUpdate),
    });
    // A label that cannot be written is no reason to hold back the claim's status.
    if (r.sandboxIds.length) await this.#o.onClaimed?.(r.sandboxIds, name, claim.spec.dynamicVolumesMount ?? []).catch((err: unknown) => this.#o.log?.(`sandboxclaim ${name}: claim-name label: ${(err as Error).message}`));
    const have = r.sandboxIds.length;
    const notFound = r.notFound;
    const lastError = r.error;
    const iso = new Date(now).toISOString();
    let conditions = status.conditions;
    let phase: "Claiming" | "Completed" = "Claiming";
    let message = lastError ?? "";
    if (have >= want) {
      phase = "Completed";
      conditions = setCondition(conditions, { type: "Completed", status: "True", reason: ClaimCompletedReason.AllReplicasClaimed, message: `${have} of ${want} claimed` }, iso);
    } else if (notFound) {
      phase = "Completed";
      message = `SandboxSet ${claim.spec.templateName} not found`;
      conditions = setCondition(conditions, { type: "Completed", status: "True", reason: ClaimCompletedReason.SandboxSetNotFound, message }, iso);
    } else if (now >= deadline) {
      phase = "Completed";
      conditions = setCondition(conditions, { type: "Completed", status: "True", reason: ClaimCompletedReason.TimeoutReached, message: `${have} of ${want} claimed` }, iso);
      conditions = setCondition(conditions, { type: "TimedOut", status: "True", reason: "ClaimTimeoutReached", message: "" }, iso);
    }
    const next = { phase, claimedReplicas: have, claimStartTime: startedAt, message, conditions, ...(phase === "Completed" ? { completionTime: iso } : {}) };
    const after = await this.#writeStatus(name, claim, next);
    return after ?? Math.min(this.#o.retryMs ?? 2000, Math.max(0, deadline - now));
  }

  /** Writes the claim's status; when it completed, answers when its TTL is due (else undefined). */
  async #writeStatus(name: string, claim: SandboxClaimObject, status: NonNullable<SandboxClaimObject["status"]>): Promise<number | undefined> {
    const updated = await this.#custom.patchNamespacedCustomObjectStatus(
      { group: GROUP, version: VERSION, namespace: this.#o.namespace, plural: "sandboxclaims", name, body: { status } },
      mergePatch,
    );
    this.claims.remember(updated);
    return status.phase === "Completed" ? Math.max(0, durationMs(claim.spec.ttlAfterCompleted, 60 * 60_000)) : undefined;
  }
}
