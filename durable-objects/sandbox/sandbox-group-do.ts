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
import { stubOf } from "../object-ids.ts";
import type { TransformRules } from "../../schema/egress/transforms.ts";
import { DurableObject } from "cloudflare:workers";
import type { Lifecycle } from "../../schema/api/hooks.ts";
import type { Env } from "../env.ts";
import { tombstone, type IndexOp } from "../store/sandbox-index.ts";
import { ErrorCode, sandboxNotFoundMessage, type Refusal } from "../../schema/errors.ts";
import type { AckItem, Endpoint, Intent, Observation, PauseStrategy } from "../../schema/protocol/index.ts";
import { CoarseTimers } from "../coarse-timers.ts";
import { flushEdgeTraces, leafSpan } from "../tracing/edge-tracing.ts";
import { TurnWrites } from "../turn-writes.ts";
import type { EnqueueOptions, EnqueueResult } from "../cluster/rpc.ts";
import type { SandboxLogEntry, SandboxLogsQuery } from "../../schema/api/sandbox-logs.ts";
import type { SandboxEvent } from "./events.ts";
import { indexRow, routeInfo, sandboxInfo, type RouteInfo, type SandboxInfo } from "./info.ts";
import { IndexOutbox } from "./index-outbox.ts";
import { IndexQueue, type IndexWriter } from "./index-queue.ts";
import { INDEX_WRITER_NAME } from "./sandbox-index-do.ts";
import { dueAt, transition, visibleTo, wakeResumes } from "./machine.ts";
import type { Held } from "../quota/ledger.ts";
import { held, QuotaLink } from "./quota-link.ts";
import { restarting, type Access, type Result, type SandboxNote, type SandboxSpec, type SandboxState } from "./state.ts";
import { notify, SlotCache, type Slot } from "./slot-cache.ts";
import { openSandboxStore, type SandboxStore } from "./store.ts";
import { opsCandidate, restoreNeeds, restoresSettled, upgradeOutcome, type OpsCandidate, type UpgradeOutcome, type UpgradeRequest } from "./upgrade.ts";
import { opsStub } from "../ops/stub.ts";
import { countInObject } from "../metrics/edge-metrics.ts";
import { EDGE } from "../metrics/families.ts";
import { edgeLogger } from "../tracing/edge-log.ts";

/** Bound on waiting for the address of a `return-sandbox-ip` create once the sandbox runs. */
const ADDRESS_WAIT_MS = 5_000;

const LOG = edgeLogger("sandbox-group");

export { sandboxGroupOf } from "./stub.ts";

export interface CreateInput {
  spec: SandboxSpec;
  timeoutS: number;
  /** Generation of the pool's last intent for this member; ours start above it. */
  claimedGeneration: number;
  endpoint: Endpoint | null;
  /** Bound on waiting for the agent to acknowledge the claim. */
  waitMs: number;
  /** The caller's trace context (tracing on). */
  traceparent?: string;
}

/** Default bound on waiting for the agent (create, resume, wake). */
export const DEFAULT_WAIT_MS = 10_000;

/** Requests held at once for one sandbox while its pid 1 starts again (`restarted`), by who sent
 * them; more of that kind are answered "retry" at once. The owner's (they passed a token check)
 * have a bound of their own: anonymous ones (envd's /health, a signed /files URL, a user port open
 * to all), which anyone who knows the id may send, cannot crowd them out. */
export const MAX_HELD_PER_SANDBOX = { owner: 256, anyone: 32 } as const;
export type HeldBy = keyof typeof MAX_HELD_PER_SANDBOX;

/** An intent ClusterDO did not take (or not yet) is sent again after this long. */
const RETRY_MS = 2_000;
/** An enqueue that has not answered this long after its ack wait is counted as failed (and retried). */
const ENQUEUE_GRACE_MS = 10_000;
/** ClusterDO's own bound on an ack wait (cluster-do.ts MAX_AWAIT_MS). */
const MAX_ACK_WAIT_MS = 30_000;

/** `ack`: the agent's answer to the intent this event sent, when it came in time. */
type Applied = Result<{ resumed?: boolean; acked?: boolean; failure?: Refusal; ack?: AckItem }>;

/** What a taken snapshot needs from its source to make sandboxes of it later. */
export interface SnapshotSource {
  teamId: string;
  /** Absent for sandboxes created before the team's name was kept. */
  teamName?: string;
  templateId: string;
  cluster: string;
}

/**
 * What a pause (or a timeout's auto-pause) would make of the sandbox now, when that holds a paused
 * slot it does not hold yet: the machine is pure, so this is a dry run (a refusal is left to apply).
 */
function plannedPause(s: SandboxState | null, ev: SandboxEvent, now: number): SandboxState | null {
  const planned = s && transition(s, ev, now).state;
  const hold = held(planned ?? null);
  return planned && (hold === "frozen" || hold === "stopped") && hold !== held(s) ? planned : null;
}

