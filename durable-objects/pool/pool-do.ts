// PoolDO: one SandboxSet (team + template). A thin shell around machine.ts: it loads the
// inventory from ctx.storage.sql once per object instance (the available members a page at a
// time as claims reach them: store.ts), applies events, writes only the rows an event touched,
// and sends the pool's intents to ClusterDO in coalesced batches.
import { stubOf } from "../object-ids.ts";
import { DurableObject } from "cloudflare:workers";
import type { Env } from "../env.ts";
import { ErrorCode } from "../../schema/errors.ts";
import { newSandboxId, type Intent, type Observation, type SandboxId } from "../../schema/protocol/index.ts";
import { counts, queueSizes, readMembers, initialState, nextCreateDeadline, restore, rollout, transition, type Member, type PoolEffect, type PoolEvent, type PoolState } from "./machine.ts";
import { memberIntent, protocolTemplate } from "./member-intent.ts";
import type { AutoscalerResult, ClaimResult, ConfigureResult, ObserveResult, PoolConfig, PoolStatus } from "./rpc.ts";
import type { AutoscalerSpec } from "../../schema/api/autoscaler.ts";
import { AutoscaleHost } from "./autoscale-host.ts";
import { TurnWrites } from "../turn-writes.ts";
import { openPoolStore, type MemberWrite, type Outgoing, type PoolStore } from "./store.ts";
import { ENQUEUE_MAX_BYTES, enqueueBatch, jsonBytes } from "../../schema/protocol/batches.ts";
import { edgeLogger } from "../tracing/edge-log.ts";
import { annotateSpan, currentTraceparent, edgeSpan, flushEdgeTraces } from "../tracing/edge-tracing.ts";

const LOG = edgeLogger("pool");

/** Retry delay for intents ClusterDO did not accept, and the check interval for stuck creates. */
const RETRY_MS = 2_000;

/** Intents per ClusterDO.enqueue call (and at most ENQUEUE_MAX_BYTES of them: schema/protocol/batches.ts).
 * A pool scaled to 100,000 sent all its creates in one call (~1.2 KB each: 117 MB), past
 * workerd's 32 MiB limit on RPC arguments, and retried it forever: it never filled. The loop in
 * flush sends the rest in further calls. */
const ENQUEUE_BATCH = 2_000;
/** Bytes allowed for the parts in which a pool's intents of one revision and state differ. */
const INTENT_SIZE_SLACK = 64;

export class PoolDO extends DurableObject<Env> {
  private state: PoolState | null = null;
  private store: PoolStore | null = null;
  private autoscale: AutoscaleHost | null = null;
  /** Intents persisted in `pending_intents` and not yet accepted by their ClusterDO. */
  private outgoing = new Map<SandboxId, Outgoing>();
  private flushing: Promise<void> | null = null;
  /** The alarm time this instance set (null: none, or unknown after a restart). */
  private alarmAt: number | null = null;
  /**
   * The writes of this turn's claims (one per create, all on this object under load): they share
   * one commit, and each claim answers after it, so a restart never hands out a member twice.
   * Any other event runs them first; intents leave after them (flush).
   */
  private readonly turn = new TurnWrites("pool", this.ctx.storage, () => {
    this.state = null;
    this.outgoing.clear();
    this.countersDeferred = false;
  });
  /** The turn's member writes, in one call (a field: `deferRow` joins rows of the same function). */
  private readonly writeMembers = (writes: MemberWrite[]) => this.store!.writeMembers(writes);
  /** A write of the claim counters is among this turn's writes. */
  private countersDeferred = false;
  /** Inside observeBatch: member writes there owe one queue-size write at its end. */
  private batching = false;
  private queueSizesOwed = false;

  /** Sets (or replaces) the SandboxSet spec: scales, and rolls members of an older revision. */
  async configure(config: PoolConfig): Promise<ConfigureResult> {
    if (!Number.isInteger(config.spec.replicas) || config.spec.replicas < 0) {
      return { ok: false, error: { code: ErrorCode.badRequest, message: "replicas must be a non-negative integer" } };
    }
    const current = this.load().config;
    // Members cannot move between clusters: the old cluster's are deleted there, and the pool
    // warms up again on the new one.
    if (current && current.cluster !== (config.cluster ?? "local")) this.apply({ type: "destroy" });
    // An autoscaler owns the size: a new spec (a template PUT, a synced SandboxSet) keeps it.
    const managed = this.autoscale!.managedReplicas();
    this.apply({ type: "configure", config: managed === null ? config : { ...config, spec: { ...config.spec, replicas: managed } } });
    return { ok: true, status: this.statusNow() };
  }

