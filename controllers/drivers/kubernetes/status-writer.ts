// The Sandbox's status, conditions and Events: the status computed from the pod (pod-state.ts)
// or, while an ensure is retried or has failed for good, from that failure; patched only when it
// differs from the stored one, with one Event per new failure reason.
import { ANNOTATION, API_VERSION, GROUP, LABEL, VERSION } from "../../../schema/crd/labels.ts";
import { hasTrafficProxy } from "./traffic-objects.ts";
import { RESTORE_PENDING_ANNOTATION } from "./checkpoint/snapshots.ts";
import { EventReason, ReadyReason, RESTORE_PENDING, SandboxConditionType, setCondition, type Condition } from "../../../schema/crd/conditions.ts";
import type { DriverContext } from "./context.ts";
import { mergePatch, PLURAL, postEvent, stableJson, STATUS_WRITE_TIMEOUT_MS, tolerate, within } from "./kube-api.ts";
import type { NamespaceScope } from "./namespace-scope.ts";
import type { KubeSandboxObservation, SandboxObject, SandboxSetObject } from "./objects.ts";
import { runtimeUrl } from "./pod-spec.ts";
import { runtimeContainer, runtimeHealth, sandboxState, sandboxStatus, withPendingRestore, type SandboxFacts, type SandboxStatus } from "./pod-state.ts";

/** A status PATCH aborted for want of an answer: the status is still to be written, nothing else
 * failed (the driver hands it to its status scheduler instead of failing the converge). */
export class StatusWriteTimeout extends Error {
  override readonly name = "StatusWriteTimeout";
}

export class StatusWriter {
  readonly #ctx: DriverContext;
  /** Last Ready reason an Event was emitted for, per sandbox, so each transition is reported once. */
  readonly #eventReason = new Map<string, string>();
  /** Conditions other parts own (the CSI mounts'), added to every status written. */
  more: (id: string, conditions: SandboxStatus["conditions"], now: string) => SandboxStatus["conditions"] = (_id, c) => c;
  /** The runtime container's restart count last seen per sandbox (a rise is an Event). */
  readonly #runtimeRestarts = new Map<string, number>();
  /** The resourceVersion of each sandbox's last status write of ours (its watch echo is ours). */
  readonly #wroteRv = new Map<string, string>();
  /** The last failed ensure of each sandbox still being retried, shown as its Ready condition. */
  readonly #failing = new Map<string, { reason: ReadyReason; message: string }>();

  /** How long a status PATCH may go unanswered before it is aborted (and the write fails). */
  readonly #writeTimeoutMs: number;

  constructor(ctx: DriverContext, opts: { writeTimeoutMs?: number } = {}) {
    this.#ctx = ctx;
    this.#writeTimeoutMs = opts.writeTimeoutMs ?? STATUS_WRITE_TIMEOUT_MS;
  }

  /** What a sandbox's phase and status are computed from. */
  facts(sbx: SandboxObject | undefined, id: string): SandboxFacts {
    const pod = this.#ctx.pod(id);
    return {
      paused: Boolean(sbx?.spec.paused),
      pauseStrategy: sbx?.metadata?.annotations?.[ANNOTATION.pauseStrategy] === "Freeze" ? "Freeze" : "Stop",
      frozen: Boolean(pod) && sbx?.metadata?.annotations?.[ANNOTATION.frozenPod] === pod?.metadata?.uid,
      pod,
    };
  }

