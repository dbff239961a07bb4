// E2B snapshots on Kubernetes: each is a Checkpoint object (OpenKruise §1.5) in the sandbox's
// namespace, for the cluster's checkpoint engine (a node-level component, upstream's external
// controller) to fill: it copies the container's files and reports `status.checkpointId`. The
// agent creates the object, waits for the engine's verdict, and later names the checkpoint on a
// new sandbox's Sandbox and pod (`agents.kruise.io/restore-checkpoint-id`) for the engine to
// restore. Without an engine in the cluster a snapshot fails after the wait, saying so.
import { createHash } from "node:crypto";
import type { CustomObjectsApi, KubernetesObject } from "@kubernetes/client-node";
import { API_VERSION, GROUP, LABEL, VERSION } from "../../../../schema/crd/labels.ts";
import { TerminalError, type SnapshotRef } from "../../driver.ts";
import type { DriverContext } from "../context.ts";
import { statusCode, tolerate } from "../kube-api.ts";
import type { NamespaceScope } from "../namespace-scope.ts";
import type { SandboxObject } from "../objects.ts";
import type { CheckpointStatus } from "./machine.ts";

const PLURAL = "checkpoints";
/** Label (a hash: snapshot ids have `/` and `:`) and annotation (the id itself) of the snapshot. */
export const SNAPSHOT_LABEL = "agents.kruise.io/snapshot";
export const SNAPSHOT_ANNOTATION = "agents.kruise.io/snapshot-id";
/** On a Sandbox and its pod made from a snapshot: the checkpoint its engine restores. */
export const RESTORE_ANNOTATION = "agents.kruise.io/restore-checkpoint-id";
/** On a Sandbox whose CheckpointRestore recreate is under way: the checkpoint its next pod names
 * (RESTORE_ANNOTATION), from the retemplate until a pod carrying it is created. Its own key, so a
 * Sandbox made from a snapshot (which keeps RESTORE_ANNOTATION for good) does not restore again. */
export const RESTORE_PENDING_ANNOTATION = "agents.kruise.io/restore-pending-checkpoint-id";
/** Upstream's default for `x-e2b-kruise-snapshot-wait-success-seconds`. */
export const CHECKPOINT_WAIT_MS = 60_000;

export interface CheckpointObject extends KubernetesObject {
  spec?: { sandboxName?: string; podName?: string; keepRunning?: boolean; persistentContents?: string[] };
  status?: CheckpointStatus;
}

const hash = (snapshotId: string) => createHash("sha256").update(snapshotId).digest("hex").slice(0, 32);
export const checkpointName = (snapshotId: string) => `snap-${hash(snapshotId)}`;

export class CheckpointSnapshots {
  readonly #ctx: DriverContext;
  readonly #waitMs: number;
  readonly #pollMs: number;

  constructor(ctx: DriverContext, opts: { waitMs?: number; pollMs?: number } = {}) {
    this.#ctx = ctx;
    this.#waitMs = opts.waitMs ?? CHECKPOINT_WAIT_MS;
    this.#pollMs = opts.pollMs ?? 250;
  }

