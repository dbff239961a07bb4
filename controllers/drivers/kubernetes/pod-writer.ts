// A sandbox's Pod and PVCs: created from the Sandbox's template (pod-spec.ts), relabelled,
// deleted on a Stop pause or destroy, changed in place on a claim (the main container's image by
// a strategic patch, its CPU through the resize subresource), and its runtime called to freeze
// and thaw.
import { RESTORE_ANNOTATION } from "./checkpoint/snapshots.ts";
import type { NetworkingV1Api, V1Pod } from "@kubernetes/client-node";
import { EventReason, ReadyReason } from "../../../schema/crd/conditions.ts";
import { ANNOTATION, GROUP, LABEL, VERSION } from "../../../schema/crd/labels.ts";
import type { InjectionConfig } from "../../../schema/crd/injection.ts";
import { platformPrefix, userAnnotations, userLabels } from "../../../schema/crd/user-metadata.ts";
import { SandboxNotFoundError, TerminalError, type InplaceUpdate } from "../driver.ts";
import { ownerRef, type DriverContext } from "./context.ts";
import { apiMessage, mergePatch, PLURAL, stableJson, statusCode, strategicPatch, tolerate } from "./kube-api.ts";
import type { NamespaceScope } from "./namespace-scope.ts";
import { idLabel, type KubeDesiredSandbox, type SandboxObject } from "./objects.ts";
import { buildPod, buildPvc, imageTemplate, runtimeUrl } from "./pod-spec.ts";
import { mainContainer } from "./pod-resources.ts";
import { podRuntimeToken, runtimeIngressPolicy, runtimeTokenSecret, runtimeTokenSecretName } from "./runtime-token.ts";
import type { StatusWriter } from "./status-writer.ts";

/** How pods' runtimes are kept closed (runtime-token.ts): the key their tokens derive from, and
 * the agent's namespace, the only one the namespace's ingress policy admits to the runtime ports. */
export interface RuntimeAuth {
  key: string;
  agentNamespace: string;
  net: NetworkingV1Api;
}

export class PodWriter {
  readonly #ctx: DriverContext;
  readonly #status: StatusWriter;
  readonly #runtimeImage: string;
  readonly #injection: () => InjectionConfig;
  /** The claim's token, once its /init set it in the pod's runtime (before: the pod's own). */
  readonly #tokens = new Map<string, string>();
  readonly #auth: RuntimeAuth;
  /** Namespaces whose ingress policy this agent wrote since it started. */
  readonly #policed = new Set<string>();

  readonly #interpreterImage: string;
  readonly #runtimeSpans: boolean;
  /** New pods get the traffic-proxy as a native sidecar (set by the driver's start()). */
  nativeSidecar = false;

  constructor(ctx: DriverContext, status: StatusWriter, runtimeImage: string, injection: () => InjectionConfig, interpreterImage: string, auth: RuntimeAuth, runtimeSpans = false) {
    this.#auth = auth;
    this.#interpreterImage = interpreterImage;
    this.#runtimeSpans = runtimeSpans;
    this.#ctx = ctx;
    this.#status = status;
    this.#runtimeImage = runtimeImage;
    this.#injection = injection;
  }

