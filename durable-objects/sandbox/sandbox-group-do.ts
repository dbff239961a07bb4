// SandboxGroupDO: the sandboxes whose id starts with one character (`sandboxGroupOf`), one SQLite
// row each. A thin shell around machine.ts: it keeps each sandbox's state in memory and in its
// row, applies events, performs the effects (intents to the ClusterDO, index rows to libSQL) and
// keeps one alarm for the group at the earliest `dueAt` of its sandboxes.
//
// Why groups and not one object per sandbox: on workerd every new Durable Object opens its own
// SQLite database, and that (plus its first write and first alarm) was ~35 % of the edge's CPU
// per create in the edge bench. A group object lives as long as the edge does, so a create costs
// a row, not an object. Every RPC resolves to a typed result; none throws (a throwing RPC leaks
// unhandled rejections under the vitest plugin).
import { DurableObject } from "cloudflare:workers";
import type { Env } from "../../functions/env.ts";
import type { IndexOp } from "../../functions/store/sandbox-index.ts";
import { ErrorCode, sandboxNotFoundMessage } from "../../schema/errors.ts";
import type { Endpoint, IntentInput, Observation, PauseStrategy } from "../../schema/protocol/index.ts";
import type { SandboxEvent } from "./events.ts";
import { indexRow, routeInfo, sandboxInfo, type RouteInfo, type SandboxInfo } from "./info.ts";
import { INDEX_WRITER_NAME } from "./index-writer-do.ts";
import { dueAt, transition, visibleTo } from "./machine.ts";
import type { Access, Result, SandboxSpec, SandboxState } from "./state.ts";
import { openSandboxStore, type SandboxStore, type Undelivered } from "./store.ts";

/**
 * The group a sandbox lives in: the first character of its id (ids are random `[a-z0-9]`, so 36
 * groups share the load evenly). Fixed for the lifetime of stored sandboxes: a longer prefix
 * (1,296 groups for two characters) would spread a large deployment wider, but changing it
 * strands every existing sandbox in its old group.
 */
export function sandboxGroupOf(sandboxId: string): string {
  return sandboxId.slice(0, 1);
}

export interface CreateInput {
  spec: SandboxSpec;
  timeoutS: number;
  /** Generation of the pool's last intent for this member; ours start above it. */
  claimedGeneration: number;
  endpoint: Endpoint | null;
  /** Bound on waiting for the agent to acknowledge the claim. */
  waitMs: number;
}

/** Default bound on waiting for the agent (create, resume, wake). */
export const DEFAULT_WAIT_MS = 10_000;

/** An intent ClusterDO did not take is retried after this long. */
const RETRY_MS = 2_000;

/** One sandbox of the group, as this object instance holds it. */
interface Slot {
  state: SandboxState | null;
  undelivered: Undelivered | null;
  /** waitRunning() callers, woken after every transition. */
  waiters: Set<() => void>;
}

interface QueuedIndexOp {
  op: IndexOp;
  done: () => void;
}