  /** Pops the best unclaimed member in O(1), or mints an id when there is no stock (or `fresh`). */
  async claim(opts: { fresh?: boolean } = {}): Promise<ClaimResult> {
    const st = this.load();
    const cfg = st.config;
    const reply = this.apply({ type: "claim", fresh: opts.fresh });
    if (reply && !reply.ok) return reply;
    if (this.autoscale!.claimed(Date.now())) this.armAt(this.autoscale!.due!);
    if (!reply || !cfg) return { ok: false, error: { code: ErrorCode.internal, message: "claim produced no reply" } };
    try {
      await this.turn.written;
    } catch (err) {
      return { ok: false, error: { code: ErrorCode.internal, message: `pool write failed: ${String(err)}` } };
    }
    const { member: m, state } = reply;
    return {
      ok: true,
      sandboxId: m.id,
      cluster: cfg.cluster,
      revision: m.revision,
      warm: state !== "new",
      state,
      generation: m.generation,
      endpoint: m.endpoint,
      template: protocolTemplate(cfg.templateId, m.revision, cfg.spec),
      pauseStrategy: cfg.spec.pauseStrategy,
      envVars: cfg.spec.env,
    };
  }

  /** An observation of an unclaimed member (routed by ClusterDO); others are ignored. */
  async observe(observation: Observation): Promise<ObserveResult> {
    return this.observeBatch([observation]);
  }

  /** Many observations in one call (ClusterDO groups them per owner). */
  async observeBatch(observations: Observation[]): Promise<ObserveResult> {
    let applied = 0;
    readMembers(this.load(), observations.map((o) => o.sandboxId));
    // The batch's queue sizes are written once, after it, in the same event (and so the same
    // commit) as its member writes: not once per observation that changed a member.
    this.batching = true;
    try {
      for (const observation of observations) {
        // Exact after the batch's read above: a stored member it names is in memory now.
        const before = this.load().members.has(observation.sandboxId);
        this.apply({ type: "observe", observation });
        if (before) applied++;
      }
    } finally {
      this.batching = false;
      if (this.queueSizesOwed && this.state) this.store!.saveQueueSizes(queueSizes(this.state));
      this.queueSizesOwed = false;
    }
    return { ok: true, applied };
  }

  /** Deletes every unclaimed member and forgets the spec (template deleted). */
  async destroy(): Promise<ConfigureResult> {
    this.apply({ type: "destroy" });
    return { ok: true, status: this.statusNow() };
  }

  async status(): Promise<PoolStatus> {
    return this.statusNow();
  }

  /** Sets (null: removes) the pool's PoolAutoscaler and evaluates it at once (in the caller's trace). */
  async setAutoscaler(spec: AutoscalerSpec | null, traceparent?: string): Promise<AutoscalerResult> {
    this.load();
    this.turn.flush();
    this.autoscale!.set(spec, Date.now());
    await this.autoscaleNow(traceparent);
    return { ok: true, status: this.autoscalerStatusNow() };
  }

  async autoscalerStatus(): Promise<AutoscalerResult> {
    this.load();
    return { ok: true, status: this.autoscalerStatusNow() };
  }

  override async alarm(): Promise<void> {
    this.alarmAt = null;
    // The evaluation first: it moves its due time on, so the tick's re-arm does not fire again now.
    await this.autoscaleNow();
    this.apply({ type: "tick" });
    await this.kick();
  }

  /**
   * Runs the autoscaler's evaluation if one is due, applies its size, and re-arms the alarm. Traced,
   * an evaluation is a span (`PoolAutoscaler.evaluate`: its decision, reason and sizes; a root span
   * unless a caller's trace is given) and the creates or deletes of its scale are children of it.
   */
  private async autoscaleNow(traceparent?: string): Promise<void> {
    const host = this.autoscale!;
    if (host.isDue(Date.now())) {
      const cfg = this.load().config;
      const attributes = { "pool.name": cfg ? `${cfg.teamId}/${cfg.templateId}` : "" };
      try {
        await edgeSpan(this.env, "PoolAutoscaler.evaluate", attributes, async () => annotateSpan(host.decisionAttributes(this.evaluate())), traceparent);
      } finally {
        const flushing = flushEdgeTraces();
        if (flushing) this.ctx.waitUntil(flushing);
      }
    }
    if (host.due !== null) this.armAt(Math.max(host.due, Date.now()));
  }

  /** One evaluation and its scale (the replicas it set, or null). */
  private evaluate(): number | null {
    const st = this.load();
    const cfg = st.config;
    const { available, creating } = counts(st);
    const desired = this.autoscale!.run(cfg && { replicas: cfg.spec.replicas, available, total: available + creating }, Date.now());
    if (cfg && desired !== null) this.apply({ type: "configure", config: { ...cfg, spec: { ...cfg.spec, replicas: desired } } });
    return cfg ? desired : null;
  }

