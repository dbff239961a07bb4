// CRD sync for TrafficPolicies (a namespace's, team = namespace) and GlobalTrafficPolicies
// (cluster-scoped, `namespace` null): each object goes to the edge as a `trafficpolicyobjects`
// item; the edge stores it as the admin API would and sends the whole set to every agent, whose
// proxy enforces it (controllers/traffic/governed.ts). While the object exists its status is asked
// for every `statusMs` and written to its status subresource: `selectedSandboxes` (the live
// sandboxes it selects, from the edge) and an `Accepted` condition (False with the edge's or this
// sync's reason when refused). Only egress with cidr/fqdn peers is enforced: an object with
// ingress rules, `from`, or service/workload peers is refused (Accepted False, reason
// Unsupported), never enforced in part. Objects deleted while the agent was down stay on the edge
// until deleted through the admin API (no inventory push yet).
import { CustomObjectsApi, type KubeConfig, type KubernetesObject } from "@kubernetes/client-node";
import type { Link } from "../link.ts";
import { TrafficPolicySpec } from "../../../schema/api/traffic-policy.ts";
import { setCondition, type Condition } from "../../../schema/crd/conditions.ts";
import { GROUP, VERSION } from "../../../schema/crd/labels.ts";
import type { ReplyItem } from "../../../schema/protocol/index.ts";
import { WorkQueue } from "../../lib/work-queue.ts";
import { ObjectCache } from "../../drivers/kubernetes/object-cache.ts";
import { slimCustom } from "../../drivers/kubernetes/slim.ts";
import { mergePatch, stableJson } from "../../drivers/kubernetes/kube-api.ts";

export interface TrafficPolicyObject extends KubernetesObject {
  spec: { priority?: number; selector?: unknown; ingress?: { rules?: unknown[] }; egress?: { rules?: { action: string; from?: unknown[]; to?: Record<string, unknown>[]; ports?: unknown[] }[] } };
  status?: TrafficPolicyStatus;
}
export interface TrafficPolicyStatus {
  observedGeneration?: number;
  selectedSandboxes?: string[];
  conditions?: Condition[];
}

/** The edge's spec for an object, or why it cannot be enforced (pure). */
export function trafficSpecOf(o: TrafficPolicyObject): TrafficPolicySpec | string {
  const s = o.spec ?? {};
  if (s.ingress?.rules?.length) return "ingress rules are not enforced here (egress only)";
  const rules = s.egress?.rules ?? [];
  if (rules.some((r) => r.from?.length)) return "`from` peers are not enforced here";
  if (rules.some((r) => r.to?.some((p) => !("cidr" in p) && !("fqdn" in p)))) return "service and workload peers are not enforced here (cidr and fqdn are)";
  const parsed = TrafficPolicySpec.safeParse({ priority: s.priority, selector: s.selector, egress: { rules: rules.filter((r) => r.to?.length).map((r) => ({ action: r.action, to: r.to, ...(r.ports ? { ports: r.ports } : {}) })) } });
  return parsed.success ? parsed.data : parsed.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ");
}

export interface TrafficPolicySyncOptions {
  kubeConfig: KubeConfig;
  /** The namespace whose TrafficPolicies sync; null: the cluster's GlobalTrafficPolicies. */
  namespace: string | null;
  link: Pick<Link, "call">;
  log?: (msg: string) => void;
  retryMs?: number;
  /** How often an applied object's status is read from the edge (default 5 s). */
  statusMs?: number;
}

export class TrafficPolicySync {
  readonly objects: ObjectCache<TrafficPolicyObject>;
  readonly #o: TrafficPolicySyncOptions;
  readonly #custom: CustomObjectsApi;
  readonly #queue: WorkQueue;
  readonly #plural: string;
  /** name → `uid/generation` the edge accepted. */
  readonly #synced = new Map<string, string>();
  readonly #uids = new Map<string, string>();