export class SandboxGroupDO extends DurableObject<Env> {
  private readonly store: SandboxStore;
  private readonly slots = new Map<string, Slot>();
  /** Ids with a row: a create (always a new id) or a probe of an unknown one reads nothing. */
  private readonly stored: Set<string>;
  /** The alarm time this instance set (null: none, or unknown until the constructor read it). */
  private alarmAt: number | null = null;
  private indexQueue: QueuedIndexOp[] = [];
  private indexFlush: Promise<void> | null = null;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.store = openSandboxStore(ctx.storage.sql);
    this.stored = new Set(this.store.ids());
    void ctx.blockConcurrencyWhile(async () => {
      this.alarmAt = await ctx.storage.getAlarm();
    });
  }

  /** Takes over a claimed member: records it, sends the owner's first intent, waits for the ack. */
  async create(id: string, input: CreateInput): Promise<Result<{ sandbox: SandboxInfo }>> {
    if (input.spec.id !== id) return { ok: false, error: { code: ErrorCode.badRequest, message: `spec id ${input.spec.id} is not ${id}` } };
    const slot = this.slot(id);
    const existed = slot.state !== null;
    const t = await this.apply(id, {
      type: "create",
      spec: input.spec,
      timeoutS: input.timeoutS,
      generation: input.claimedGeneration + 1,
      endpoint: input.endpoint,
    }, input.waitMs);
    if (!t.ok) {
      // The intent never reached the outbox: nobody else knows this sandbox, so forget it.
      if (!existed && slot.state) this.purge(id, slot);
      return t;
    }
    if (!t.acked) {
      await this.apply(id, { type: "kill" }, 0);
      return { ok: false, error: { code: ErrorCode.placementTimeout, message: `The cluster did not take sandbox "${id}" within ${input.waitMs} ms` } };
    }
    if (slot.state?.phase === "Failed") {
      const error = { code: ErrorCode.createFailed, message: failureMessage(slot.state) };
      await this.apply(id, { type: "kill" }, 0);
      return { ok: false, error };
    }
    // A kill may have landed while the ack was awaited.
    if (!slot.state || slot.state.phase === "Terminating") return notFound(id);
    return { ok: true, sandbox: sandboxInfo(slot.state) };
  }

  async info(id: string, access: Access): Promise<Result<{ sandbox: SandboxInfo }>> {
    const s = this.find(id)?.state ?? null;
    if (!visibleTo(s, access) || s.phase === "Failed") return notFound(id);
    return { ok: true, sandbox: sandboxInfo(s) };
  }

  async kill(id: string, access: Access): Promise<Result> {
    return this.applyVisible(id, access, { type: "kill" });
  }

  async setTimeout(id: string, access: Access, timeoutS: number): Promise<Result> {
    return this.applyVisible(id, access, { type: "setTimeout", timeoutS });
  }

  async refresh(id: string, access: Access, durationS: number): Promise<Result> {
    return this.applyVisible(id, access, { type: "refresh", durationS });
  }

  async pause(id: string, access: Access, strategy?: PauseStrategy): Promise<Result> {
    return this.applyVisible(id, access, { type: "pause", strategy });
  }

  /** E2B connect (and the deprecated resume): `resumed` tells 201 from 200. */
  async connectSandbox(
    id: string,
    access: Access,
    opts: { timeoutS: number; memory?: boolean; waitMs?: number },
  ): Promise<Result<{ sandbox: SandboxInfo; resumed: boolean }>> {
    if (!visibleTo(this.find(id)?.state ?? null, access)) return notFound(id);
    const waitMs = opts.waitMs ?? DEFAULT_WAIT_MS;
    const t = await this.apply(id, { type: "connect", timeoutS: opts.timeoutS, memory: opts.memory }, waitMs);
    if (!t.ok) return t;
    const ready = await this.waitRunning(id, waitMs);
    if (!ready.ok) return ready;
    return { ok: true, sandbox: sandboxInfo(ready.state), resumed: t.resumed === true };
  }

  /** Gateway: where the sandbox lives and its tokens, in whatever state it is. */
  async route(id: string): Promise<Result<{ route: RouteInfo }>> {
    const s = this.find(id)?.state;
    if (!s || s.phase === "Terminating") return notFound(id);
    return { ok: true, route: routeInfo(s) };
  }

  /**
   * Gateway: traffic arrived. Resumes a paused sandbox when its lifecycle allows auto-resume and
   * waits (bounded) until it is Running; refusals are typed (not found, conflict: paused without
   * auto-resume, timeout, failed).
   */
  async wake(id: string, waitMs: number = DEFAULT_WAIT_MS): Promise<Result<{ route: RouteInfo; resumed: boolean }>> {
    const s = this.find(id)?.state;
    if (!s || s.phase === "Terminating") return notFound(id);
    const t = await this.apply(id, { type: "wake" }, waitMs);
    if (!t.ok) return t;
    const ready = await this.waitRunning(id, waitMs);
    if (!ready.ok) return ready;
    return { ok: true, route: routeInfo(ready.state), resumed: t.resumed === true };
  }

  /** ClusterDO: agent observations of this group's sandboxes, in arrival order per sandbox. */
  async observeBatch(observations: Observation[]): Promise<{ ok: true }> {
    for (const obs of observations) await this.apply(obs.sandboxId, { type: "observe", obs }, 0);
    return { ok: true };
  }

  /** Operators and tests: the full state (phase, conditions, generations, timers). */
  async inspect(id: string): Promise<SandboxState | null> {
    return this.find(id)?.state ?? null;
  }

  override async alarm(): Promise<void> {
    this.alarmAt = null;
    const now = Date.now();
    await Promise.all(this.store.dueIds(now).map((id) => this.fire(id, now)));
    this.arm(this.store.nextDue());
  }

  private async fire(id: string, now: number): Promise<void> {
    const slot = this.slot(id);
    if (slot.undelivered && slot.undelivered.retryAt <= now) await this.redeliver(id, slot, slot.undelivered.intent);
    await this.apply(id, { type: "alarm" }, 0);
  }

  private async applyVisible(id: string, access: Access, ev: SandboxEvent): Promise<Result> {
    if (!visibleTo(this.find(id)?.state ?? null, access)) return notFound(id);
    return this.apply(id, ev, 0);
  }

  private async apply(id: string, ev: SandboxEvent, awaitAckMs: number): Promise<Result<{ resumed?: boolean; acked?: boolean }>> {
    const slot = this.slot(id);
    const t = transition(slot.state, ev, Date.now());
    if (!t.result.ok) {
      this.release(id, slot);
      return t.result;
    }
    // The machine hands back the very same object when nothing changed (e.g. the agent's
    // observation of a re-init its ack already reported): no write then.
    const changed = t.state !== slot.state;
    slot.state = t.state;
    const intents: IntentInput[] = [];
    const writes: Promise<void>[] = [];
    for (const e of t.effects) {
      if (e.kind === "intent") intents.push(e.intent);
      else if (e.kind === "index" && slot.state) writes.push(this.index({ kind: "upsert", row: indexRow(slot.state) }));
      else if (e.kind === "purge") this.purge(id, slot);
    }
    if (changed && slot.state) this.save(id, slot);
    notify(slot);
    // A client's own change is in the index before its reply (list right after kill must not
    // show the sandbox); the write runs beside the enqueue. Agent- and timer-driven writes do not
    // hold anyone up.
    const readYourWrites = ev.type !== "observe" && ev.type !== "ack" && ev.type !== "alarm" ? Promise.all(writes) : Promise.resolve();
    let acked = true;
    if (intents.length > 0 && slot.state) {
      const cluster = slot.state.spec.cluster;
      const sent = this.env.CLUSTER.get(this.env.CLUSTER.idFromName(cluster))
        .enqueue(intents, { awaitAckMs, knownEndpoint: slot.state.endpoint })
        .catch((err) => ({ ok: false as const, error: { code: ErrorCode.internal, message: `cluster ${cluster}: ${err}` } }));
      const [res] = await Promise.all([sent, readYourWrites]);
      if (!res.ok) {
        if (ev.type === "create") return res;
        this.setUndelivered(id, slot, { intent: intents[intents.length - 1]!, retryAt: Date.now() + RETRY_MS });
        return { ...t.result, acked: false };
      }
      if (slot.undelivered) this.setUndelivered(id, slot, null);
      acked = awaitAckMs === 0 || !res.timedOut;
      for (const a of res.acks) {
        if (a.sandboxId === id) await this.apply(id, { type: "ack", generation: a.generation, result: a.result, message: a.message }, 0);
      }
    } else await readYourWrites;
    this.release(id, slot);
    return { ...t.result, acked };
  }

  /** The sandbox's slot, loaded from its row (or empty, for a create). */
  private slot(id: string): Slot {
    let slot = this.find(id);
    if (!slot) {
      slot = { state: null, undelivered: null, waiters: new Set() };
      this.slots.set(id, slot);
    }
    return slot;
  }

  /** The slot of a stored sandbox; null (and nothing cached) for an unknown id. */
  private find(id: string): Slot | null {
    const cached = this.slots.get(id);
    if (cached) return cached;
    const row = this.stored.has(id) ? this.store.load(id) : null;
    if (!row) return null;
    const slot: Slot = { state: row.state, undelivered: row.undelivered, waiters: new Set() };
    this.slots.set(id, slot);
    return slot;
  }

  /** Drops an empty slot nobody waits on, so probes of unknown ids do not pile up in memory. */
  private release(id: string, slot: Slot): void {
    if (!slot.state && !slot.undelivered && slot.waiters.size === 0 && this.slots.get(id) === slot) this.slots.delete(id);
  }

  private save(id: string, slot: Slot): void {
    const timer = dueAt(slot.state);
    const retry = slot.undelivered?.retryAt ?? null;
    const due = timer === null ? retry : retry === null ? timer : Math.min(timer, retry);
    const row = { state: slot.state!, undelivered: slot.undelivered };
    if (this.stored.has(id)) this.store.update(id, row, due);
    else {
      this.store.insert(id, row, due);
      this.stored.add(id);
    }
    this.arm(due);
  }

  /** The sandbox is gone: its row goes, and so does its index row. */
  private purge(id: string, slot: Slot): void {
    slot.state = null;
    slot.undelivered = null;
    this.store.remove(id);
    this.stored.delete(id);
    notify(slot);
    this.release(id, slot);
    void this.index({ kind: "delete", id });
  }

  /**
   * One alarm for the group, at the earliest due time written. A sandbox whose timer moved later
   * (or went away) leaves the alarm where it was: it fires early, finds nothing due and re-arms.
   */
  private arm(due: number | null): void {
    if (due === null || (this.alarmAt !== null && this.alarmAt <= due)) return;
    this.alarmAt = due;
    void this.ctx.storage.setAlarm(due);
  }

  /**
   * Index ops from every sandbox of the group leave in one SandboxIndexDO call per flush (group
   * commit, in order, so one sandbox's writes never overtake each other). Resolves once the op's
   * batch is committed (or failed: a lost batch only costs index freshness, and is logged).
   */
  private index(op: IndexOp): Promise<void> {
    return new Promise((done) => {
      this.indexQueue.push({ op, done });
      if (this.indexFlush) return;
      this.indexFlush = this.flushIndex().finally(() => (this.indexFlush = null));
      this.ctx.waitUntil(this.indexFlush);
    });
  }

  private async flushIndex(): Promise<void> {
    const writer = this.env.SANDBOX_INDEX.get(this.env.SANDBOX_INDEX.idFromName(INDEX_WRITER_NAME));
    while (this.indexQueue.length > 0) {
      const batch = this.indexQueue.splice(0);
      try {
        const r = await writer.write(batch.map((q) => q.op));
        if (!r.ok) console.error(`index write of ${batch.length} ops failed`, r.error);
      } catch (err) {
        console.error(`index write of ${batch.length} ops failed`, err);
      }
      for (const q of batch) q.done();
    }
  }

  private async redeliver(id: string, slot: Slot, intent: IntentInput): Promise<void> {
    const cluster = this.env.CLUSTER.get(this.env.CLUSTER.idFromName(slot.state!.spec.cluster));
    const res = await cluster.enqueue([intent]).catch((err) => ({ ok: false as const, error: String(err) }));
    this.setUndelivered(id, slot, res.ok ? null : { intent, retryAt: Date.now() + RETRY_MS });
  }

  private setUndelivered(id: string, slot: Slot, u: Undelivered | null): void {
    slot.undelivered = u;
    if (slot.state) this.save(id, slot);
  }

  private async waitRunning(id: string, ms: number): Promise<Result<{ state: SandboxState }>> {
    const slot = this.slot(id);
    const deadline = Date.now() + ms;
    try {
      for (;;) {
        const s = slot.state;
        if (!s || s.phase === "Terminating") return notFound(id);
        if (s.phase === "Running") return { ok: true, state: s };
        if (s.phase === "Failed") return { ok: false, error: { code: ErrorCode.createFailed, message: failureMessage(s) } };
        const left = deadline - Date.now();
        if (left <= 0) return { ok: false, error: { code: ErrorCode.placementTimeout, message: `Sandbox "${id}" did not become ready within ${ms} ms` } };
        await new Promise<void>((resolve) => {
          const done = () => {
            clearTimeout(timer);
            slot.waiters.delete(done);
            resolve();
          };
          const timer = setTimeout(done, left);
          slot.waiters.add(done);
        });
      }
    } finally {
      this.release(id, slot);
    }
  }
}

function notify(slot: Slot): void {
  for (const w of [...slot.waiters]) w();
}

function failureMessage(s: SandboxState): string {
  const ready = s.conditions.find((c) => c.type === "Ready");
  return `Sandbox failed: ${ready?.reason ?? "unknown"}${ready?.message ? ` (${ready.message})` : ""}`;
}

function notFound(id: string): { ok: false; error: { code: typeof ErrorCode.sandboxNotFound; message: string } } {
  return { ok: false, error: { code: ErrorCode.sandboxNotFound, message: sandboxNotFoundMessage(id) } };
}