  private autoscalerStatusNow() {
    const st = this.load();
    return this.autoscale!.status(st.config?.spec.replicas ?? 0, counts(st).available);
  }

  /** Starts a flush unless one runs; the running one picks up intents queued meanwhile. */
  private kick(): Promise<void> {
    this.flushing ??= this.flush().finally(() => (this.flushing = null));
    return this.flushing;
  }

  private statusNow(): PoolStatus {
    const st = this.load();
    const c = counts(st);
    return {
      configured: st.config !== null,
      name: st.config ? `${st.config.teamId}/${st.config.templateId}` : null,
      replicas: st.config?.spec.replicas ?? 0,
      revision: st.config?.revision ?? null,
      ...c,
      ...rollout(st),
      claimed: st.claimed,
      createdOnDemand: st.createdOnDemand,
      failing: st.failing && st.failing.revision === st.config?.revision ? { ...st.failing } : null,
    };
  }

  private apply(event: PoolEvent) {
    const st = this.load();
    const cfg = st.config; // effects of `destroy` still need the pool's name
    const now = Date.now();
    const claiming = event.type === "claim";
    if (!claiming) this.turn.flush();
    // With the claim's writes: a commit of its own after each flush (as before) cost ~1 % of the
    // edge's CPU per create. Once per commit, however many claims share it: counters as they are
    // when the turn's writes run. Deferred before the first claim's member writes, so the member
    // writes of all the turn's claims follow one another and share statements (writeMembers).
    if (claiming && !this.countersDeferred) {
      this.countersDeferred = true;
      this.turn.defer(() => {
        this.countersDeferred = false;
        this.store!.saveCounters(st.claimed, st.createdOnDemand);
        // The queues as they are when the turn's member writes run, in the same commit.
        this.store!.saveQueueSizes(queueSizes(st));
      });
    }
    const { effects, claim } = transition(st, event, { now, newId: newSandboxId });
    this.perform(effects, st.config ?? cfg, now, claiming);
    return claim;
  }

  private perform(effects: PoolEffect[], cfg: PoolState["config"], now: number, deferWrites = false): void {
    const store = this.store!;
    const write = deferWrites ? (w: () => void) => this.turn.defer(w) : (w: () => void) => w();
    // A claim's member writes join the turn's batch; any other event's run now, as they come.
    const writeRow = deferWrites ? (w: MemberWrite) => this.turn.deferRow(this.writeMembers, w) : (w: MemberWrite) => store.writeMembers([w]);
    // A claim's queue sizes are written once per turn with its counters (apply), a batch of
    // observations' once after it (observeBatch).
    if (!deferWrites && effects.some((e) => e.type !== "save-config")) {
      if (this.batching) this.queueSizesOwed = true;
      else store.saveQueueSizes(queueSizes(this.state!));
    }
    for (const e of effects) {
      switch (e.type) {
        case "create":
          writeRow({ op: "insert", members: e.members });
          this.send(cfg, e.members, "running", now, write);
          break;
        case "delete":
          writeRow({ op: "delete", ids: e.members.map((m) => m.id) });
          this.send(cfg, e.members, "deleted", now, write);
          break;
        case "forget":
          writeRow({ op: "delete", ids: e.ids });
          break;
        case "update":
          writeRow({ op: "update", member: { ...e.member } });
          break;
        case "save-config": {
          const config = this.state!.config;
          write(() => store.saveConfig(config));
          break;
        }
        default:
          assertNever(e);
      }
    }
    this.armAlarm(now);
  }

  private send(cfg: PoolState["config"], members: Member[], desired: "running" | "deleted", now: number, write: (w: () => void) => void): void {
    if (!cfg || !members.length) return;
    const items = members.map((m) => ({ cluster: cfg.cluster, intent: memberIntent(cfg, m, desired, now) }));
    // Only delete intents are stored: their members are gone from the table. A create intent is
    // derived again from its member (still creating) when the object loads, and ClusterDO drops
    // the ones it already holds (same generation), so storing it would only cost a write per member.
    if (desired === "deleted") write(() => this.store!.saveOutgoing(items));
    for (const o of items) this.outgoing.set(o.intent.sandboxId, o);
    // Not awaited: the claim answers now; intents of concurrent claims join the next batch.
    void this.kick();
  }

