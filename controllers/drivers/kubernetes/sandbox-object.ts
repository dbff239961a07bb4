// The Sandbox custom object: created from its template (a SandboxSet's, or an image) with the
// labels, annotations, finalizer and owner a sandbox carries; brought in line with each intent
// (claim, user metadata, generation, pause); annotated when frozen; labelled with its claim; and
// deleted last on destroy (its finalizer is ours).
import { RESTORE_ANNOTATION, RESTORE_PENDING_ANNOTATION } from "./checkpoint/snapshots.ts";
import { ANNOTATION, API_VERSION, GROUP, LABEL, SANDBOX_FINALIZER, VERSION } from "../../../schema/crd/labels.ts";
import { userAnnotations, userLabels } from "../../../schema/crd/user-metadata.ts";
import type { V1PodTemplateSpec } from "@kubernetes/client-node";
import { SandboxNotFoundError } from "../driver.ts";
import type { DriverContext } from "./context.ts";
import { jsonPatch, mergePatch, PLURAL, tolerate } from "./kube-api.ts";
import type { NamespaceScope } from "./namespace-scope.ts";
import { idLabel, sandboxName, type KubeDesiredSandbox, type SandboxObject, type SandboxSetObject } from "./objects.ts";
import { imageTemplate, templateHash, type VolumeClaimTemplate } from "./pod-spec.ts";
import type { PodWriter } from "./pod-writer.ts";
import { poolRevision } from "./pool-status.ts";

export class SandboxObjects {
  readonly #ctx: DriverContext;
  readonly #pods: PodWriter;

  constructor(ctx: DriverContext, pods: PodWriter) {
    this.#ctx = ctx;
    this.#pods = pods;
  }