  get #custom(): CustomObjectsApi {
    return this.#ctx.custom;
  }

  /** Records snapshot `snapshotId` of the sandbox as a Checkpoint and waits for the engine. A
   * Checkpoint that exists (a redelivered intent) is waited on, not made twice. */
  async take(sc: NamespaceScope, sbx: SandboxObject, podName: string | undefined, sandboxId: string, snapshotId: string): Promise<SnapshotRef> {
    const name = checkpointName(snapshotId);
    const body: CheckpointObject = {
      apiVersion: API_VERSION,
      kind: "Checkpoint",
      metadata: {
        name,
        labels: { [SNAPSHOT_LABEL]: hash(snapshotId), [LABEL.sandboxName]: sbx.metadata!.name!, "agents.kruise.io/checkpoint-type": "filesystem" },
        annotations: { [SNAPSHOT_ANNOTATION]: snapshotId, "agents.kruise.io/sandbox-id": sandboxId },
      },
      // No owner: a snapshot outlives its sandbox.
      spec: { sandboxName: sbx.metadata!.name!, ...(podName ? { podName } : {}), keepRunning: true, persistentContents: ["filesystem"] },
    };
    this.#ctx.count();
    await this.#custom.createNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: sc.namespace, plural: PLURAL, body }).catch((err: unknown) => {
      if (statusCode(err) !== 409) throw err;
    });
    const deadline = this.#ctx.now() + this.#waitMs;
    for (;;) {
      this.#ctx.count();
      const cp = (await this.#custom.getNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: sc.namespace, plural: PLURAL, name })) as CheckpointObject;
      const s = cp.status;
      if (s?.phase === "Succeeded" && s.checkpointId) {
        return { id: snapshotId, sandboxId, location: `checkpoint:${sc.namespace}/${name}/${s.checkpointId}`, bytes: 0, createdAt: new Date(String(cp.metadata?.creationTimestamp ?? this.#ctx.now())).toISOString() };
      }
      if (s?.phase === "Failed") throw new TerminalError("CheckpointFailed", `checkpoint ${sc.namespace}/${name} failed: ${s.message ?? "no reason given"}`);
      if (this.#ctx.now() >= deadline) {
        throw new TerminalError("CheckpointTimeout", `checkpoint ${sc.namespace}/${name} did not succeed within ${Math.round(this.#waitMs / 1000)} s (phase ${s?.phase ?? "none"}: is a checkpoint engine running in the cluster?)`);
      }
      await new Promise((r) => setTimeout(r, this.#pollMs));
    }
  }

  /** The checkpoint id a sandbox made from `snapshotId` restores, from the namespace it lives in. */
  async restoreId(namespace: string, snapshotId: string): Promise<string> {
    this.#ctx.count();
    const cp = (await tolerate(this.#custom.getNamespacedCustomObject({ group: GROUP, version: VERSION, namespace, plural: PLURAL, name: checkpointName(snapshotId) }), [404])) as CheckpointObject | undefined;
    if (!cp || cp.metadata?.annotations?.[SNAPSHOT_ANNOTATION] !== snapshotId) throw new TerminalError("SnapshotNotFound", `snapshot ${snapshotId} has no Checkpoint in namespace ${namespace}`);
    if (cp.status?.phase !== "Succeeded" || !cp.status.checkpointId) throw new TerminalError("SnapshotNotReady", `checkpoint ${namespace}/${cp.metadata?.name} is ${cp.status?.phase ?? "Pending"}${cp.status?.message ? `: ${cp.status.message}` : ""}`);
    return cp.status.checkpointId;
  }

  /** Checks the pending restore read back from a Sandbox (`restorePending`) before a pod names it:
   * that annotation is on an object a team's kubectl user may edit, so it must be the checkpoint
   * id of a Succeeded Checkpoint of a snapshot in the sandbox's own namespace, as restoreId gives
   * (review 25 M1). One list of the namespace's Checkpoints, made only for a pod with a restore
   * pending. Refused: a TerminalError, and no pod names it. */
  async checkRestore(namespace: string, checkpointId: string): Promise<void> {
    this.#ctx.count();
    const list = (await this.#custom.listNamespacedCustomObject({ group: GROUP, version: VERSION, namespace, plural: PLURAL })) as { items?: CheckpointObject[] };
    const ok = (list.items ?? []).some((cp) => cp.metadata?.annotations?.[SNAPSHOT_ANNOTATION] && cp.status?.phase === "Succeeded" && cp.status.checkpointId === checkpointId);
    if (!ok) throw new TerminalError("SnapshotNotFound", `the pending restore names checkpoint ${JSON.stringify(checkpointId.slice(0, 128))}, which is no Succeeded Checkpoint of a snapshot in namespace ${namespace}: no pod is made naming it`);
  }

  /** Deletes the snapshot's Checkpoint wherever the agent watches (its engine frees the copy). */
  async delete(scopes: NamespaceScope[], snapshotId: string): Promise<void> {
    await Promise.all(
      scopes.map(async (sc) => {
        this.#ctx.count();
        await tolerate(this.#custom.deleteNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: sc.namespace, plural: PLURAL, name: checkpointName(snapshotId) }), [404]);
      }),
    );
  }
}