  /** Sends pending intents, one batch per cluster, until none are left or a cluster refuses. */
  private async flush(): Promise<void> {
    // Members and intents are stored before their intents leave: a pool that restarts after
    // ClusterDO took a member's intent must still know the member.
    while (this.outgoing.size) {
      if (!(await this.stored())) return this.armAlarm(Date.now(), true);
      const byCluster = new Map<string, Outgoing[]>();
      for (const o of this.outgoing.values()) {
        const list = byCluster.get(o.cluster);
        if (list) list.push(o);
        else byCluster.set(o.cluster, [o]);
      }
      // The pool's intents of one revision and state differ only in id, generation and time (a
      // refill sends many alike): one of each is encoded to size them all, with room for those.
      const sizes = new Map<string, number>();
      const size = (o: Outgoing) => {
        const kind = `${o.intent.template?.revision}\n${o.intent.desired.state}`;
        let n = sizes.get(kind);
        if (n === undefined) sizes.set(kind, (n = jsonBytes(o.intent) + INTENT_SIZE_SLACK));
        return n;
      };
      for (const [cluster, all] of byCluster) {
        const batch = enqueueBatch(all, ENQUEUE_BATCH, ENQUEUE_MAX_BYTES, size);
        if (!(await this.enqueue(cluster, batch.map((o) => o.intent)))) return this.armAlarm(Date.now(), true);
        const sent: SandboxId[] = [];
        for (const o of batch) {
          // A newer intent for the same member may have replaced it while this batch was in flight.
          if (this.outgoing.get(o.intent.sandboxId) === o) {
            this.outgoing.delete(o.intent.sandboxId);
            if (o.intent.desired.state === "deleted") sent.push(o.intent.sandboxId);
          }
        }
        this.turn.flush();
        this.store!.deleteOutgoing(sent);
      }
    }
  }

  /** Whether the writes deferred so far are stored (false: one failed, see TurnWrites). */
  private async stored(): Promise<boolean> {
    const written = this.turn.written;
    if (!written) return true;
    return written.then(() => true, () => false);
  }

  /**
   * One batch of the pool's own intents (its stock's creates and deletes: refills, resizes, the
   * autoscaler's, rollouts): a trace of its own when tracing is on, whose context rides with the
   * intents to the agent (its reconcile and driver steps join it).
   */
  private async enqueue(cluster: string, intents: Intent[]): Promise<boolean> {
    const creates = intents.filter((i) => i.desired.state !== "deleted").length;
    const attributes = { "pool.cluster": cluster, "pool.creates": creates, "pool.deletes": intents.length - creates };
    try {
      return await edgeSpan(this.env, "PoolDO.enqueue", attributes, () => this.enqueueNow(cluster, intents, currentTraceparent()));
    } finally {
      const flushing = flushEdgeTraces();
      if (flushing) this.ctx.waitUntil(flushing);
    }
  }

  private async enqueueNow(cluster: string, intents: Intent[], traceparent: string | undefined): Promise<boolean> {
    try {
      const res = await stubOf(this.env.CLUSTER, cluster).enqueue(intents, traceparent ? { traceparent } : {});
      if (!res.ok) LOG.warn("cluster refused intents", { cluster, intents: intents.length, error: res.error.message });
      return res.ok;
    } catch (err) {
      LOG.warn("cluster unreachable", { cluster, error: err });
      return false;
    }
  }

  /** One alarm: retry unsent intents soon, else wake when the oldest create times out. */
  private armAlarm(now: number, retry = false): void {
    const st = this.state!;
    const due = retry || this.outgoing.size ? now + RETRY_MS : nextCreateDeadline(st);
    if (due !== null) this.armAt(due);
    if (this.autoscale?.due != null) this.armAt(this.autoscale.due);
  }

  private armAt(due: number): void {
    if (this.alarmAt !== null && this.alarmAt <= due) return;
    this.alarmAt = due;
    void this.ctx.storage.setAlarm(due);
  }

  /** Loads the inventory once per object instance; later calls return the in-memory state. What
   * it reads does not grow with the available stock (machine.ts `restore`). */
  private load(): PoolState {
    if (this.state) return this.state;
    const store = openPoolStore(this.ctx.storage.sql);
    const st = initialState();
    st.config = store.loadConfig();
    const c = store.loadCounters();
    st.claimed = c.claimed;
    st.createdOnDemand = c.createdOnDemand;
    restore(st, store.loadInventory(), store);
    for (const o of store.loadOutgoing()) {
      // Create intents stored by an older version: they are derived from their members below.
      if (o.intent.desired.state !== "deleted") store.deleteOutgoing([o.intent.sandboxId]);
      else this.outgoing.set(o.intent.sandboxId, o);
    }
    const cfg = st.config;
    if (cfg) {
      const now = Date.now();
      for (const q of st.creating.values()) {
        for (const { m } of q.values()) this.outgoing.set(m.id, { cluster: cfg.cluster, intent: memberIntent(cfg, m, "running", now) });
      }
    }
    this.store = store;
    this.autoscale = new AutoscaleHost(store);
    this.state = st;
    if (this.outgoing.size) void this.kick();
    return st;
  }
}

function assertNever(x: never): never {
  throw new Error(`unhandled effect ${JSON.stringify(x)}`);
}