  /** The template a new sandbox is built from: its pool's, a SandboxSet named like its template, or the image. */
  #resolveTemplate(d: KubeDesiredSandbox, sc: NamespaceScope): { set?: SandboxSetObject; template: V1PodTemplateSpec; vcts: VolumeClaimTemplate[] } {
    const set = sc.sandboxSets.get(d.pool ?? d.template);
    if (set?.spec.template) return { set, template: set.spec.template, vcts: set.spec.volumeClaimTemplates ?? [] };
    return { template: imageTemplate(d.template), vcts: [] };
  }

  async create(d: KubeDesiredSandbox, sc: NamespaceScope): Promise<SandboxObject> {
    const { set, template, vcts } = this.#resolveTemplate(d, sc);
    const pool = set?.metadata?.name;
    const claimed = d.claimed ?? pool === undefined;
    const labels: Record<string, string> = {
      ...userLabels(d.labels),
      [LABEL.sandboxId]: idLabel(d.id),
      [LABEL.claimed]: String(claimed),
      [LABEL.templateHash]: set ? poolRevision(set) : templateHash(template),
    };
    if (pool) Object.assign(labels, { [LABEL.pool]: pool, [LABEL.template]: pool });
    const ownerReferences =
      set && !claimed ? [{ apiVersion: API_VERSION, kind: "SandboxSet", name: pool!, uid: set.metadata!.uid!, controller: true, blockOwnerDeletion: true }] : [];
    const body: SandboxObject = {
      apiVersion: API_VERSION,
      kind: "Sandbox",
      metadata: {
        name: sandboxName(d.id, pool),
        namespace: sc.namespace,
        labels,
        annotations: {
          ...userAnnotations(d.annotations),
          [ANNOTATION.sandboxId]: d.id,
          [ANNOTATION.generation]: String(d.generation),
          [ANNOTATION.pauseStrategy]: d.pauseStrategy,
          [ANNOTATION.desiredPaused]: String(d.state === "Paused"),
          ...(d.revision ? { [ANNOTATION.revision]: d.revision } : {}),
          ...(d.restoreCheckpointId ? { [RESTORE_ANNOTATION]: d.restoreCheckpointId } : {}),
        },
        finalizers: [SANDBOX_FINALIZER],
        ownerReferences,
      },
      spec: { template, volumeClaimTemplates: vcts, paused: d.state === "Paused", pauseStrategy: { type: "Stop" }, ...(set?.spec.runtimes ? { runtimes: set.spec.runtimes } : {}) },
    };
    this.#ctx.count();
    const created = (await this.#ctx.custom.createNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: sc.namespace, plural: PLURAL.sandbox, body })) as SandboxObject;
    return sc.sandboxes.created(created);
  }

  /** Brings labels, owner, pause and generation of an existing Sandbox in line with `d`. */
  async update(sbx: SandboxObject, d: KubeDesiredSandbox): Promise<SandboxObject> {
    const meta = sbx.metadata!;
    const claimedNow = meta.labels?.[LABEL.claimed] === "true";
    // Without a word on ownership (a caller that does not know pools) the current label stands.
    const claimed = d.claimed ?? claimedNow;
    const patch: { metadata: Record<string, unknown>; spec?: Record<string, unknown> } = { metadata: {} };
    if (claimed !== claimedNow) {
      patch.metadata.labels = { [LABEL.claimed]: String(claimed) };
      if (claimed) {
        // Leaving the pool: the SandboxSet no longer owns it and counts one fewer warm member.
        patch.metadata.ownerReferences = (meta.ownerReferences ?? []).filter((r) => r.kind !== "SandboxSet");
        // When the claim was taken, not when this write goes (it may trail the claim by up to 1 s).
        patch.metadata.annotations = { [ANNOTATION.claimTimestamp]: new Date(d.claimedAt ?? this.#ctx.now()).toISOString() };
      }
    }
    // User labels and annotations (a claim's, E2B metadata) go on the Sandbox and its pod; added
    // or changed, never removed (a warm member has none: they come with the claim).
    const added = Object.fromEntries(Object.entries(userLabels(d.labels)).filter(([k, v]) => meta.labels?.[k] !== v));
    if (Object.keys(added).length) patch.metadata.labels = { ...added, ...(patch.metadata.labels as Record<string, string> | undefined) };
    const addedAnnotations = Object.fromEntries(Object.entries(userAnnotations(d.annotations)).filter(([k, v]) => meta.annotations?.[k] !== v));
    const annotations = { ...addedAnnotations, ...(patch.metadata.annotations as Record<string, string> | undefined) };
    if (meta.annotations?.[ANNOTATION.generation] !== String(d.generation)) annotations[ANNOTATION.generation] = String(d.generation);
    // A Sandbox made before revisions were recorded takes the one it is asked for (no recreate).
    if (!meta.annotations?.[ANNOTATION.revision] && d.revision) annotations[ANNOTATION.revision] = d.revision;
    if (meta.annotations?.[ANNOTATION.pauseStrategy] !== d.pauseStrategy) annotations[ANNOTATION.pauseStrategy] = d.pauseStrategy;
    const paused = d.state === "Paused";
    if (meta.annotations?.[ANNOTATION.desiredPaused] !== String(paused)) annotations[ANNOTATION.desiredPaused] = String(paused);
    if (Object.keys(annotations).length) patch.metadata.annotations = annotations;
    if (Boolean(sbx.spec.paused) !== paused) patch.spec = { paused };
    if (!Object.keys(patch.metadata).length && !patch.spec) return sbx;
    this.#ctx.count();
    const sc = this.#ctx.scopeOf(d.id);
    const pod = this.#ctx.pod(d.id);
    // A claim relabels the pod too (selectors over pods see it leave the pool); both in parallel.
    const podLabels = { ...added, ...(claimed && !claimedNow ? { [LABEL.claimed]: "true" } : {}) };
    const podMeta = { ...(Object.keys(podLabels).length ? { labels: podLabels } : {}), ...(Object.keys(addedAnnotations).length ? { annotations: addedAnnotations } : {}) };
    const [updated] = await Promise.all([
      // Answered as plain JSON (kube-api.ts patchJson), as the pod's below.
      this.#ctx.patchJson(`/apis/${GROUP}/${VERSION}/namespaces/${encodeURIComponent(sc.namespace)}/${PLURAL.sandbox}/${encodeURIComponent(meta.name!)}`, patch) as Promise<SandboxObject>,
      Object.keys(podMeta).length && pod ? this.#pods.patch(sc, pod, { metadata: podMeta }) : undefined,
    ]);
    return sc.sandboxes.remember(updated);
  }

  /** Whether a claimed sandbox is asked for another template revision than its Sandbox's. */
  recreatePending(sbx: SandboxObject, d: KubeDesiredSandbox): boolean {
    const had = sbx.metadata?.annotations?.[ANNOTATION.revision];
    return sbx.metadata?.labels?.[LABEL.claimed] === "true" && d.revision !== undefined && had !== undefined && had !== d.revision;
  }

  /** Puts the new revision's template on the Sandbox (the SandboxSet's as it is now, else the
   * image's), so the next pod is built from it; the volume claim templates stay, so do the PVCs.
   * A JSON patch: a merge patch would keep keys the new template dropped. CheckpointRestore
   * (`d.restoreCheckpointId`): the same patch marks the restore pending, so a failure or a restart
   * before the next pod is made cannot lose it (`restorePending`, `restoreDone`). */
  async retemplate(sc: NamespaceScope, sbx: SandboxObject, d: KubeDesiredSandbox): Promise<SandboxObject> {
    const set = sc.sandboxSets.get(d.pool ?? d.template);
    const template = set?.spec.template ?? imageTemplate(d.template);
    const esc = (k: string) => k.replaceAll("~", "~0").replaceAll("/", "~1");
    const ops: object[] = [
      { op: "replace", path: "/spec/template", value: template },
      { op: "add", path: `/metadata/labels/${esc(LABEL.templateHash)}`, value: set ? poolRevision(set) : templateHash(template) },
      { op: "add", path: `/metadata/annotations/${esc(ANNOTATION.revision)}`, value: d.revision },
    ];
    if (set?.spec.runtimes) ops.push({ op: "add", path: "/spec/runtimes", value: set.spec.runtimes });
    if (d.restoreCheckpointId) ops.push({ op: "add", path: `/metadata/annotations/${esc(RESTORE_PENDING_ANNOTATION)}`, value: d.restoreCheckpointId });
    this.#ctx.count();
    const updated = (await this.#ctx.custom.patchNamespacedCustomObject(
      { group: GROUP, version: VERSION, namespace: sc.namespace, plural: PLURAL.sandbox, name: sbx.metadata!.name!, body: ops },
      jsonPatch,
    )) as SandboxObject;
    return sc.sandboxes.remember(updated);
  }

  /** The checkpoint the sandbox's next pod must name (its recreate marked it), if any. */
  restorePending(sbx: SandboxObject | undefined): string | undefined {
    return sbx?.metadata?.annotations?.[RESTORE_PENDING_ANNOTATION] || undefined;
  }

  /** Clears the pending restore once `pod` (created, or found after a restart) names it. */
  async restoreDone(id: string, sbx: SandboxObject, pod: { metadata?: { annotations?: Record<string, string> } }): Promise<SandboxObject> {
    const pending = this.restorePending(sbx);
    if (!pending || pod.metadata?.annotations?.[RESTORE_ANNOTATION] !== pending) return sbx;
    return (await this.patchMetadata(id, sbx, { annotations: { [RESTORE_PENDING_ANNOTATION]: null } }, true)) ?? sbx;
  }

  /** Merge-patches the sandbox's Sandbox (metadata only) and remembers the result; a Sandbox gone
   * meanwhile is skipped when `tolerateGone`. */
  async patchMetadata(id: string, sbx: SandboxObject, metadata: object, tolerateGone = false): Promise<SandboxObject | undefined> {
    const sc = this.#ctx.scopeOf(id);
    this.#ctx.count();
    const req = this.#ctx.custom.patchNamespacedCustomObject(
      { group: GROUP, version: VERSION, namespace: sc.namespace, plural: PLURAL.sandbox, name: sbx.metadata!.name!, body: { metadata } },
      mergePatch,
    ) as Promise<SandboxObject>;
    const updated = tolerateGone ? await tolerate(req, [404]) : await req;
    return updated && sc.sandboxes.remember(updated);
  }

  /** Records which pod the runtime froze (an annotation, so a concurrent status write cannot lose it). */
  async markFrozen(id: string, podUid: string | null): Promise<void> {
    const sbx = this.#ctx.sandbox(id);
    if (!sbx) throw new SandboxNotFoundError(id);
    await this.patchMetadata(id, sbx, { annotations: { [ANNOTATION.frozenPod]: podUid } });
  }

  /** Removes the Sandboxes of a sandbox: our finalizer first, then the object. */
  async delete(sc: NamespaceScope, id: string): Promise<void> {
    for (const sbx of sc.sandboxes.forSandbox(idLabel(id))) {
      const name = sbx.metadata!.name!;
      this.#ctx.count(2);
      await tolerate(
        this.#ctx.custom.patchNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: sc.namespace, plural: PLURAL.sandbox, name, body: { metadata: { finalizers: null } } }, mergePatch),
        [404],
      );
      await tolerate(this.#ctx.custom.deleteNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: sc.namespace, plural: PLURAL.sandbox, name }), [404]);
      sc.sandboxes.forget(name);
    }
  }
}
