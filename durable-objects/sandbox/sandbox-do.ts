// SandboxDO: one per sandbox (`idFromName(sandboxId)`). A thin shell around machine.ts: it keeps
// the state in memory and in DO storage, applies events, performs the effects (intents to the
// ClusterDO, index rows to libSQL) and keeps one alarm at `dueAt(state)`. Every RPC resolves to a
// typed result; none throws (a throwing RPC leaks unhandled rejections under the vitest plugin).
import { DurableObject } from "cloudflare:workers";
import type { Env } from "../../functions/env.ts";
import type { IndexOp } from "../../functions/store/sandbox-index.ts";
import { ErrorCode, sandboxNotFoundMessage } from "../../schema/errors.ts";
import type { Endpoint, IntentInput, Observation, PauseStrategy } from "../../schema/protocol/index.ts";
import type { SandboxEvent } from "./events.ts";
import { indexRow, routeInfo, sandboxInfo, type RouteInfo, type SandboxInfo } from "./info.ts";
import { INDEX_WRITER_NAME, type IndexWriteResult } from "./index-writer-do.ts";
import { dueAt, transition, visibleTo } from "./machine.ts";
import type { Access, Result, SandboxSpec, SandboxState } from "./state.ts";

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

const STATE_KEY = "state";
const PREPARED_KEY = "prepared";
/** An intent ClusterDO did not take is retried after this long (level-based: only the newest). */
const RETRY_MS = 2_000;
const UNDELIVERED_KEY = "undelivered";

