// CRD sync for SandboxClaims (OpenKruise Agents §1.4): each claim takes `replicas` sandboxes from
// its SandboxSet's pool through the edge (the authority: a claim there is a pop from the PoolDO)
// and the outcome flows back as the claim's status. Level-based: the sandboxes a claim already got
// are found on the edge by their `kruise-claim-uid` metadata, so a restarted agent neither claims
// twice nor forgets; a Completed claim is deleted `ttlAfterCompleted` later (its sandboxes stay).
import { CustomObjectsApi, PatchStrategy, setHeaderOptions, type KubeConfig, type KubernetesObject } from "@kubernetes/client-node";
import { ClaimCompletedReason, setCondition, type Condition } from "../../../schema/crd/conditions.ts";
import { GROUP, VERSION } from "../../../schema/crd/labels.ts";
import { ObjectCache } from "./object-cache.ts";
import { slimCustom } from "./slim.ts";

/** Metadata key marking the edge sandboxes a claim took (E2B metadata may not use the reserved prefixes). */
export const CLAIM_METADATA_KEY = "kruise-claim-uid";

export interface SandboxClaimObject extends KubernetesObject {
  spec: {
    templateName: string;
    replicas?: number;
    claimTimeout?: string;
    ttlAfterCompleted?: string;
    labels?: Record<string, string>;
    envVars?: Record<string, string>;
    shutdownTime?: string;
  };
  status?: { phase?: "Claiming" | "Completed"; claimedReplicas?: number; claimStartTime?: string; completionTime?: string; message?: string; conditions?: Condition[] };
}

/** How the controller reaches the edge's pools. */
export interface Claimer {
  /** Sandbox ids the edge holds for this claim uid (any state but killed). */
  claimed(team: string, claimUid: string): Promise<string[]>;
  /** Claims one sandbox; `not_found` when the template (SandboxSet) does not exist on the edge. */
  claim(team: string, req: { templateName: string; claimUid: string; envVars: Record<string, string>; labels: Record<string, string>; timeoutS?: number }): Promise<{ ok: true; sandboxId: string } | { ok: false; notFound: boolean; message: string }>;
}

/** Claims through the edge's E2B API with the team's API key. */
export class E2bApiClaimer implements Claimer {
  readonly #url: string;
  readonly #key: string;
  constructor(edgeUrl: string, apiKey: string) {
    this.#url = edgeUrl.replace(/\/$/, "");
    this.#key = apiKey;
  }

  async claimed(_team: string, claimUid: string): Promise<string[]> {
    const q = encodeURIComponent(`${CLAIM_METADATA_KEY}=${claimUid}`);
    const res = await fetch(`${this.#url}/sandboxes?metadata=${q}`, { headers: { "x-api-key": this.#key } });
    if (!res.ok) throw new Error(`edge list: HTTP ${res.status} ${await res.text()}`);
    return ((await res.json()) as { sandboxID: string }[]).map((s) => s.sandboxID);
  }

  async claim(_team: string, req: Parameters<Claimer["claim"]>[1]): ReturnType<Claimer["claim"]> {
    const body = { templateID: req.templateName, envVars: req.envVars, metadata: { ...req.labels, [CLAIM_METADATA_KEY]: req.claimUid }, timeout: req.timeoutS };
    const res = await fetch(`${this.#url}/sandboxes`, { method: "POST", headers: { "x-api-key": this.#key, "content-type": "application/json" }, body: JSON.stringify(body) });
    if (res.ok) return { ok: true, sandboxId: ((await res.json()) as { sandboxID: string }).sandboxID };
    const text = await res.text();
    return { ok: false, notFound: res.status === 404, message: `HTTP ${res.status} ${text}` };
  }
}

/** A Go duration as milliseconds (`1m`, `90s`, `1h30m`; negative = never). */
export function durationMs(d: string | undefined, fallback: number): number {
  if (!d) return fallback;
  const sign = d.startsWith("-") ? -1 : 1;
  let ms = 0;
  for (const [, n, unit] of d.replace(/^-/, "").matchAll(/([0-9.]+)(ns|us|µs|ms|s|m|h)/g)) {
    ms += Number(n) * { ns: 1e-6, us: 1e-3, µs: 1e-3, ms: 1, s: 1e3, m: 6e4, h: 3.6e6 }[unit as "s"];
  }
  return sign * ms;
}

const mergePatch = setHeaderOptions("Content-Type", PatchStrategy.MergePatch);

export interface SandboxClaimSyncOptions {
  kubeConfig: KubeConfig;
  namespace: string;
  claimer: Claimer;
  now?: () => number;
  log?: (msg: string) => void;
  /** How often an unfinished claim is looked at again. */
  retryMs?: number;
}

export class SandboxClaimSync {
  readonly claims: ObjectCache<SandboxClaimObject>;
  readonly #o: SandboxClaimSyncOptions;
  readonly #custom: CustomObjectsApi;
  readonly #now: () => number;
  readonly #timers = new Map<string, NodeJS.Timeout>();
  readonly #running = new Set<string>();
  /** Generation each claim was last scheduled for. */
  readonly #seen = new Map<string, number>();
  #stopped = false;

  constructor(opts: SandboxClaimSyncOptions) {
    this.#o = opts;
    this.#now = opts.now ?? Date.now;
    this.#custom = opts.kubeConfig.makeApiClient(CustomObjectsApi);
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
      this.#schedule(name, 0);
    });
  }

  async start(): Promise<void> {
    await this.claims.start();
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    for (const t of this.#timers.values()) clearTimeout(t);
    await this.claims.stop();
  }

  #schedule(name: string, delayMs: number): void {
    if (this.#stopped) return;
    clearTimeout(this.#timers.get(name));
    this.#timers.set(
      name,
      setTimeout(() => {
        this.#timers.delete(name);
        if (this.#running.has(name)) return this.#schedule(name, 100);
        this.#running.add(name);
        this.reconcile(name)
          .then((next) => next !== undefined && this.#schedule(name, next))
          .catch((err) => {
            this.#o.log?.(`sandboxclaim ${name}: ${(err as Error).message}`);
            this.#schedule(name, this.#o.retryMs ?? 2000);
          })
          .finally(() => this.#running.delete(name));
      }, delayMs),
    );
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
    let have = (await this.#o.claimer.claimed(team, uid)).length;
    let notFound: string | undefined;
    let lastError: string | undefined;
    // Upstream claims in batches of at most 50 per pass.
    const batch = Math.min(50, want - have);
    const results = await Promise.all(
      Array.from({ length: Math.max(0, batch) }, () =>
        this.#o.claimer.claim(team, { templateName: claim.spec.templateName, claimUid: uid, envVars: claim.spec.envVars ?? {}, labels: claim.spec.labels ?? {} }),
      ),
    );
    for (const r of results) {
      if (r.ok) have++;
      else if (r.notFound) notFound = r.message;
      else lastError = r.message;
    }
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
    const updated = await this.#custom.patchNamespacedCustomObjectStatus(
      { group: GROUP, version: VERSION, namespace: this.#o.namespace, plural: "sandboxclaims", name, body: { status: next } },
      mergePatch,
    );
    this.claims.remember(updated);
    if (phase === "Completed") return Math.max(0, durationMs(claim.spec.ttlAfterCompleted, 60 * 60_000));
    return Math.min(this.#o.retryMs ?? 2000, Math.max(0, deadline - now));
  }
}
