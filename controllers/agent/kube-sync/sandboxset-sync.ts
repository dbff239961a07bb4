// CRD sync, cluster → edge: every SandboxSet in the namespace becomes the edge's template of the
// same name in the team named like the namespace, so the edge's PoolDO keeps its warm pool
// (replicas, image, CPU, memory, env, pause strategy, scale and update budgets, and the pod
// template's revision, so any template change rolls the pool). The edge stays
// the authority for sandboxes; this only hands it the platform team's spec. Level-based: on start
// every SandboxSet is pushed again, together with the namespace's inventory so the edge drops
// what was deleted while the agent was down; a failed push is retried until it lands.
//
// The sink sends `sandboxsets` items over the agent's own session (LinkPoolSink); the edge keeps
// the newest generation per object uid, so a re-push or a late retry never rolls a pool back.
import type { z } from "zod";
import type { Link } from "../link.ts";
import type { TemplateSpec } from "../../../schema/api/template.ts";
import { WorkQueue } from "../../lib/work-queue.ts";
import type { ObjectCache } from "../../drivers/kubernetes/object-cache.ts";
import type { SandboxSetObject } from "../../drivers/kubernetes/kubernetes-driver.ts";
import { poolRevision } from "../../drivers/kubernetes/pool-status.ts";
import { mainContainer, podCost, wholeCores } from "../../drivers/kubernetes/pod-resources.ts";
import { MAX_TEMPLATE_CPU_COUNT, MAX_TEMPLATE_MEMORY_MB } from "../../../schema/api/limits.ts";
import { SANDBOXSET_CPU_SHARES_FEATURE } from "../../../schema/protocol/crd-sync.ts";

/** The edge's template spec (schema/api/template.ts `TemplateSpec` input) a SandboxSet maps to. */
export type PoolSpec = z.input<typeof TemplateSpec> & { cluster: string; replicas: number; image: string; cpuCount: number; memoryMB: number };

/** One SandboxSet as the edge knows it: team = namespace, template id = name. */
export interface SetRef {
  namespace: string;
  name: string;
  uid: string;
}

export interface PoolSink {
  /** `stale`: the edge already has a newer generation of this object (nothing to do). */
  upsert(set: SetRef & { generation: number; spec: PoolSpec }): Promise<"applied" | "stale">;
  remove(set: SetRef): Promise<void>;
  /** Every SandboxSet the namespace holds: the edge removes those it got from us that are gone. */
  prune(namespace: string, present: string[]): Promise<void>;
}

/** Sends SandboxSets over the agent's session (`sandboxsets` items); a refusal throws (retried). */
export class LinkPoolSink implements PoolSink {
  readonly #link: Pick<Link, "call" | "supports">;
  constructor(link: Pick<Link, "call" | "supports">) {
    this.#link = link;
  }

  async upsert(set: SetRef & { generation: number; spec: PoolSpec }): Promise<"applied" | "stale"> {
    // An edge from before restCpu/initCpu refuses an item carrying them; without them that edge
    // charges an in-place CPU change as it always did.
    let item = set;
    if (!this.#link.supports(SANDBOXSET_CPU_SHARES_FEATURE)) {
      const { restCpu: _r, initCpu: _i, ...spec } = set.spec;
      item = { ...set, spec };
    }
    const r = await this.#link.call({ type: "sandboxsets", item });
    if (r.result === "rejected") throw new Error(`edge refused SandboxSet ${set.namespace}/${set.name}: ${r.code}: ${r.message}`);
    return r.result;
  }

  async remove(set: SetRef): Promise<void> {
    const r = await this.#link.call({ type: "sandboxsets", item: { ...set, deleted: true } });
    if (r.result === "rejected") throw new Error(`edge refused to delete SandboxSet ${set.namespace}/${set.name}: ${r.code}: ${r.message}`);
  }