export class SandboxGroupDO extends DurableObject<Env> {
  private readonly store: SandboxStore;
  /** The sandboxes in memory (set in the constructor: loading needs the store). */
  private readonly slots: SlotCache;
  /** Ids with a row: a create (always a new id) or a probe of an unknown one reads nothing. */
  private readonly stored: Set<string>;
  /** Sandboxes whose alarm work is running, so an early re-fire does not run it twice. */
  private readonly firing = new Set<string>();
  /** The alarm time this instance set (null: none, or unknown until the constructor read it). */
  private alarmAt: number | null = null;
  private readonly indexQueue = new IndexQueue(() => this.indexWriter(), (p) => this.ctx.waitUntil(p));
  /** Index ops kept until libSQL has them (set in the constructor: it needs the store). */
  private readonly indexOutbox: IndexOutbox;
  /** Its one wait is an enqueue's bound (ten seconds past the ack wait), which may fire a second
   * late: the creates of a second then share a runtime timer, not one per 100 ms. */
  private readonly timers = new CoarseTimers(1_000);
  /** The team quota: reserve before a resume, release/assert after a committed transition. */
  private readonly quota = new QuotaLink(this.env, (p) => this.ctx.waitUntil(p));
  /** The quota's first try of the latest transition of each sandbox whose follow is not answered
   * yet: a connect or wake answers after the resume's end gave its paused slot back (quota-link
   * `resuming`), so a pause right after it is not refused for that slot. */
  private readonly quotaFollows = new Map<string, Promise<void>>();
  /** Spec objects already in storage (the spec row is rewritten only when the spec changed). */
  private readonly writtenSpecs = new WeakSet<object>();
  /**
   * Row writes wait for the end of the turn, so the events that came meanwhile (creates, acks)
   * share one commit. Nothing that depends on a write (an intent, an index row, a waiter, an
   * answer) goes before it: apply awaits `written` first, and the output gate holds what leaves
   * then until the commit. Reads of rows run the writes first.
   */
  private readonly turn = new TurnWrites("sandbox group", this.ctx.storage, () => {
    this.slots.clear();
    this.stored.clear();
    for (const id of this.store.ids()) this.stored.add(id);
  });

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.store = openSandboxStore(ctx.storage.sql);
    this.stored = new Set(this.store.ids());
    this.slots = new SlotCache((id) => {
      if (!this.stored.has(id)) return null;
      this.turn.flush();
      const row = this.store.load(id);
      if (row) this.writtenSpecs.add(row.state.spec);
      return row;
    });
    this.indexOutbox = new IndexOutbox(this.store, this.indexQueue, (w) => this.turn.defer(w), (at) => this.arm(at));
    void ctx.blockConcurrencyWhile(async () => {
      this.alarmAt = await ctx.storage.getAlarm();
      // What a previous instance left unconfirmed goes out again soon.
      if (this.store.outbox(1).length > 0) this.arm(Date.now());
    });
  }

  /** Takes over a claimed member: records it, sends the owner's first intent, waits for the ack. */
  async create(id: string, input: CreateInput): Promise<Result<{ sandbox: SandboxInfo }>> {
    if (input.spec.id !== id) return { ok: false, error: { code: ErrorCode.badRequest, message: `spec id ${input.spec.id} is not ${id}` } };
    const slot = this.slots.get(id);
    const deadline = Date.now() + input.waitMs;
    slot.busy++;
    try {
      const t = await this.apply(id, {
        type: "create",
        spec: input.spec,
        timeoutS: input.timeoutS,
        generation: input.claimedGeneration + 1,
        endpoint: input.endpoint,
      }, input.waitMs, input.traceparent);
      if (!t.ok) return t;
      // Every way a create does not complete is answered after the machine's compensation
      // (`abandon`: the sandbox is killed, its row kept until ClusterDO takes the delete).
      if (t.failure) {
        await this.apply(id, { type: "abandon" }, 0);
        return { ok: false, error: t.failure };
      }
      if (!t.acked) {
        const message = `The cluster did not take sandbox "${id}" within ${input.waitMs} ms${retryDetail(slot.state)}`;
        await this.apply(id, { type: "abandon" }, 0);
        return { ok: false, error: { code: ErrorCode.placementTimeout, message } };
      }
      if (slot.state?.phase === "Failed") {
        const error = { code: ErrorCode.createFailed, message: failureMessage(slot.state) };
        await this.apply(id, { type: "abandon" }, 0);
        return { ok: false, error };
      }
      // A kill may have landed while the ack was awaited.
      if (!slot.state || slot.state.phase === "Terminating") return notFound(id);
      if (slot.state.phase === "Pending") {
        // Acked `accepted`: the agent took it but is still starting it. Handing it out now would
        // have the client's first request fail (the gateway serves Running sandboxes only).
        const ready = await this.waitRunning(id, Math.max(0, deadline - Date.now()), input.waitMs);
        if (!ready.ok) {
          if (ready.error.code !== ErrorCode.sandboxNotFound) await this.apply(id, { type: "abandon" }, 0);
          return ready;
        }
      }
      if (input.spec.returnSandboxIp && !slot.state?.address) {
        // The agent's observation of the new generation carries the address (send() asked
        // ClusterDO to route it); a sandbox without a network of its own has none to wait for.
        await this.waitRunning(id, Math.min(ADDRESS_WAIT_MS, Math.max(0, deadline - Date.now())), input.waitMs, (s) => !!s.address);
      }
      // Re-read (TypeScript keeps the narrowing from before the waits): a kill may have landed.
      const settled: SandboxState | null = slot.state;
      if (!settled || settled.phase === "Terminating") return notFound(id);
      return { ok: true, sandbox: sandboxInfo(settled) };
    } finally {
      slot.busy--;
      this.slots.release(id, slot);
    }
  }
  async info(id: string, access: Access): Promise<Result<{ sandbox: SandboxInfo }>> {
    await this.settled(); // what is answered is stored (or, after a failed batch, reloaded)
    const s = this.slots.find(id)?.state ?? null;
    if (!visibleTo(s, access) || s.phase === "Failed") return notFound(id);
    return { ok: true, sandbox: sandboxInfo(s) };
  }

  /** E2B's sandbox logs, from the sandbox's agent (held there, bounded, while the sandbox exists). */
  async logs(id: string, access: Access, query: SandboxLogsQuery): Promise<Result<{ entries: SandboxLogEntry[] }>> {
    await this.settled();
    const s = this.slots.find(id)?.state ?? null;
    if (!visibleTo(s, access) || s.phase === "Failed") return notFound(id);
    try {
      return await this.cluster(s.spec.cluster).logs(id, query);
    } catch (err) {
      return { ok: false, error: { code: ErrorCode.agentUnavailable, message: `cluster ${s.spec.cluster}: ${String(err)}` } };
    }
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

  /** A lifecycle hook ran: its condition on the sandbox (hooks/run-hook.ts). */
  async recordHook(id: string, access: Access, condition: Extract<SandboxEvent, { type: "hook" }>["condition"]): Promise<Result> {
    return this.applyVisible(id, access, { type: "hook", condition });
  }

  /** Its own lifecycle hooks (kubectl's Sandbox `spec.lifecycle`), replacing what it had. */
  async setHooks(id: string, access: Access, hooks: Lifecycle): Promise<Result> {
    return this.applyVisible(id, access, { type: "hooks", hooks });
  }

  /**
   * E2B pause: answered once the sandbox is paused (the agent acked the pause applied, or reported
   * it paused), bounded by `waitMs`, as E2B's pause returns only then: a snapshot, fork or connect
   * right after it finds the sandbox paused, not pausing. `waitMs` 0 answers once the pause is
   * stored, for callers nobody waits on (kubectl's requests, the auto-pause probe). A pause that runs
   * out of time, or that its cluster did not take yet, continues: the answer says so. The team
   * quota's paused slot is reserved before the pause is stored: over `pausedSandboxes` it is
   * refused (429) and the sandbox keeps running.
   */
  async pause(id: string, access: Access, strategy?: PauseStrategy, waitMs: number = DEFAULT_WAIT_MS): Promise<Result> {
    const s = this.slots.find(id)?.state ?? null;
    if (!visibleTo(s, access)) return notFound(id);
    const deadline = Date.now() + waitMs;
    const ev: SandboxEvent = { type: "pause", strategy };
    const reserved = await this.withPauseReserved(id, plannedPause(s, ev, Date.now()), () => this.apply(id, ev, waitMs, access.traceparent));
    if (!reserved.ok) return reserved;
    const t = reserved.value;
    if (!t.ok) return t;
    if (waitMs <= 0) return { ok: true };
    if (t.failure) return { ok: false, error: { code: ErrorCode.internal, message: `The pause of sandbox "${id}" did not reach its cluster yet (${t.failure.message}); it is sent again until it does, and the sandbox stays paused` } };
    return this.waitSettled(
      id,
      Math.max(0, deadline - Date.now()),
      (s) => {
        if (s.phase === "Paused") return { ok: true };
        if (s.phase === "Pausing") return null;
        if (s.phase === "Failed") return { ok: false, error: { code: ErrorCode.internal, message: `Sandbox "${id}" failed pausing: ${failureMessage(s)}` } };
        // A connect (or wake) came meanwhile: its resume replaced the pause.
        return { ok: false, error: { code: ErrorCode.conflict, message: `Sandbox "${id}" was resumed before its pause finished` } };
      },
      (s) => ({ code: ErrorCode.internal, message: `Sandbox "${id}" did not pause within ${waitMs} ms${retryDetail(s)}; the pause continues` }),
      // Killed once the pause was stored (its paused retention ended, or a kill): nothing runs
      // any more, which is what the pause asked.
      { ok: true },
    );
  }

  /**
   * A pause's paused slot reserved before its prePause hook runs (pause-resume.ts `pauseSandbox`),
   * so a pause the team quota refuses never runs the hook; `pause` then finds it reserved. A hook
   * that refuses gives it back (`cancelPause`).
   */
  async reservePause(id: string, access: Access, strategy?: PauseStrategy): Promise<Result> {
    const s = this.slots.find(id)?.state ?? null;
    if (!visibleTo(s, access)) return notFound(id);
    const planned = plannedPause(s, { type: "pause", strategy }, Date.now());
    return planned ? this.quota.beforePause(planned) : { ok: true };
  }

  /** The pause `reservePause` reserved will not happen (its hook refused): the slot goes back now. */
  async cancelPause(id: string, access: Access): Promise<Result> {
    const s = this.slots.find(id)?.state ?? null;
    if (!visibleTo(s, access)) return notFound(id);
    const planned = this.quota.reservedPause(id);
    if (planned) await this.quota.afterPause(planned, s);
    return { ok: true };
  }

  /**
   * Dry-run → reserve → apply → revert, for every pause (a client's, the auto-pause at timeout):
   * `planned` (plannedPause) is reserved first, refusable; after `apply` a sandbox that did not
   * become what was reserved gives the slot back at once (QuotaLink.afterPause), also when `apply`
   * throws.
   */
  private async withPauseReserved<T>(id: string, planned: SandboxState | null, apply: () => Promise<T>): Promise<Result<{ value: T }>> {
    if (planned) {
      const reserved = await this.quota.beforePause(planned);
      if (!reserved.ok) return reserved;
    }
    try {
      return { ok: true, value: await apply() };
    } finally {
      // Also when the apply threw (its row write failed): the running slot is not left uncounted.
      if (planned) await this.quota.afterPause(planned, this.slots.find(id)?.state ?? null);
    }
  }

  /** E2B updateNetwork: answered once the agent has taken the new rules (bounded by `waitMs`). */
  async updateNetwork(
    id: string,
    access: Access,
    update: { allowOut?: string[]; denyOut?: string[]; rules?: TransformRules; allowInternetAccess: boolean | null },
    waitMs: number = DEFAULT_WAIT_MS,
  ): Promise<Result> {
    const state = this.slots.find(id)?.state ?? null;
    if (!visibleTo(state, access)) return notFound(id);
    const refusal = update.rules && Object.keys(update.rules).length ? await this.cluster(state!.spec.cluster).networkRulesRefusal(state!.spec.cluster) : null;
    if (refusal) return { ok: false, error: refusal };
    const t = await this.apply(id, { type: "updateNetwork", ...update }, waitMs);
    if (!t.ok) return t;
    if (t.failure) return { ok: false, error: t.failure };
    if (!t.acked) return { ok: false, error: { code: ErrorCode.placementTimeout, message: `The cluster did not apply the network rules of sandbox "${id}" within ${waitMs} ms (they apply when it does)` } };
    if (this.slots.find(id)?.state?.phase === "Failed") return { ok: false, error: { code: ErrorCode.conflict, message: `Sandbox "${id}" failed applying the network rules` } };
    return { ok: true };
  }

  /**
   * E2B createSnapshot: the agent takes snapshot `snapshotId` of the sandbox (frozen for the
   * copy, then as it was) with the next generation; answered once it has, bounded by `waitMs`.
   * A driver that cannot take snapshots answers 501 naming why; another failure leaves the
   * sandbox as it was.
   */
  async snapshot(id: string, access: Access, snapshotId: string, waitMs: number): Promise<Result<{ source: SnapshotSource }>> {
    const s = this.slots.find(id)?.state ?? null;
    if (!visibleTo(s, access)) return notFound(id);
    const source = { teamId: s.spec.teamId, teamName: s.spec.teamName, templateId: s.spec.templateId, cluster: s.spec.cluster };
    const t = await this.apply(id, { type: "snapshot", snapshotId }, waitMs, access.traceparent);
    if (!t.ok) return t;
    if (t.failure) return { ok: false, error: t.failure };
    if (!t.acked || !t.ack) return { ok: false, error: { code: ErrorCode.placementTimeout, message: `The cluster did not take the snapshot of sandbox "${id}" within ${waitMs} ms` } };
    const failed = t.ack.snapshotError ?? (t.ack.result === "rejected" ? { reason: "IntentRejected", message: t.ack.message ?? "the agent rejected the intent" } : undefined);
    if (failed) {
      const code = failed.reason === "Unsupported" ? ErrorCode.notImplemented : ErrorCode.internal;
      return { ok: false, error: { code, message: `The snapshot of sandbox "${id}" was not taken: ${failed.message}` } };
    }
    return { ok: true, source };
  }

  /** E2B connect (and the deprecated resume): `resumed` tells 201 from 200. */
  async connectSandbox(
    id: string,
    access: Access,
    opts: { timeoutS: number; memory?: boolean; waitMs?: number },
  ): Promise<Result<{ sandbox: SandboxInfo; resumed: boolean }>> {
    const s = this.slots.find(id)?.state ?? null;
    if (!visibleTo(s, access)) return notFound(id);
    if (s.phase === "Pausing" || s.phase === "Paused") {
      const reserved = await this.quota.beforeResume(s);
      if (!reserved.ok) return reserved;
    }
    const waitMs = opts.waitMs ?? DEFAULT_WAIT_MS;
    const from = s.generation;
    const t = await this.apply(id, { type: "connect", timeoutS: opts.timeoutS, memory: opts.memory }, waitMs, access.traceparent);
    if (!t.ok) return t;
    if (t.resumed) countInObject(this.env, EDGE.wakeups, { via: "connect" });
    const ready = await this.waitRunning(id, waitMs, waitMs, undefined, from);
    if (!ready.ok) return ready;
    await this.quotaFollows.get(id);
    return { ok: true, sandbox: sandboxInfo(ready.state), resumed: t.resumed === true };
  }

  /** Gateway: where the sandbox lives and its tokens, in whatever state it is. */
  async route(id: string): Promise<Result<{ route: RouteInfo }>> {
    await this.settled();
    const s = this.slots.find(id)?.state;
    if (!s || s.phase === "Terminating") return notFound(id);
    return { ok: true, route: routeInfo(s) };
  }

  /**
   * Gateway: traffic arrived. Resumes a paused sandbox when its lifecycle allows auto-resume and
   * waits (bounded) until it is Running; refusals are typed (not found, conflict: paused without
   * auto-resume, timeout, failed).
   */
  async wake(id: string, waitMs: number = DEFAULT_WAIT_MS): Promise<Result<{ route: RouteInfo; resumed: boolean }>> {
    const s = this.slots.find(id)?.state;
    if (!s || s.phase === "Terminating") return notFound(id);
    if (wakeResumes(s)) {
      const reserved = await this.quota.beforeResume(s);
      if (!reserved.ok) return reserved;
    }
    const from = s.generation;
    const t = await this.apply(id, { type: "wake" }, waitMs);
    if (!t.ok) return t;
    if (t.resumed) countInObject(this.env, EDGE.wakeups, { via: "traffic" });
    const ready = await this.waitRunning(id, waitMs, waitMs, undefined, from);
    if (!ready.ok) return ready;
    await this.quotaFollows.get(id);
    return { ok: true, route: routeInfo(ready.state), resumed: t.resumed === true };
  }

  /**
   * Gateway: a request for a sandbox whose pid 1 is starting again (state.ts `restarting`) waits,
   * bounded, until it is not: its route as it is then (ready again, or whatever it became
   * meanwhile, which the gateway judges as any route), or a timeout (placementTimeout) or, past
   * MAX_HELD_PER_SANDBOX waiting, a refusal at once (capacityUnavailable), both of which the gateway
   * answers as "retry". The sandbox itself is not touched.
   */
  async restarted(id: string, waitMs: number, by: HeldBy = "anyone"): Promise<Result<{ route: RouteInfo }>> {
    const slot = this.slots.find(id);
    if (!slot) return notFound(id);
    // Anyone may send some of what the gateway holds (envd's /health, a signed URL): a bounded
    // number wait, counted apart from the owner's so those never crowd the owner's out.
    const held = slot.restartHeld[by];
    if (held >= MAX_HELD_PER_SANDBOX[by]) {
      this.slots.release(id, slot);
      return { ok: false, error: { code: ErrorCode.capacityUnavailable, message: `Sandbox "${id}" is starting again (its init process ended) and ${held} requests already wait for it` } };
    }
    const timedOut = { code: ErrorCode.placementTimeout, message: `Sandbox "${id}" is starting again (its init process ended) and was not back within ${waitMs} ms` };
    slot.restartHeld[by]++;
    try {
      return await this.waitSettled(id, waitMs, (s): Result<{ route: RouteInfo }> | null => (restarting(s) ? null : { ok: true, route: routeInfo(s) }), () => timedOut);
    } finally {
      slot.restartHeld[by]--;
    }
  }

  /** ClusterDO: agent observations of this group's sandboxes, in arrival order per sandbox. */
  async observeBatch(observations: Observation[]): Promise<{ ok: true }> {
    for (const obs of observations) await this.apply(obs.sandboxId, { type: "observe", obs }, 0);
    return { ok: true };
  }

  /** TeamQuotaDO's reconcile: whether each sandbox still counts against its team's quota, and how (frozen, stopped). */
  async quotaHeld(ids: string[]): Promise<Record<string, Held>> {
    await this.settled();
    const out: Record<string, Held> = {};
    for (const id of ids) {
      const s = this.slots.find(id)?.state;
      const h = held(s ?? null);
      out[id] = s ? { known: true, counted: h !== null, ...(h && h !== "running" ? { paused: h } : {}), generation: s.generation } : { known: false };
    }
    return out;
  }

  /** An update ops run's selection: this group's sandboxes of `teamId` among `ids`. */
  async opsCandidates(teamId: string, ids: string[]): Promise<OpsCandidate[]> {
    await this.settled();
    const out: OpsCandidate[] = [];
    for (const id of ids) {
      const s = this.slots.find(id)?.state;
      if (s && s.spec.teamId === teamId && s.phase !== "Terminating") out.push(opsCandidate(s));
    }
    return out;
  }

  /**
   * An update ops run's upgrades: starts each one not started yet (idempotent by revision and
   * attempt, so a run that lost an answer asks again safely) and answers where each stands.
   */
  async upgradeBatch(items: UpgradeRequest[]): Promise<Record<string, UpgradeOutcome>> {
    const out: Record<string, UpgradeOutcome> = {};
    await Promise.all(
      items.map(async (it) => {
        const s = this.slots.find(it.id)?.state ?? null;
        if (!s || s.spec.teamId !== it.teamId) {
          out[it.id] = { status: "gone" };
          return;
        }
        const t = await this.apply(it.id, { type: "upgrade", template: it.template, attempt: it.attempt, ...(it.by ? { by: it.by } : {}), ...(it.restoreFs ? { restoreFs: it.restoreFs, ...(it.holder ? { holder: it.holder } : {}) } : {}) }, 0, it.traceparent);
        const now = upgradeOutcome(this.slots.find(it.id)?.state ?? null, it.template.revision, it.attempt, it.by);
        if (t.ok || now.status !== "waiting") out[it.id] = now;
        else out[it.id] = { status: s.phase === "Failed" ? "failed" : "waiting", message: t.error.message };
      }),
    );
    return out;
  }

  /** Steps an update ops run took on its sandboxes, kept on each one's event list (a sandbox of
   * another team, or gone, is skipped). */
  async recordEvents(items: { id: string; teamId: string; notes: SandboxNote[] }[]): Promise<void> {
    for (const it of items) {
      if (this.slots.find(it.id)?.state?.spec.teamId !== it.teamId) continue;
      await this.apply(it.id, { type: "record", notes: it.notes }, 0);
    }
  }

  /** Which of these snapshots each sandbox may still need restored (`restoreNeeds`), starting
   * nothing: the snapshots an ops run holds past its members' upgrades ask this before a delete. */
  async restoresNeeded(items: { id: string; teamId: string; snapshotId: string }[]): Promise<string[]> {
    await this.settled();
    return items.filter((it) => {
      const s = this.slots.find(it.id)?.state ?? null;
      return s !== null && s.spec.teamId === it.teamId && restoreNeeds(s, it.snapshotId);
    }).map((it) => it.snapshotId);
  }

  /** Wakes each ops run holding a snapshot whose restore this change settled (restored on resume,
   * superseded, the sandbox gone), so it frees the snapshot now rather than at its next look. Best
   * effort: a lost wake-up is covered by that look (ops/left.ts). */
  private wakeHolders(before: SandboxState | null, after: SandboxState | null): void {
    if (!before?.upgrade?.holders) return;
    for (const { snapshotId, holder } of restoresSettled(before, after)) {
      const woke = opsStub(this.env, before.spec.teamId, holder).restoreSettled(snapshotId);
      this.ctx.waitUntil(woke.catch((err: unknown) => console.warn(`sandbox ${before.spec.id}: ops run ${holder} not woken for snapshot ${snapshotId}`, err)));
    }
  }

  /** Operators and tests: the full state (phase, conditions, generations, timers). */
  async inspect(id: string): Promise<SandboxState | null> {
    await this.settled();
    return this.slots.find(id)?.state ?? null;
  }

  override async alarm(): Promise<void> {
    this.alarmAt = null;
    const now = Date.now();
    this.turn.flush();
    const due = this.store.dueIds(now).filter((id) => !this.firing.has(id));
    // Re-armed before any fire is awaited, and the fires are not awaited here: one sandbox whose
    // fire waits on a slow ClusterDO must not hold the other timers of the group. A due sandbox
    // whose fire does not finish (the instance dies) is looked at again RETRY_MS later.
    this.arm(this.store.nextDue(now));
    if (due.length > 0) this.arm(now + RETRY_MS);
    this.ctx.waitUntil(Promise.all(due.map((id) => this.fire(id, now))));
    this.indexOutbox.resendDue(now, (p) => this.ctx.waitUntil(p));
  }

  private async fire(id: string, now: number): Promise<void> {
    this.firing.add(id);
    const slot = this.slots.get(id);
    slot.busy++;
    try {
      const u = slot.undelivered;
      if (u && u.retryAt <= now && slot.state) {
        // An enqueue of this generation still in flight here answers for it; look again later.
        if (slot.sending >= u.intent.generation) this.markUndelivered(id, slot, u.intent, u.traceparent);
        else {
          // A create's or a kill's index row may have been carried only by this intent's first try
          // (IndexOutbox.carry), from an instance that is gone: the sandbox's row as it is now goes
          // through the outbox beside it. A repeat is harmless (rows are guarded by revision).
          const op: IndexOp = { kind: "upsert", row: indexRow(slot.state) };
          this.indexOutbox.record(id, [op], now);
          void this.indexOutbox.send(op);
          if (u.traceparent) await this.tracedSend(id, slot, u.intent, 0, [], u.traceparent, true);
          else await this.send(id, slot, u.intent, 0);
        }
        if (slot.dirty && slot.state) this.save(id, slot);
      }
      await this.timeout(id, slot.state, now);
    } catch (err) {
      LOG.error("alarm work failed", { sandboxId: id, error: err });
    } finally {
      slot.busy--;
      this.firing.delete(id);
      this.slots.release(id, slot);
    }
  }

  /**
   * The alarm's event. An auto-pause at timeout reserves its paused slot first. Over
   * `pausedSandboxes` it is a kill, as a timeout without auto-pause is: never paused past the bound.
   * A quota that cannot answer puts the pause off, then pauses anyway (machine.ts `alarm`): a fault
   * of ours never destroys the user's data.
   */
  private async timeout(id: string, s: SandboxState | null, now: number): Promise<void> {
    const ev: SandboxEvent = { type: "alarm" };
    const done = await this.withPauseReserved(id, plannedPause(s, ev, now), () => this.apply(id, ev, 0));
    if (done.ok) return;
    const what = done.error.code === ErrorCode.quotaExceeded ? "the sandbox is killed" : "the pause is put off, or made uncounted after its last try";
    LOG.warn(`timeout's auto-pause refused by the team quota; ${what}`, { sandboxId: id, teamId: s?.spec.teamId, code: done.error.code, reason: done.error.message });
    await this.apply(id, { type: "alarm", pauseRefused: done.error }, 0);
  }

  private async applyVisible(id: string, access: Access, ev: SandboxEvent): Promise<Result> {
    if (!visibleTo(this.slots.find(id)?.state ?? null, access)) return notFound(id);
    const t = await this.apply(id, ev, 0, access.traceparent);
    if (!t.ok) return t;
    return { ok: true };
  }

  /**
   * One event: transition, one row write (with the new intent as undelivered), index writes, the
   * enqueue. `failure`: ClusterDO did not confirm taking the intent (it stays undelivered and the
   * alarm sends it again). `acked`: with `awaitAckMs`, the agent acknowledged it in time.
   */
  private async apply(id: string, ev: SandboxEvent, awaitAckMs: number, traceparent?: string): Promise<Applied> {
    const slot = this.slots.get(id);
    slot.busy++;
    try {
      const now = Date.now();
      const before = slot.state;
      const t = transition(before, ev, now);
      if (!t.result.ok) return t.result;
      // The machine hands back the very same object when nothing changed (e.g. the agent's
      // observation of a re-init its ack already reported): no write then.
      const changed = t.state !== slot.state;
      slot.state = t.state;
      let intent: Intent | null = null;
      let purged = false;
      const ops: IndexOp[] = [];
      for (const e of t.effects) {
        if (e.kind === "intent") intent = e.intent;
        else if (e.kind === "index" && slot.state) ops.push({ kind: "upsert", row: indexRow(slot.state) });
        else if (e.kind === "purge") purged = this.purge(id, slot);
      }
      // The sandbox is gone: its row becomes a tombstone, which no late write of it can undo. Its
      // kill wrote that already (indexRow of a killed sandbox), unless an older version killed it.
      if (purged && before && before.killedAt === undefined) ops.push({ kind: "upsert", row: tombstone(indexRow(before), now) });
      // An awaited intent is retried after its caller's wait (its enqueue answers for it until
      // then). Not a pause: one a restart lost before it left is sent again RETRY_MS later, as
      // before pauses were awaited, not past the wait that restart ended. While its enqueue is in
      // flight, the alarm finds it so and looks again later.
      const putOff = ev.type === "pause" ? 0 : ackWait(awaitAckMs);
      if (intent && slot.state) slot.undelivered = { intent, retryAt: now + putOff + RETRY_MS, ...(traceparent ? { traceparent } : {}) };
      // A create's or a kill's index row travels with its intent: ClusterDO commits it, batched
      // with other enqueues' rows, before it answers. That spares a SandboxIndexDO call per create
      // and per kill (~1.5 ms of workerd each, one at a time). ClusterDO tries it once: the row is
      // listable as soon as it commits, so a kill can follow before the create answers. Until the
      // answer, the row's undelivered intent stands for it (IndexOutbox.carry); a failed try is
      // rewritten below, in this group's own ordered queue, before the answer, and the outbox
      // keeps it until it commits.
      const carries = ev.type === "create" || ev.type === "kill";
      const carried = carries && intent && slot.state ? ops.splice(0) : [];
      const carry = carried.length ? this.indexOutbox.carry(carried[0]!, intent!.generation) : null;
      if ((changed || intent) && slot.state) this.save(id, slot);
      // Committed with the change: kept until libSQL has them, sent again if it does not.
      this.indexOutbox.record(id, ops, now);
      const unsaved = await this.settled();
      if (unsaved) {
        carry?.drop();
        return { ok: false, error: unsaved };
      }
      notify(slot);
      this.wakeHolders(before, slot.state);
      const quota = this.quota.follow(before, slot.state, ev.type);
      if (quota) {
        this.quotaFollows.set(id, quota);
        void quota.finally(() => {
          if (this.quotaFollows.get(id) === quota) this.quotaFollows.delete(id);
        });
      }
      const writes = ops.map((op) => this.indexOutbox.send(op));
      // A client's own change is in the index before its reply (list right after kill must not
      // show the sandbox); the write runs beside the enqueue. Agent- and timer-driven writes do
      // not hold anyone up.
      // The same holds for the quota: a kill or pause has freed its slot when answered.
      const clientDriven = ev.type !== "observe" && ev.type !== "ack" && ev.type !== "alarm";
      const readYourWrites = clientDriven ? Promise.all([...writes, quota]) : Promise.resolve();
      if (!intent || !slot.state) {
        // Not reached for a create (it has both); its op would go to the outbox.
        if (carry) this.indexOutbox.keep(id, null);
        await readYourWrites;
        return { ...t.result, acked: true };
      }
      const sent = traceparent ? this.tracedSend(id, slot, intent, awaitAckMs, carried, traceparent) : this.send(id, slot, intent, awaitAckMs, carried);
      const [res] = await Promise.all([
        carry ? carry.outcome(sent, (r) => r.ok && r.indexed === true) : sent,
        readYourWrites,
      ]);
      if (!res.ok) await this.settled(); // the intent marked undelivered
      // A carried row that did not commit is written again here, as the sandbox is now, behind
      // any later write of it (a kill that came meanwhile) in this group's ordered queue. So is a
      // kill's that ClusterDO did not take at all: the kill is answered all the same (its intent
      // is sent again), and the sandbox must not be listed as running after the answer. A create
      // ClusterDO did not take is abandoned by its caller, which writes the row.
      const rewrite = res.ok ? res.indexed === false : ev.type !== "create";
      if (carried.length && rewrite && slot.state) await this.indexOutbox.send({ kind: "upsert", row: indexRow(slot.state) });
      if (!res.ok) return { ...t.result, acked: false, failure: res.error };
      // A stale-dropped intent (seq 0: ClusterDO already holds this generation or a newer one)
      // was not acknowledged by anyone.
      const acked = awaitAckMs === 0 || (!res.timedOut && res.seqs.every((s) => s > 0));
      let ack: AckItem | undefined;
      for (const a of res.acks) {
        if (a.sandboxId !== id) continue;
        if (a.generation === intent.generation) ack = a;
        await this.apply(id, { type: "ack", generation: a.generation, result: a.result, message: a.message }, 0);
      }
      if (slot.dirty && slot.state) this.save(id, slot);
      const unsavedAck = await this.settled();
      if (unsavedAck) return { ok: false, error: unsavedAck };
      return { ...t.result, acked, ...(ack ? { ack } : {}) };
    } finally {
      slot.busy--;
      this.slots.release(id, slot);
    }
  }

  /** `send` as a span of the caller's trace, whose context rides with the intent to the agent. */
  private async tracedSend(id: string, slot: Slot, intent: Intent, awaitAckMs: number, index: IndexOp[], traceparent: string, redelivery = false): Promise<EnqueueResult> {
    try {
      const attributes = { "sandbox.id": id, "sandbox.generation": intent.generation, "sandbox.desired": intent.desired.state, ...(redelivery ? { "intent.redelivery": true } : {}) };
      return await leafSpan(this.env, "ClusterDO.enqueue", attributes, (tp) => this.send(id, slot, intent, awaitAckMs, index, tp(), traceparent), traceparent);
    } finally {
      const flushing = flushEdgeTraces();
      if (flushing) this.ctx.waitUntil(flushing);
    }
  }

  /**
   * Hands one intent (and index ops to commit with it) to the sandbox's ClusterDO, bounded;
   * settles `undelivered` by generation.
   */
  private async send(id: string, slot: Slot, intent: Intent, awaitAckMs: number, index: IndexOp[] = [], traceparent?: string, origin?: string): Promise<EnqueueResult> {
    const cluster = slot.state!.spec.cluster;
    // The observation repeating an applied ack is dropped when the owner knows all it says; one
    // that brings the address `return-sandbox-ip` waits for is not.
    const knowsAll = !slot.state!.spec.returnSandboxIp || !!slot.state!.address;
    const opts: EnqueueOptions = awaitAckMs > 0 ? (knowsAll ? { awaitAckMs, knownEndpoint: slot.state!.endpoint } : { awaitAckMs }) : {};
    if (index.length) opts.index = index;
    if (traceparent) opts.traceparent = traceparent;
    slot.sending = Math.max(slot.sending, intent.generation);
    let res: EnqueueResult;
    try {
      res = await bounded(this.cluster(cluster).enqueue([intent], opts), ackWait(awaitAckMs) + ENQUEUE_GRACE_MS, this.timers);
    } catch (err) {
      res = { ok: false, error: { code: ErrorCode.internal, message: `cluster ${cluster}: ${String(err)}` } };
    } finally {
      if (slot.sending === intent.generation) slot.sending = 0;
    }
    if (!res.ok) this.markUndelivered(id, slot, intent, origin);
    else if (slot.undelivered && slot.undelivered.intent.generation <= intent.generation) {
      // Only this generation or an older one is settled: a newer intent made meanwhile stays.
      slot.undelivered = null;
      slot.dirty = true;
    }
    return res;
  }

  /** ClusterDO did not take `intent`: it is retried later unless a newer one replaced it. */
  private markUndelivered(id: string, slot: Slot, intent: Intent, traceparent?: string): void {
    if (!slot.state || (slot.undelivered && slot.undelivered.intent.generation > intent.generation)) return;
    slot.undelivered = { intent, retryAt: Date.now() + RETRY_MS, ...(traceparent ? { traceparent } : {}) };
    this.save(id, slot);
  }

  /** The ClusterDO stub for a cluster (one method, so tests can make it fail or stall). */
  private cluster(name: string): Pick<DurableObjectStub<import("../cluster/cluster-do.ts").ClusterDO>, "enqueue" | "logs" | "networkRulesRefusal"> {
    return stubOf(this.env.CLUSTER, name);
  }

  /** The index writer's stub (one method, so tests can make it fail). */
  private indexWriter(): IndexWriter {
    return stubOf(this.env.SANDBOX_INDEX, INDEX_WRITER_NAME);
  }

  private save(id: string, slot: Slot): void {
    this.indexOutbox.keep(id, slot.undelivered?.intent.generation ?? null);
    const timer = dueAt(slot.state);
    const retry = slot.undelivered?.retryAt ?? null;
    const due = timer === null ? retry : retry === null ? timer : Math.min(timer, retry);
    const row = { state: slot.state!, undelivered: slot.undelivered };
    const store = this.store;
    // The machine replaces the spec object when it changes it (never mutates it in place).
    const spec = !this.writtenSpecs.has(row.state.spec);
    this.writtenSpecs.add(row.state.spec);
    // One statement each (the common turn of a group is one of them: no transaction needed).
    if (this.stored.has(id)) this.turn.defer(() => store.update(id, row, due, spec), true);
    else {
      this.turn.defer(() => store.insert(id, row, due), true);
      this.stored.add(id);
    }
    slot.dirty = false;
    this.arm(due);
  }

  /**
   * Waits for the held row writes. A failed batch (the group then reloaded what is stored) is an
   * internal error for the caller, never a throw out of an RPC.
   */
  private async settled(): Promise<Refusal | null> {
    try {
      await this.turn.written;
      return null;
    } catch (err) {
      return { code: ErrorCode.internal, message: `sandbox group write failed: ${String(err)}` };
    }
  }

  /** The sandbox is gone: its row goes (the caller deletes its index row once that is written). */
  private purge(id: string, slot: Slot): true {
    slot.state = null;
    slot.undelivered = null;
    slot.dirty = false;
    const store = this.store;
    this.turn.defer(() => store.remove(id), true);
    this.stored.delete(id);
    return true;
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
   * `boundMs`: the caller's whole bound, for the message, when `ms` is what is left of it. `from`:
   * the generation before the caller's resume (connect, wake), whose failure (the sandbox paused
   * again, machine.ts `resumeFailed`) is answered as such; a resume already under way then is
   * that generation itself, and an older failure is below it.
   */
  private waitRunning(id: string, ms: number, boundMs = ms, also: (s: SandboxState) => boolean = () => true, from?: number): Promise<Result<{ state: SandboxState }>> {
    return this.waitSettled(
      id,
      ms,
      (s) => {
        if (s.phase === "Running" && also(s)) return { ok: true, state: s };
        if (s.phase === "Failed") return { ok: false, error: { code: ErrorCode.createFailed, message: failureMessage(s) } };
        const failed = s.resumeFailure;
        if (from !== undefined && failed && failed.generation >= from && (s.phase === "Pausing" || s.phase === "Paused")) {
          return { ok: false, error: { code: ErrorCode.resumeFailed, message: resumeFailureMessage(id, failed) } };
        }
        return null;
      },
      (s) => ({ code: ErrorCode.placementTimeout, message: `Sandbox "${id}" did not become ready within ${boundMs} ms${retryDetail(s)}` }),
    );
  }

  /**
   * Waits (bounded by `ms`) until `settle` answers for the sandbox as it is now, re-asked on every
   * change; a sandbox gone or being killed answers `gone` (not found), and `timedOut` words the
   * refusal after `ms`.
   */
  private async waitSettled<T extends Result<object>>(
    id: string,
    ms: number,
    settle: (s: SandboxState) => T | null,
    timedOut: (s: SandboxState) => Refusal,
    gone: T | { ok: false; error: Refusal } = notFound(id),
  ): Promise<T | { ok: false; error: Refusal }> {
    const slot = this.slots.get(id);
    const deadline = Date.now() + ms;
    try {
      for (;;) {
        const s = slot.state;
        if (!s || s.phase === "Terminating") return gone;
        const settled = settle(s);
        if (settled) return settled;
        const left = deadline - Date.now();
        if (left <= 0) return { ok: false, error: timedOut(s) };
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
      this.slots.release(id, slot);
    }
  }
}

/** How long ClusterDO may hold an enqueue waiting for acks. */
function ackWait(awaitAckMs: number): number {
  return Math.min(Math.max(awaitAckMs, 0), MAX_ACK_WAIT_MS);
}

/** `p`, or a failure once `ms` pass (the enqueue may still land: intents are idempotent by generation). */
function bounded(p: Promise<EnqueueResult>, ms: number, timers: CoarseTimers): Promise<EnqueueResult> {
  return new Promise((resolve, reject) => {
    const cancel = timers.after(ms, () => resolve({ ok: false, error: { code: ErrorCode.internal, message: `no answer from the cluster within ${ms} ms` } }));
    p.then(resolve, reject).finally(cancel);
  });
}

function failureMessage(s: SandboxState): string {
  const ready = s.conditions.find((c) => c.type === "Ready");
  return `Sandbox failed: ${ready?.reason ?? "unknown"}${ready?.message ? ` (${ready.message})` : ""}`;
}

/** A resume the agent failed, the sandbox paused again (machine.ts `resumeFailed`). */
function resumeFailureMessage(id: string, f: NonNullable<SandboxState["resumeFailure"]>): string {
  return `Sandbox "${id}" failed to resume: ${f.reason}${f.message ? ` (${f.message})` : ""}; it is paused again with its files kept, and a connect resumes it again once the cause is fixed`;
}

/** Why a sandbox is not ready yet when the agent said (e.g. a failure it is retrying), for a timeout's message. */
function retryDetail(s: SandboxState | null): string {
  const ready = s?.conditions.find((c) => c.type === "Ready" && c.status === "False");
  if (!ready || ready.reason === "Pending" || !ready.message) return "";
  return `: ${ready.reason}: ${ready.message}`;
}

function notFound(id: string): { ok: false; error: { code: typeof ErrorCode.sandboxNotFound; message: string } } {
  return { ok: false, error: { code: ErrorCode.sandboxNotFound, message: sandboxNotFoundMessage(id) } };
}