  /** What the driver reports of a sandbox (from the informers; `deferredGeneration`: one accepted
   * but not written yet). */
  observe(id: string, deferredGeneration = 0): KubeSandboxObservation | undefined {
    const sbx = this.#ctx.sandbox(id);
    const pod = this.#ctx.pod(id);
    if (!sbx && !pod) return undefined;
    // Network: the pod was built with its traffic-proxy governing it (traffic-pod.ts).
    const enforced = { cpu: true, memory: true, pids: false, network: hasTrafficProxy(pod, true) };
    if (!sbx) {
      return { id, generation: 0, phase: "Failed", level: "kubernetes", createdAt: pod!.metadata?.creationTimestamp?.toString() ?? "", enforced, ready: false, message: "pod without a Sandbox (orphan)" };
    }
    const facts = this.facts(sbx, id);
    const state = withPendingRestore(sandboxState(facts), facts.paused, sbx.metadata?.annotations?.[RESTORE_PENDING_ANNOTATION]);
    return {
      id,
      generation: Math.max(Number(sbx.metadata?.annotations?.[ANNOTATION.generation] ?? 0), deferredGeneration),
      phase: state.driverPhase,
      pauseStrategy: facts.paused ? facts.pauseStrategy : facts.frozen ? "Freeze" : undefined,
      level: "kubernetes",
      createdAt: new Date(String(sbx.metadata?.creationTimestamp ?? this.#ctx.now())).toISOString(),
      enforced,
      ready: state.ready,
      endpoint: state.driverPhase === "Running" ? runtimeUrl(pod) : undefined,
      address: pod?.status?.podIP || undefined,
      reason: state.reason,
      message: state.message || undefined,
    };
  }

  /** Shows `failure` as the sandbox's Ready condition until `succeeded` (or `forget`). */
  failing(id: string, failure: { reason: ReadyReason; message: string }): void {
    this.#failing.set(id, failure);
  }

  succeeded(id: string): void {
    this.#failing.delete(id);
  }

  /** Whether `sbx` is the version our own last status write made. */
  wrote(id: string, sbx: SandboxObject): boolean {
    return this.#wroteRv.get(id) === sbx.metadata?.resourceVersion;
  }

  forget(id: string): void {
    this.#wroteRv.delete(id);
    this.#eventReason.delete(id);
    this.#runtimeRestarts.delete(id);
    this.#failing.delete(id);
  }

  /** Writes the Sandbox status when it differs from what is stored, and an Event per new failure reason. */
  async write(id: string): Promise<void> {
    const ctx = this.#ctx;
    const sc = ctx.scopeOf(id);
    const sbx = ctx.sandbox(id);
    if (!sbx || sbx.metadata?.deletionTimestamp) return;
    const facts = this.facts(sbx, id);
    const failing = this.#failing.get(id);
    const state = failing ? { ...sandboxState(facts), ready: false, ...failing } : sandboxState(facts);
    const now = new Date(ctx.now()).toISOString();
    const status = sandboxStatus(sbx.status, state, facts, sbx.metadata?.generation, now);
    status.conditions = withRestorePending(this.more(id, status.conditions, now), sbx, now);
    const comparable = (s: SandboxStatus | undefined) => stableJson({ ...s, conditions: s?.conditions?.map((c) => ({ ...c, lastTransitionTime: "" })) });
    if (comparable(sbx.status) !== comparable(status)) {
      ctx.count();
      const updated = await tolerate(
        ctx.custom.patchNamespacedCustomObjectStatus(
          { group: GROUP, version: VERSION, namespace: sc.namespace, plural: PLURAL.sandbox, name: sbx.metadata!.name!, body: { status } },
          // Each sandbox's writes run one at a time (its converge chain): a PATCH whose stream hangs
          // on the pooled session would hold that sandbox's every later write (kube-api.ts within).
          within(this.#writeTimeoutMs, mergePatch),
        ) as Promise<SandboxObject>,
        [404],
      ).catch((err: unknown) => {
        if ((err as Error)?.name !== "TimeoutError") throw err;
        throw new StatusWriteTimeout(`status of sandbox ${id}: no answer from the API server in ${this.#writeTimeoutMs} ms`, { cause: err });
      });
      if (updated) {
        sc.sandboxes.remember(updated);
        this.#wroteRv.set(id, updated.metadata?.resourceVersion ?? "");
      }
    }
    const restarts = runtimeContainer(facts.pod)?.restartCount ?? 0;
    const seen = this.#runtimeRestarts.get(id);
    this.#runtimeRestarts.set(id, restarts);
    if (seen !== undefined && restarts > seen) await this.event(sc, sbx, "Warning", EventReason.RuntimeRestarted, runtimeHealth(facts.pod)?.message ?? `${restarts} restarts`);
    if (this.#eventReason.get(id) !== state.reason) {
      this.#eventReason.set(id, state.reason);
      if (state.reason === "Unschedulable") await this.event(sc, sbx, "Warning", EventReason.FailedScheduling, state.message);
      if (state.reason === "ImagePullFailed") await this.event(sc, sbx, "Warning", EventReason.ImagePullFailed, state.message);
      if (state.reason === ReadyReason.ReconcileError) await this.event(sc, sbx, "Warning", EventReason.ReconcileError, state.message);
    }
  }

  /** An Event about a Sandbox; best effort (a refused Event is logged, never an ensure's failure).
   * A given `key` names it under the Sandbox's name, so it is posted once (one of that name
   * already there is left as it is). */
  async event(sc: NamespaceScope, sbx: SandboxObject, type: "Normal" | "Warning", reason: string, message: string, key?: string): Promise<void> {
    await this.#post(sc, "Sandbox", sbx.metadata!.name!, sbx.metadata!.uid, type, reason, message, key);
  }

  /** An Event about a sandbox's SandboxSet (none: nothing), named `key` under the set's name so
   * the same one (its members failing one after another for one cause) is posted once. */
  async poolEvent(sc: NamespaceScope, sbx: SandboxObject, reason: string, message: string, key: string): Promise<void> {
    const pool = sbx.metadata?.labels?.[LABEL.pool];
    const set = pool ? sc.sandboxSets.get(pool) : undefined;
    if (!set) return;
    await this.setEvent(sc, set, reason, message, key);
  }

  /** A Warning Event about a SandboxSet, named `key` under the set's name so it is posted once. */
  async setEvent(sc: NamespaceScope, set: SandboxSetObject, reason: string, message: string, key: string): Promise<void> {
    await this.#post(sc, "SandboxSet", set.metadata!.name!, set.metadata?.uid, "Warning", reason, message, key);
  }

  async #post(sc: NamespaceScope, kind: string, name: string, uid: string | undefined, type: "Normal" | "Warning", reason: string, message: string, key?: string): Promise<void> {
    this.#ctx.count();
    const about = { apiVersion: API_VERSION, kind, name, namespace: sc.namespace, uid };
    await postEvent(this.#ctx.core, about, type, reason, message, new Date(this.#ctx.now()), (msg) => this.#ctx.log(msg), key ? `${name.slice(0, 200)}.${key}` : undefined);
  }
}

/** The `RestorePending` condition while the Sandbox's next pod must name a checkpoint (kubectl
 * shows it beside the paused phase of a Stop-paused sandbox upgraded with CheckpointRestore). */
function withRestorePending(conditions: Condition[], sbx: SandboxObject, now: string): Condition[] {
  const restoring = sbx.metadata?.annotations?.[RESTORE_PENDING_ANNOTATION];
  const rest = conditions.filter((c) => c.type !== SandboxConditionType.RestorePending);
  if (!restoring) return rest;
  const message = `the next pod names checkpoint ${restoring} for the checkpoint engine to restore${sbx.spec.paused ? " (made when the sandbox resumes)" : ""}`;
  return setCondition(conditions, { type: SandboxConditionType.RestorePending, status: "True", reason: "CheckpointNotRestored", message }, now);
}