  /** Merge-patches a pod (a claim's relabel) and remembers the answer: plain JSON, which the
   * informer slims as it does the watch's objects (kube-api.ts `patchJson`). */
  async patch(sc: NamespaceScope, pod: V1Pod, body: object): Promise<void> {
    this.#ctx.count();
    const name = pod.metadata!.name!;
    const updated = await tolerate(this.#ctx.patchJson(`/api/v1/namespaces/${encodeURIComponent(sc.namespace)}/pods/${encodeURIComponent(name)}`, body), [404]);
    if (updated) sc.pods.remember(updated);
  }

  async ensurePvcs(sc: NamespaceScope, sbx: SandboxObject): Promise<void> {
    const labels = { [LABEL.sandboxId]: sbx.metadata!.labels![LABEL.sandboxId]! };
    for (const vct of sbx.spec.volumeClaimTemplates ?? []) {
      const body = buildPvc(vct, { name: sbx.metadata!.name!, namespace: sc.namespace, labels, owner: ownerRef(sbx) });
      if (sc.pvcs.get(body.metadata!.name!)) continue;
      this.#ctx.count();
      const created = await tolerate(this.#ctx.core.createNamespacedPersistentVolumeClaim({ namespace: sc.namespace, body }), [409]);
      if (created) sc.pvcs.created(created);
    }
  }

  /** `traffic`: the sandbox is governed (or its template lists traffic-proxy); its ConfigMap is written. */
  async create(sc: NamespaceScope, sbx: SandboxObject, d: KubeDesiredSandbox, traffic?: { configMap: string; governed: boolean }): Promise<void> {
    const labels = {
      ...userLabels(d.labels),
      ...Object.fromEntries(
        [LABEL.sandboxId, LABEL.pool, LABEL.template, LABEL.claimed, LABEL.templateHash].flatMap((k) => (sbx.metadata?.labels?.[k] ? [[k, sbx.metadata.labels[k]]] : [])),
      ),
    };
    const body = buildPod({
      name: sbx.metadata!.name!,
      namespace: sc.namespace,
      template: sbx.spec.template ?? imageTemplate(d.template),
      volumeClaimTemplates: sbx.spec.volumeClaimTemplates ?? [],
      labels,
      annotations: { ...userAnnotations(d.annotations), ...(d.restoreCheckpointId ? { [RESTORE_ANNOTATION]: d.restoreCheckpointId } : {}) },
      owner: ownerRef(sbx),
      runtimeImage: this.#runtimeImage,
      injection: this.#injection(),
      runtimes: sbx.spec.runtimes,
      ...(d.codeInterpreter ? { interpreterImage: this.#interpreterImage } : {}),
      ...(d.nestedUserNamespaces ? { nestedUserNamespaces: true } : {}),
      resources: d.resources,
      traffic,
      ...(this.#runtimeSpans ? { runtimeSpans: true } : {}),
      nativeSidecar: this.nativeSidecar,
      runtimeTokenSecret: runtimeTokenSecretName(sbx.metadata!.name!),
    });
    const dropped = Object.keys(d.annotations ?? {}).filter((k) => platformPrefix(k));
    if (dropped.length) await this.#status.event(sc, sbx, "Warning", EventReason.MetadataDropped, `annotations not put on the pod (Kubernetes, the container runtime or the network reads them): ${dropped.slice(0, 8).join(", ")}`);
    await this.#ensureIngressPolicy(sc.namespace);
    await this.#writeTokenSecret(sc, sbx);
    this.#tokens.delete(d.id); // a new pod's runtime holds its own token until the claim's /init
    this.#ctx.count();
    try {
      const created = await this.#ctx.core.createNamespacedPod({ namespace: sc.namespace, body });
      sc.pods.created(created);
      await this.#status.event(sc, sbx, "Normal", EventReason.PodCreated, `created pod ${body.metadata!.name}`);
    } catch (err) {
      if (statusCode(err) === 409) return; // the old pod of a Stop pause is still terminating
      // Invalid: the same pod is refused every time. Other refusals (quota, admission) may clear.
      if (statusCode(err) === 422) throw new TerminalError(ReadyReason.PodCreateFailed, `the API server refused pod ${body.metadata!.name}: ${apiMessage(err)}`);
      throw err;
    }
  }

  async delete(sc: NamespaceScope, pod: V1Pod, graceSeconds: number): Promise<void> {
    if (pod.metadata?.deletionTimestamp) return;
    this.#ctx.count();
    await tolerate(this.#ctx.core.deleteNamespacedPod({ name: pod.metadata!.name!, namespace: sc.namespace, gracePeriodSeconds: graceSeconds }), [404]);
    sc.pods.forget(pod.metadata!.name!);
  }

  /** Deletes a sandbox's pods (no grace) and PVCs. */
  async deleteAll(sc: NamespaceScope, id: string): Promise<void> {
    const label = idLabel(id);
    for (const pod of sc.pods.forSandbox(label)) await this.delete(sc, pod, 0);
    for (const pvc of sc.pvcs.forSandbox(label)) {
      this.#ctx.count();
      await tolerate(this.#ctx.core.deleteNamespacedPersistentVolumeClaim({ name: pvc.metadata!.name!, namespace: sc.namespace }), [404]);
      sc.pvcs.forget(pvc.metadata!.name!);
    }
    this.#tokens.delete(id);
  }

  /** What the inplace-update annotation says once `u` is applied to the pod `podUid` (a pod made
   * again after a Stop pause is built from the template and gets the update again). */
  #inplaceRecord(u: InplaceUpdate, podUid: string | undefined): string {
    return stableJson({ ...u, pod: podUid });
  }

  /** Whether `d` asks for an in-place update the current pod has not had yet. */
  inplacePending(sbx: SandboxObject, d: KubeDesiredSandbox): boolean {
    const u = d.inplaceUpdate;
    if (!u || (!u.image && !u.cpuCount)) return false;
    return sbx.metadata?.annotations?.[ANNOTATION.inplaceUpdate] !== this.#inplaceRecord(u, this.#ctx.pod(d.id)?.metadata?.uid);
  }

  /** Changes the main container's image and CPU without recreating the pod, then records it. */
  async inplace(sc: NamespaceScope, sbx: SandboxObject, pod: V1Pod, u: InplaceUpdate): Promise<SandboxObject> {
    const { core, custom } = this.#ctx;
    const name = pod.metadata!.name!;
    // The container the pool counts and the image names (a declared agent-runtime may be first).
    const container = mainContainer(sbx.spec.template?.spec)?.name ?? "sandbox";
    if (u.image) {
      this.#ctx.count();
      const updated = await core
        .patchNamespacedPod({ name, namespace: sc.namespace, body: { spec: { containers: [{ name: container, image: u.image }] } } }, strategicPatch)
        .catch((err: unknown) => {
          throw new Error(`in-place image change of pod ${name}: ${apiMessage(err)}`);
        });
      sc.pods.remember(updated);
    }
    if (u.cpuCount) {
      const cpu = String(u.cpuCount);
      this.#ctx.count();
      // The resize subresource is the only way to change resources of a running pod; a cluster
      // without in-place resize answers 404 (no subresource) or 422 (feature off): a clear error.
      const updated = await core
        .patchNamespacedPodResize({ name, namespace: sc.namespace, body: { spec: { containers: [{ name: container, resources: { requests: { cpu }, limits: { cpu } } }] } } }, strategicPatch)
        .catch((err: unknown) => {
          throw new Error(`in-place resize of pod ${name}: ${apiMessage(err)}`);
        });
      sc.pods.remember(updated);
    }
    this.#ctx.count();
    const updated = (await custom.patchNamespacedCustomObject(
      { group: GROUP, version: VERSION, namespace: sc.namespace, plural: PLURAL.sandbox, name: sbx.metadata!.name!, body: { metadata: { annotations: { [ANNOTATION.inplaceUpdate]: this.#inplaceRecord(u, pod.metadata?.uid) } } } },
      mergePatch,
    )) as SandboxObject;
    await this.#status.event(sc, sbx, "Normal", EventReason.InplaceUpdated, `in place: ${[u.image && `image ${u.image}`, u.cpuCount && `cpu ${u.cpuCount}`].filter(Boolean).join(", ")}`);
    return sc.sandboxes.remember(updated);
  }

  /** The pod's Secret with its runtime's first token; replaced whole (the agent may not read it;
   * the token is derived, so a rewrite holds the same value). Deleted with the Sandbox (owner). */
  async #writeTokenSecret(sc: NamespaceScope, sbx: SandboxObject): Promise<void> {
    const pod = sbx.metadata!.name!;
    const body = runtimeTokenSecret({ pod, namespace: sc.namespace, labels: { [LABEL.sandboxId]: sbx.metadata!.labels![LABEL.sandboxId]! }, owner: ownerRef(sbx) }, podRuntimeToken(this.#auth.key, sc.namespace, pod));
    this.#ctx.count();
    try {
      await this.#ctx.core.createNamespacedSecret({ namespace: sc.namespace, body });
    } catch (err) {
      if (statusCode(err) !== 409) throw err;
      this.#ctx.count();
      await this.#ctx.core.replaceNamespacedSecret({ namespace: sc.namespace, name: body.metadata!.name!, body });
    }
  }

  /** Deletes the runtime-token Secret of the sandbox object `name` (destroy). Its owner reference
   * would let the garbage collector do it once the Sandbox goes; done here so a destroyed
   * sandbox leaves nothing behind at once, as its traffic objects do not. */
  async deleteTokenSecret(sc: NamespaceScope, name: string): Promise<void> {
    this.#ctx.count();
    await tolerate(this.#ctx.core.deleteNamespacedSecret({ name: runtimeTokenSecretName(name), namespace: sc.namespace }), [404]);
  }

  /** Once per namespace per agent start: sandbox pods' runtime ports admit only the agent's namespace. */
  async #ensureIngressPolicy(namespace: string): Promise<void> {
    if (this.#policed.has(namespace)) return;
    const body = runtimeIngressPolicy(namespace, this.#auth.agentNamespace);
    this.#ctx.count();
    try {
      await this.#auth.net.createNamespacedNetworkPolicy({ namespace, body });
    } catch (err) {
      if (statusCode(err) !== 409) throw err;
      this.#ctx.count();
      await this.#auth.net.replaceNamespacedNetworkPolicy({ namespace, name: body.metadata!.name!, body });
    }
    this.#policed.add(namespace);
  }

  /** The claim's /init set `token` (empty: the sandbox was made without one) in the pod's runtime. */
  setToken(id: string, token: string): void {
    this.#tokens.set(id, token);
  }

  /** The token the pod's runtime holds: the claim's once its /init went through, else the pod's own. */
  token(id: string): string | undefined {
    const claimed = this.#tokens.get(id);
    if (claimed !== undefined) return claimed || undefined;
    return this.podToken(id);
  }

  /** The pod's own first token (undefined: no pod). */
  podToken(id: string): string | undefined {
    const name = this.#ctx.pod(id)?.metadata?.name;
    // The scope's namespace: the informers' copies keep no metadata.namespace (slim.ts).
    return name ? podRuntimeToken(this.#auth.key, this.#ctx.scopeOf(id).namespace, name) : undefined;
  }

  forgetToken(id: string): void {
    this.#tokens.delete(id);
  }

  /** Calls the pod's runtime with the token it holds. This agent's guess (token()) comes first;
   * after an agent restart it knows no claim's /init, so on a 401 the pod's own and then the
   * claim's (`claimToken`, from the sandbox's intent) are tried, and the one that worked is kept. */
  async withToken(id: string, claimToken: string | null | undefined, call: (token: string | undefined) => Promise<Response>): Promise<Response> {
    const tokens = [...new Set([this.token(id), this.podToken(id), claimToken ?? undefined])].filter((t): t is string => !!t);
    for (let i = 0; ; i++) {
      const res = await call(tokens[i]);
      if (res.status === 401 && i + 1 < tokens.length) {
        await res.body?.cancel();
        continue;
      }
      if (res.ok && claimToken && tokens[i] === claimToken) this.#tokens.set(id, claimToken);
      return res;
    }
  }

  async runtimeCall(id: string, path: "/freeze" | "/unfreeze", claimToken?: string | null): Promise<void> {
    const url = runtimeUrl(this.#ctx.pod(id));
    if (!url) throw new SandboxNotFoundError(id, "no running pod with an IP");
    const res = await this.withToken(id, claimToken, (token) => fetch(`${url}${path}`, { method: "POST", headers: token ? { "X-Access-Token": token } : {}, redirect: "manual", signal: AbortSignal.timeout(10_000) })); // a redirect is a refusal (initRemote)
    if (!res.ok) throw new Error(`runtime ${path} for ${id}: HTTP ${res.status} ${await res.text()}`);
  }
}