export class SandboxDO extends DurableObject<Env> {
  private state: SandboxState | null = null;
  private alarmAt: number | null = null;
  private undelivered: { intent: IntentInput; retryAt: number } | null = null;
  private indexChain: Promise<void> = Promise.resolve();
  private waiters = new Set<() => void>();

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    void ctx.blockConcurrencyWhile(async () => {
      this.state = (await ctx.storage.get<SandboxState>(STATE_KEY)) ?? null;
      this.alarmAt = await ctx.storage.getAlarm();
      this.undelivered = (await ctx.storage.get<{ intent: IntentInput; retryAt: number }>(UNDELIVERED_KEY)) ?? null;
    });
  }

  /**
   * PoolDO calls this when it creates a warm member: it makes this object's storage exist before
   * the claim. On local workerd the first write of a new Durable Object (creating its SQLite
   * database) costs ~4 ms of CPU, which otherwise lands on the create request. No alarm: a
   * setAlarm is ~5 % of workerd's CPU samples in the edge bench (~0.2 ms), and a claim sets its
   * own anyway, so the pool calls discard() instead for a member it deletes unclaimed.
   */
  async prepare(): Promise<{ ok: true }> {
    if (!this.state) await this.ctx.storage.put(PREPARED_KEY, true);
    return { ok: true };
  }

  /** PoolDO: a member it prepared is deleted unclaimed; forget the marker prepare() wrote. */
  async discard(): Promise<{ ok: true }> {
    if (!this.state) {
      this.alarmAt = null;
      await this.ctx.storage.deleteAll();
    }
    return { ok: true };
  }

  /** Takes over a claimed member: records it, sends the owner's first intent, waits for the ack. */
  async create(input: CreateInput): Promise<Result<{ sandbox: SandboxInfo }>> {
    const existed = this.state !== null;
    const t = await this.apply({
      type: "create",
      spec: input.spec,
      timeoutS: input.timeoutS,
      generation: input.claimedGeneration + 1,
      endpoint: input.endpoint,
    }, input.waitMs);
    if (!t.ok) {
      // The intent never reached the outbox: nobody else knows this sandbox, so forget it.
      if (!existed && this.state) {
        this.state = null;
        await this.purge(input.spec.id);
        await this.syncAlarm();
      }
      return t;
    }
    if (!t.acked) {
      await this.apply({ type: "kill" }, 0);
      return { ok: false, error: { code: ErrorCode.placementTimeout, message: `The cluster did not take sandbox "${input.spec.id}" within ${input.waitMs} ms` } };
    }
    if (this.state?.phase === "Failed") {
      const error = { code: ErrorCode.createFailed, message: this.failureMessage() };
      await this.apply({ type: "kill" }, 0);
      return { ok: false, error };
    }
    // A kill may have landed while the ack was awaited.
    if (!this.state || this.state.phase === "Terminating") return this.notFound();
    return { ok: true, sandbox: sandboxInfo(this.state) };
  }

  async info(access: Access): Promise<Result<{ sandbox: SandboxInfo }>> {
    if (!visibleTo(this.state, access) || this.state.phase === "Failed") return this.notFound();
    return { ok: true, sandbox: sandboxInfo(this.state) };
  }

  async kill(access: Access): Promise<Result> {
    if (!visibleTo(this.state, access)) return this.notFound();
    return this.apply({ type: "kill" }, 0);
  }

  async setTimeout(access: Access, timeoutS: number): Promise<Result> {
    if (!visibleTo(this.state, access)) return this.notFound();
    return this.apply({ type: "setTimeout", timeoutS }, 0);
  }

  async refresh(access: Access, durationS: number): Promise<Result> {
    if (!visibleTo(this.state, access)) return this.notFound();
    return this.apply({ type: "refresh", durationS }, 0);
  }

  async pause(access: Access, strategy?: PauseStrategy): Promise<Result> {
    if (!visibleTo(this.state, access)) return this.notFound();
    return this.apply({ type: "pause", strategy }, 0);
  }

  /** E2B connect (and the deprecated resume): `resumed` tells 201 from 200. */
  async connectSandbox(access: Access, opts: { timeoutS: number; memory?: boolean; waitMs?: number }): Promise<Result<{ sandbox: SandboxInfo; resumed: boolean }>> {
    if (!visibleTo(this.state, access)) return this.notFound();
    const t = await this.apply({ type: "connect", timeoutS: opts.timeoutS, memory: opts.memory }, opts.waitMs ?? DEFAULT_WAIT_MS);
    if (!t.ok) return t;
    const ready = await this.waitRunning(opts.waitMs ?? DEFAULT_WAIT_MS);
    if (!ready.ok) return ready;
    return { ok: true, sandbox: sandboxInfo(this.state!), resumed: t.resumed === true };
  }

  /** Gateway: where the sandbox lives and its tokens, in whatever state it is. */
  async route(): Promise<Result<{ route: RouteInfo }>> {
    if (!this.state || this.state.phase === "Terminating") return this.notFound();
    return { ok: true, route: routeInfo(this.state) };
  }

  /**
   * Gateway: traffic arrived. Resumes a paused sandbox when its lifecycle allows auto-resume and
   * waits (bounded) until it is Running; refusals are typed (not found, conflict: paused without
   * auto-resume, timeout, failed).
   */
  async wake(waitMs: number = DEFAULT_WAIT_MS): Promise<Result<{ route: RouteInfo; resumed: boolean }>> {
    if (!this.state || this.state.phase === "Terminating") return this.notFound();
    const t = await this.apply({ type: "wake" }, waitMs);
    if (!t.ok) return t;
    const ready = await this.waitRunning(waitMs);
    if (!ready.ok) return ready;
    return { ok: true, route: routeInfo(this.state!), resumed: t.resumed === true };
  }

  /** ClusterDO: an agent observation for this sandbox. */
  async observe(obs: Observation): Promise<{ ok: true }> {
    await this.apply({ type: "observe", obs }, 0);
    return { ok: true };
  }

  /** Operators and tests: the full state (phase, conditions, generations, timers). */
  async inspect(): Promise<SandboxState | null> {
    return this.state;
  }

  /** Operators and tests: the keys this object keeps in storage (none once discarded or purged). */
  async storedKeys(): Promise<string[]> {
    return [...(await this.ctx.storage.list()).keys()];
  }

  override async alarm(): Promise<void> {
    this.alarmAt = null;
    if (!this.state) return this.ctx.storage.deleteAll();
    if (this.undelivered && this.undelivered.retryAt <= Date.now()) await this.redeliver(this.undelivered.intent);
    await this.apply({ type: "alarm" }, 0);
  }

  private async apply(ev: SandboxEvent, awaitAckMs: number): Promise<Result<{ resumed?: boolean; acked?: boolean }>> {
    const id = this.state?.spec.id;
    const t = transition(this.state, ev, Date.now());
    if (!t.result.ok) return t.result;
    // The machine hands back the very same object when nothing changed (e.g. the agent's
    // observation of a re-init its ack already reported): no storage write then.
    const changed = t.state !== this.state;
    this.state = t.state;
    if (this.state && changed) void this.ctx.storage.put(STATE_KEY, this.state);
    const intents = [];
    const writes: Promise<void>[] = [];
    for (const e of t.effects) {
      if (e.kind === "intent") intents.push(e.intent);
      else if (e.kind === "index" && this.state) writes.push(this.writeIndex(this.state));
      else if (e.kind === "purge") await this.purge(id);
    }
    await this.syncAlarm();
    this.notify();
    // A client's own change is in the index before its reply (list right after kill must not
    // show the sandbox); the write runs beside the enqueue. Agent- and timer-driven writes do not
    // hold anyone up.
    const readYourWrites = ev.type !== "observe" && ev.type !== "ack" && ev.type !== "alarm" ? Promise.all(writes) : Promise.resolve();
    let acked = true;
    if (intents.length > 0 && this.state) {
      const cluster = this.env.CLUSTER.get(this.env.CLUSTER.idFromName(this.state.spec.cluster));
      const sent = cluster.enqueue(intents, { awaitAckMs }).catch((err) => ({ ok: false as const, error: { code: ErrorCode.internal, message: `cluster ${this.state?.spec.cluster}: ${err}` } }));
      const [res] = await Promise.all([sent, readYourWrites]);
      if (!res.ok) {
        if (ev.type === "create") return res;
        await this.setUndelivered({ intent: intents[intents.length - 1]!, retryAt: Date.now() + RETRY_MS });
        return { ...t.result, acked: false };
      }
      if (this.undelivered) await this.setUndelivered(null);
      acked = awaitAckMs === 0 || !res.timedOut;
      for (const a of res.acks) {
        if (a.sandboxId === this.state?.spec.id) await this.apply({ type: "ack", generation: a.generation, result: a.result, message: a.message }, 0);
      }
    } else await readYourWrites;
    return { ...t.result, acked };
  }

  private async purge(id: string | undefined): Promise<void> {
    this.undelivered = null;
    await this.ctx.storage.deleteAll();
    if (id) void this.index({ kind: "delete", id });
  }

  private writeIndex(s: SandboxState): Promise<void> {
    return this.index({ kind: "upsert", row: indexRow(s) });
  }

  /** Index ops of this sandbox are chained so they reach the writer in order. */
  private index(op: IndexOp): Promise<void> {
    const writer = this.env.SANDBOX_INDEX.get(this.env.SANDBOX_INDEX.idFromName(INDEX_WRITER_NAME));
    const id = op.kind === "delete" ? op.id : op.row.id;
    const write = this.indexChain
      .then(async () => {
        const r: IndexWriteResult = await writer.write([op]);
        if (!r.ok) console.error("index write failed", id, r.error);
      })
      .catch((err) => console.error("index write failed", id, err));
    this.indexChain = write;
    this.ctx.waitUntil(write);
    return write;
  }

  private async redeliver(intent: IntentInput): Promise<void> {
    const cluster = this.env.CLUSTER.get(this.env.CLUSTER.idFromName(this.state!.spec.cluster));
    const res = await cluster.enqueue([intent]).catch((err) => ({ ok: false as const, error: String(err) }));
    await this.setUndelivered(res.ok ? null : { intent, retryAt: Date.now() + RETRY_MS });
  }

  private async setUndelivered(u: { intent: IntentInput; retryAt: number } | null): Promise<void> {
    this.undelivered = u;
    if (u) await this.ctx.storage.put(UNDELIVERED_KEY, u);
    else await this.ctx.storage.delete(UNDELIVERED_KEY);
    await this.syncAlarm();
  }

  private async syncAlarm(): Promise<void> {
    const timer = dueAt(this.state);
    const retry = this.undelivered?.retryAt ?? null;
    const due = timer === null ? retry : retry === null ? timer : Math.min(timer, retry);
    if (due === this.alarmAt) return;
    this.alarmAt = due;
    if (due === null) await this.ctx.storage.deleteAlarm();
    else await this.ctx.storage.setAlarm(due);
  }

  private async waitRunning(ms: number): Promise<Result> {
    const deadline = Date.now() + ms;
    for (;;) {
      const s = this.state;
      if (!s || s.phase === "Terminating") return this.notFound();
      if (s.phase === "Running") return { ok: true };
      if (s.phase === "Failed") return { ok: false, error: { code: ErrorCode.createFailed, message: this.failureMessage() } };
      const left = deadline - Date.now();
      if (left <= 0) return { ok: false, error: { code: ErrorCode.placementTimeout, message: `Sandbox "${s.spec.id}" did not become ready within ${ms} ms` } };
      await new Promise<void>((resolve) => {
        const done = () => {
          clearTimeout(timer);
          this.waiters.delete(done);
          resolve();
        };
        const timer = setTimeout(done, left);
        this.waiters.add(done);
      });
    }
  }

  private notify(): void {
    for (const w of [...this.waiters]) w();
  }

  private failureMessage(): string {
    const ready = this.state?.conditions.find((c) => c.type === "Ready");
    return `Sandbox failed: ${ready?.reason ?? "unknown"}${ready?.message ? ` (${ready.message})` : ""}`;
  }

  private notFound(): { ok: false; error: { code: typeof ErrorCode.sandboxNotFound; message: string } } {
    return { ok: false, error: { code: ErrorCode.sandboxNotFound, message: sandboxNotFoundMessage(this.ctx.id.name ?? "") } };
  }
}