  constructor(opts: TrafficPolicySyncOptions) {
    this.#o = opts;
    this.#custom = opts.kubeConfig.makeApiClient(CustomObjectsApi);
    const ns = opts.namespace;
    this.#plural = ns === null ? "globaltrafficpolicies" : "trafficpolicies";
    this.#queue = new WorkQueue({
      name: this.#plural,
      work: async (name) => ((await this.reconcile(name)) ? { requeueAfterMs: opts.statusMs ?? 5000 } : undefined),
      backoff: { baseMs: opts.retryMs ?? 1000, maxMs: 30_000 },
      onError: (name, err) => opts.log?.(`${this.#plural} ${name}: ${(err as Error).message}`),
    });
    const plural = this.#plural;
    this.objects = new ObjectCache<TrafficPolicyObject>(opts.kubeConfig, {
      path: ns === null ? `/apis/${GROUP}/${VERSION}/${plural}` : `/apis/${GROUP}/${VERSION}/namespaces/${ns}/${plural}`,
      list: () => (ns === null ? this.#custom.listClusterCustomObject({ group: GROUP, version: VERSION, plural }) : this.#custom.listNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: ns, plural })),
      slim: slimCustom,
      onError: (err) => opts.log?.(`${plural} watch: ${(err as Error).message}`),
    });
    this.objects.onChange((o, verb) => {
      const name = o.metadata!.name!;
      if (o.metadata?.uid) this.#uids.set(name, o.metadata.uid);
      if (verb === "delete" || this.#synced.get(name) !== `${o.metadata?.uid}/${o.metadata?.generation}`) this.#queue.add(name);
    });
  }

  async start(): Promise<void> {
    await this.objects.start();
    for (const o of this.objects.list()) this.#queue.add(o.metadata!.name!);
  }

  async stop(): Promise<void> {
    this.#queue.close();
    await this.objects.stop();
  }

  /** Pushes the object (or its deletion), then writes its status; true while it exists. */
  async reconcile(name: string): Promise<boolean> {
    const o = this.objects.get(name);
    const ref = { namespace: this.#o.namespace, name, uid: o?.metadata?.uid ?? this.#uids.get(name) ?? "" };
    if (!o || o.metadata?.deletionTimestamp) {
      if (ref.uid) await this.#call({ ...ref, deleted: true });
      this.#synced.delete(name);
      this.#uids.delete(name);
      return false;
    }
    const generation = o.metadata?.generation ?? 0;
    const now = new Date().toISOString();
    const spec = trafficSpecOf(o);
    if (typeof spec === "string") {
      // Not enforceable: the edge must not keep an older version of it either.
      if (this.#synced.has(name)) await this.#call({ ...ref, deleted: true });
      this.#synced.delete(name);
      await this.#write(o, { observedGeneration: generation, selectedSandboxes: [], conditions: setCondition(o.status?.conditions, { type: "Accepted", status: "False", reason: "Unsupported", message: spec, observedGeneration: generation }, now) });
      return false;
    }
    const key = `${ref.uid}/${generation}`;
    const pushed = this.#synced.get(name) !== key;
    const reply = pushed ? await this.#call({ ...ref, generation, spec }) : await this.#call({ ...ref, status: true });
    if (reply.result === "rejected") {
      this.#synced.delete(name);
      await this.#write(o, { ...o.status, observedGeneration: generation, conditions: setCondition(o.status?.conditions, { type: "Accepted", status: "False", reason: "Rejected", message: reply.message ?? reply.code ?? "", observedGeneration: generation }, now) });
      throw new Error(`edge refused ${this.#plural} ${ref.namespace ?? ""}/${name}: ${reply.code}: ${reply.message}`);
    }
    this.#synced.set(name, key);
    const conditions = setCondition(o.status?.conditions, { type: "Accepted", status: "True", reason: "Enforced", message: "sent to every cluster's traffic-proxy", observedGeneration: generation }, now);
    await this.#write(o, { observedGeneration: generation, selectedSandboxes: reply.selectedSandboxes ?? [], conditions });
    return true;
  }

  #call(item: Extract<Parameters<Link["call"]>[0], { type: "trafficpolicyobjects" }>["item"]): Promise<ReplyItem> {
    return this.#o.link.call({ type: "trafficpolicyobjects", item });
  }

  async #write(o: TrafficPolicyObject, status: TrafficPolicyStatus): Promise<void> {
    if (stableJson(o.status ?? {}) === stableJson(status)) return;
    const name = o.metadata!.name!;
    const body = { status };
    const updated =
      this.#o.namespace === null
        ? await this.#custom.patchClusterCustomObjectStatus({ group: GROUP, version: VERSION, plural: this.#plural, name, body }, mergePatch)
        : await this.#custom.patchNamespacedCustomObjectStatus({ group: GROUP, version: VERSION, namespace: this.#o.namespace, plural: this.#plural, name, body }, mergePatch);
    this.objects.remember(updated);
  }
}