  async prune(namespace: string, present: string[]): Promise<void> {
    const r = await this.#link.call({ type: "sandboxsets", item: { namespace, present } });
    if (r.result === "rejected") throw new Error(`edge refused the SandboxSet inventory of ${namespace}: ${r.code}: ${r.message}`);
  }
}

type Container = { name?: string; image?: string; env?: { name: string; value?: string }[] };

/** A SandboxSet whose CPU or memory cannot be counted (pod-resources.ts says why): it is not
 * sent to the edge, which would count it as less than its pods may take. */
export class UncountableSandboxSet extends Error {
  readonly problems: string[];
  constructor(problems: string[]) {
    super(`its CPU and memory cannot be counted: ${problems.join("; ")}`);
    this.problems = problems;
  }
}

/** The edge spec for a SandboxSet (pure); throws UncountableSandboxSet. */
export function poolSpecOf(set: SandboxSetObject & { spec: { pauseStrategy?: { type?: string }; scaleStrategy?: { maxUnavailable?: number | string }; updateStrategy?: { maxUnavailable?: number | string } } }, cluster: string): PoolSpec {
  const spec = set.spec.template?.spec ?? { containers: [] };
  const cost = podCost(spec as never);
  if (!("cpu" in cost)) throw new UncountableSandboxSet(cost.problems);
  const cpuCount = wholeCores(cost.cpu);
  const memoryMB = Math.max(128, Math.ceil(cost.memory / 2 ** 20 - 1e-9));
  // The pod beside its main container, which a claim's in-place CPU value leaves as it is: the
  // edge charges `ceil(max(initCpu, restCpu + the in-place value))` (review 26 M3, review 27 final
  // M2). In millicores, rounded up: a larger share only charges more.
  const milli = (cores: number) => Math.max(0, Math.ceil(cores * 1000 - 1e-6)) / 1000;
  const restCpu = milli(cost.restCpu);
  const initCpu = milli(cost.initCpu);
  // Past the edge's bounds its TemplateSpec refuses the push, which would be retried for ever
  // with nothing on the SandboxSet saying why: refused here, with the Event and condition.
  if (Math.max(cpuCount, initCpu) > MAX_TEMPLATE_CPU_COUNT || memoryMB > MAX_TEMPLATE_MEMORY_MB) {
    throw new UncountableSandboxSet([`the pod's limits sum to ${Math.max(cpuCount, Math.ceil(initCpu))} cores and ${memoryMB} MiB, more than a template may have (${MAX_TEMPLATE_CPU_COUNT} cores, ${MAX_TEMPLATE_MEMORY_MB} MiB)`]);
  }
  const main: Container = mainContainer(spec as { containers?: Container[] }) ?? {};
  const env = Object.fromEntries((main.env ?? []).filter((e) => e.value !== undefined).map((e) => [e.name, e.value!]));
  return {
    cluster,
    replicas: set.spec.replicas ?? 0,
    image: main.image ?? "base",
    cpuCount,
    restCpu,
    initCpu,
    memoryMB,
    env,
    pauseStrategy: set.spec.pauseStrategy?.type === "Freeze" ? "Freeze" : "Stop",
    scaleStrategy: set.spec.scaleStrategy?.maxUnavailable === undefined ? {} : { maxUnavailable: set.spec.scaleStrategy.maxUnavailable },
    updateStrategy: { maxUnavailable: set.spec.updateStrategy?.maxUnavailable ?? "20%" },
    // Every change to the pod template is a new revision on the edge too (members are built from
    // the SandboxSet's template as the cluster has it, labelled with this hash).
    sourceRevision: poolRevision(set),
  };
}

/** Timer key of the inventory push (no SandboxSet name has underscores). */
const INVENTORY = "__inventory__";

export interface SandboxSetSyncOptions {
  sandboxSets: ObjectCache<SandboxSetObject>;
  namespace: string;
  /** The cluster id the edge knows this agent by (the pool's members are placed here). */
  cluster: string;
  sink: PoolSink;
  log?: (msg: string) => void;
  retryMs?: number;
  /** A generation whose CPU or memory cannot be counted (not sent to the edge): say so on the
   * SandboxSet (a Warning Event, the ReplicaFailure condition). Called once per generation. */
  refused?: (set: SandboxSetObject, err: UncountableSandboxSet) => Promise<void>;
}

export class SandboxSetSync {
  readonly #o: SandboxSetSyncOptions;
  /** name → generation last accepted by the edge. */
  readonly #synced = new Map<string, number>();
  /** name → generation refused as uncountable (not sent). */
  readonly #refused = new Map<string, number>();
  /** name → uid of the object last seen (a delete event's object may be all that is left). */
  readonly #uids = new Map<string, string>();
  /**
   * One push per name at a time (replies cannot cross), the newest state each run (a push reads
   * the cache, so a delete and an upsert need no separate ops), and a refusal that stands (e.g.
   * another cluster owns the name) retried less and less often, up to every 30 s.
   */
  readonly #queue: WorkQueue;

  constructor(opts: SandboxSetSyncOptions) {
    this.#o = opts;
    this.#queue = new WorkQueue({
      name: "sandboxset",
      work: (name) => (name === INVENTORY ? this.#prune() : this.#push(name)),
      backoff: { baseMs: opts.retryMs ?? 1000, maxMs: 30_000 },
      onError: (name, err) => opts.log?.(`sandboxset ${name}: ${(err as Error).message}`),
    });
    opts.sandboxSets.onChange((obj) => {
      const name = obj.metadata!.name!;
      if (obj.metadata?.uid) this.#uids.set(name, obj.metadata.uid);
      this.#queue.add(name);
    });
  }

  /** Pushes every SandboxSet the cache holds (the cache must be started). */
  start(): void {
    for (const set of this.#o.sandboxSets.list()) this.#queue.add(set.metadata!.name!);
    this.#queue.add(INVENTORY);
  }

  stop(): void {
    this.#queue.close();
  }

  /** True when every SandboxSet's current generation has reached the edge. */
  get settled(): boolean {
    return this.#queue.depth === 0 && this.#queue.scheduled === 0 && this.#o.sandboxSets.list().every((s) => this.#synced.get(s.metadata!.name!) === s.metadata?.generation);
  }

  #prune(): Promise<void> {
    return this.#o.sink.prune(this.#o.namespace, this.#o.sandboxSets.list().map((s) => s.metadata!.name!));
  }

  /** Upserts the SandboxSet as the cache holds it, or removes it when it is gone or going. */
  async #push(name: string): Promise<void> {
    const set = this.#o.sandboxSets.get(name);
    const ref = { namespace: this.#o.namespace, name, uid: set?.metadata?.uid ?? this.#uids.get(name) ?? "" };
    if (!set || set.metadata?.deletionTimestamp) {
      if (ref.uid) await this.#o.sink.remove(ref);
      this.#synced.delete(name);
      this.#refused.delete(name);
      this.#uids.delete(name);
      return;
    }
    const generation = set.metadata?.generation ?? 0;
    if (this.#synced.get(name) === generation || this.#refused.get(name) === generation) return;
    let spec: PoolSpec;
    try {
      spec = poolSpecOf(set as never, this.#o.cluster);
    } catch (err) {
      if (!(err instanceof UncountableSandboxSet)) throw err;
      // Not retried once said: only a new generation can change the answer. The edge keeps the
      // last generation it counted; pods of this template are refused by the driver's judge.
      // Remembered only after the Event and condition landed, so a failed post is retried.
      await this.#o.refused?.(set, err);
      this.#refused.set(name, generation);
      return;
    }
    this.#refused.delete(name);
    await this.#o.sink.upsert({ ...ref, generation, spec });
    this.#synced.set(name, generation);
  }
}
