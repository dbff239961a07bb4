// The warm pool of one SandboxSet (team + template), as a deterministic state machine.
//
// The state is mutated in place and returned: copying a 10,000-member inventory on every claim
// would make a claim O(n), and the claim path must cost the same with 100 or 10,000 members
// (edge.claim_cost_ratio_10k_vs_100). The machine does no I/O; the shell persists and performs
// the effects it returns.
import type { ErrorCode, Refusal } from "../../schema/errors.ts";
import type { Endpoint, Observation, SandboxId } from "../../schema/protocol/index.ts";
import { Fifo, type Backlog } from "./fifo.ts";
import type { PoolConfig } from "./rpc.ts";

export type MemberState = "creating" | "available";

/** An unclaimed member. Claimed members leave the pool entirely (their SandboxGroupDO owns them). */
export interface Member {
  id: SandboxId;
  state: MemberState;
  revision: string;
  /** Generation of the pool's last intent for it (1 = create). */
  generation: number;
  createdAt: number;
  endpoint: Endpoint | null;
  /** It has been available once: creating again means it stopped being ready (it may recover). */
  readyOnce?: boolean;
  /** Ready once, since when it is not (in memory only: a reloaded pool counts from its first tick).
   * Its create timeout counts from here: from its creation, every member older than the timeout
   * that an agent restart reported not ready for a moment was replaced at once. */
  unreadySince?: number;
  /** Ticket of its live queue entry (entries with another ticket are dead); -1 = not queued. */
  slot: number;
}

interface Entry {
  m: Member;
  slot: number;
}

export interface PoolState {
  config: (PoolConfig & { cluster: string }) | null;
  /** Members in memory: every creating one, and the available ones read so far (`stored`). */
  members: Map<string, Member>;
  /** Unclaimed members, those still only stored included. */
  total: number;
  /** FIFO queues per revision: the head is the member that has waited longest. */
  available: Map<string, Fifo<Entry>>;
  creating: Map<string, Fifo<Entry>>;
  claimed: number;
  createdOnDemand: number;
  nextSlot: number;
  /** A reloaded pool's stored available members, read as claims reach them (`restore`). */
  stored?: StoredMembers;
  /** Members of the current revision the cluster refused (observed Failed: a terminal error, such
   * as a template it will never run), since the last one of it was ready. While set the pool
   * refills one member at a time, from the second refusal after a backoff (FAILURE_BACKOFF_MS
   * doubling), instead of
   * replacing every refused member at once for as long as the template stays. In memory only: a
   * reloaded pool tries again at once, and backs off from its first refusal. */
  failing?: PoolFailure;
}

export interface PoolFailure {
  revision: string;
  /** The last refusal's reason and message, as the agent observed them. */
  reason: string;
  message: string;
  /** Refusals in a row. */
  failures: number;
  /** No new member of the revision before this (ms). */
  retryAt: number;
}

/** The wait after the second refused member in a row; doubling per refusal up to FAILURE_BACKOFF_MAX_MS. */
export const FAILURE_BACKOFF_MS = 1_000;
export const FAILURE_BACKOFF_MAX_MS = 5 * 60_000;

export type PoolEvent =
  | { type: "configure"; config: PoolConfig }
  /** `fresh`: a new member whatever the stock (a sandbox made from a snapshot starts from its copy). */
  | { type: "claim"; fresh?: boolean }
  | { type: "observe"; observation: Observation }
  | { type: "tick" }
  | { type: "destroy" };

export type PoolEffect =
  /** Persist these new members and send their create intents (owner pool, generation 1). */
  | { type: "create"; members: Member[] }
  /** Drop these members and send delete intents at their (already bumped) generation. */
  | { type: "delete"; members: Member[] }
  /** Drop these members from storage only (claimed, or already gone on the cluster). */
  | { type: "forget"; ids: SandboxId[] }
  /** Persist a member's changed state or endpoint. */
  | { type: "update"; member: Member }
  | { type: "save-config" };

export type ClaimReply =
  | { ok: true; member: Member; state: MemberState | "new" }
  | { ok: false; error: Refusal };

export interface Context {
  now: number;
  newId: () => SandboxId;
  /** A member still creating after this long is replaced (default 5 minutes). */
  createTimeoutMs?: number;
}

export const DEFAULT_CREATE_TIMEOUT_MS = 5 * 60_000;

/** How early an alarm may run against the object's clock and still do what it was set for. */
export const TICK_EARLY_MS = 1_000;

export function initialState(): PoolState {
  return { config: null, members: new Map(), total: 0, available: new Map(), creating: new Map(), claimed: 0, createdOnDemand: 0, nextSlot: 0 };
}

/**
 * Where a reloaded pool reads its stored members on demand (the shell's SQLite: store.ts). A
 * member's `slot` is its stored queue ticket.
 */
export interface MemberSource {
  /** Available members of `revision` with tickets in (after, before), oldest first, at most `limit`. */
  availablePage(revision: string, after: number, before: number, limit: number): Member[];
  /** The stored members among `ids` (any order; at most STORED_PAGE ids a call). */
  members(ids: readonly string[]): Member[];
}

/** What a pool's object reads when it loads: O(creating members + revisions), not O(members). */
export interface StoredInventory {
  /** Every creating member, oldest first (few: a pool's refills in flight). */
  creating: Member[];
  /** How many available members each revision has stored. */
  available: { revision: string; size: number }[];
  /** Above every stored ticket. */
  nextSlot: number;
}

/** A queue's size (stored with the rows, so a load counts without reading them). */
export interface QueueSize {
  state: MemberState;
  revision: string;
  n: number;
}

/** Every non-empty queue's size: stored members not read yet included. */
export function queueSizes(state: PoolState): QueueSize[] {
  const out: QueueSize[] = [];
  for (const [s, queues] of [["available", state.available], ["creating", state.creating]] as const) {
    for (const [revision, q] of queues) if (q.size > 0) out.push({ state: s, revision, n: q.size });
  }
  return out;
}

/** Available members read a page at a time: the first enough for a claim or two, not the whole
 * stock; each next one twice as large up to STORED_PAGE_MAX (a burst of claims, or a bulk read). */
export const STORED_PAGE = 64;
const STORED_PAGE_MAX = 4096;

interface StoredMembers {
  source: MemberSource;
  queues: Map<string, StoredQueue>;
}

/**
 * One revision's stored available members, behind its queue (fifo.ts `Backlog`): tickets in
 * (`cursor`, `horizon`) not read yet; members queued after the load have tickets from `horizon` on.
 */
class StoredQueue implements Backlog<Entry> {
  private cursor = -1;
  private done = false;
  private page = STORED_PAGE;
  /** Tickets not read yet whose members left the queue meanwhile (their rows may not be written yet). */
  private readonly dropped = new Set<number>();

  private readonly state: PoolState;
  private readonly source: MemberSource;
  private readonly revision: string;
  private readonly horizon: number;

  constructor(state: PoolState, source: MemberSource, revision: string, horizon: number) {
    this.state = state;
    this.source = source;
    this.revision = revision;
    this.horizon = horizon;
  }

  next(): Entry[] {
    while (!this.done) {
      const rows = this.source.availablePage(this.revision, this.cursor, this.horizon, this.page);
      if (rows.length < this.page) this.done = true;
      this.page = Math.min(this.page * 2, STORED_PAGE_MAX);
      const entries: Entry[] = [];
      for (const row of rows) {
        this.cursor = row.slot;
        if (this.dropped.delete(row.slot)) continue;
        // Read already by id (an observation of it): the one in memory is the member.
        const m = this.state.members.get(row.id) ?? row;
        if (m === row) this.state.members.set(row.id, row);
        if (m.slot === row.slot) entries.push({ m, slot: m.slot });
      }
      if (entries.length) return entries;
    }
    return [];
  }

  drop(slot: number): void {
    if (this.holds(slot)) this.dropped.add(slot);
  }

  /** Whether a stored member with this ticket is still to be read (and still queued). */
  holds(slot: number): boolean {
    return !this.done && slot > this.cursor && slot < this.horizon && !this.dropped.has(slot);
  }
}

/**
 * Builds a reloaded pool's inventory from what its object read (`stored`): creating members in
 * memory; available ones counted, and read from `source` as claims reach them, in their stored
 * order. Observations of members not read yet find them by id (`findMember`).
 */
export function restore(state: PoolState, stored: StoredInventory, source: MemberSource): void {
  state.nextSlot = Math.max(state.nextSlot, stored.nextSlot);
  const queues = new Map<string, StoredQueue>();
  for (const { revision, size } of stored.available) {
    const backlog = new StoredQueue(state, source, revision, state.nextSlot);
    queues.set(revision, backlog);
    state.available.set(revision, newQueue({ entries: backlog, size }));
    state.total += size;
  }
  state.stored = { source, queues };
  for (const m of stored.creating) {
    state.members.set(m.id, m);
    state.total++;
    queueOf(state.creating, m.revision).push({ m, slot: m.slot });
  }
}

/** The unclaimed member `id`, read from storage if it was not yet. */
export function findMember(state: PoolState, id: string): Member | undefined {
  const m = state.members.get(id);
  if (m || !state.stored) return m;
  readMembers(state, [id]);
  return state.members.get(id);
}

/**
 * Reads the stored members among `ids` not read yet, STORED_PAGE a query: a batch of observations
 * costs O(batch), and far less than one query each. A batch naming most of what is unread (an
 * agent's hello reports every member) reads the whole stock in queue order instead, in pages.
 */
export function readMembers(state: PoolState, ids: readonly string[]): void {
  const stored = state.stored;
  if (!stored) return;
  // Nothing left unread (every stored member in memory): an id not among them is no member.
  const left = state.total - state.members.size;
  if (left <= 0) return;
  const unread = ids.filter((id) => !state.members.has(id));
  if (!unread.length) return;
  if (unread.length * 2 >= left) {
    readAll(state);
    return;
  }
  for (let i = 0; i < unread.length; i += STORED_PAGE) {
    for (const row of stored.source.members(unread.slice(i, i + STORED_PAGE))) {
      // Creating members are all in memory: a row of another one is a member gone meanwhile.
      if (row.state === "available" && stored.queues.get(row.revision)?.holds(row.slot) && !state.members.has(row.id)) state.members.set(row.id, row);
    }
  }
}

/** Reads every stored member still unread (each queue's backlog, in pages). */
function readAll(state: PoolState): void {
  for (const q of state.available.values()) for (const _ of q.values());
}

/** Every unclaimed member (reads all stored ones: O(members), for `destroy`). */
function allMembers(state: PoolState): Member[] {
  readAll(state);
  return [...state.members.values()];
}

/** Applies one event; returns the effects to perform and, for `claim`, the reply. Deterministic, no
 * I/O; it changes `state` in place on purpose (a pool holds thousands of members, and the shell owns
 * the only copy). */
export function transition(
  state: PoolState,
  event: PoolEvent,
  ctx: Context,
): { state: PoolState; effects: PoolEffect[]; claim?: ClaimReply } {
  const effects: PoolEffect[] = [];
  switch (event.type) {
    case "configure":
      state.config = { ...event.config, cluster: event.config.cluster ?? "local" };
      // A new template (revision) may be one the cluster runs: its members are tried at once.
      if (state.failing && state.failing.revision !== state.config.revision) state.failing = undefined;
      effects.push({ type: "save-config" });
      reconcile(state, ctx, effects);
      return { state, effects };
    case "claim": {
      const claim = claimOne(state, ctx, effects, event.fresh === true);
      if (claim.ok) reconcile(state, ctx, effects);
      return { state, effects, claim };
    }
    case "observe":
      if (observe(state, event.observation, ctx.now, effects)) reconcile(state, ctx, effects);
      return { state, effects };
    case "tick": {
      // A tick is the shell's alarm, set for nextCreateDeadline. It may run before the object's
      // clock (which moves only with I/O) reaches that time: judged as of ctx.now it would find
      // nothing due and give back the same deadline, a re-arm for the time of the alarm running,
      // which the runtime drops; the pool would then wait for an unrelated event. So a deadline
      // within TICK_EARLY_MS is judged as of that deadline (as the ClusterDO's image pass is).
      const due = nextCreateDeadline(state, ctx.createTimeoutMs);
      const at = due !== null && due <= ctx.now + TICK_EARLY_MS ? { ...ctx, now: Math.max(ctx.now, due) } : ctx;
      expireCreating(state, at, effects);
      reconcile(state, at, effects);
      return { state, effects };
    }
    case "destroy": {
      const victims = allMembers(state);
      for (const m of victims) unpool(state, m);
      if (victims.length) effects.push({ type: "delete", members: victims.map(bumped) });
      state.config = null;
      effects.push({ type: "save-config" });
      return { state, effects };
    }
    default:
      return assertNever(event);
  }
}

/** Puts a member (restored from storage, or new) into the inventory. */
export function addMember(state: PoolState, m: Member): void {
  state.members.set(m.id, m);
  state.total++;
  enqueue(state, m);
}

export function counts(state: PoolState): { available: number; creating: number; updatedAvailable: number; updated: number } {
  const rev = state.config?.revision;
  const available = sumSizes(state.available);
  const creating = sumSizes(state.creating);
  const updatedAvailable = rev ? (state.available.get(rev)?.size ?? 0) : 0;
  const updated = updatedAvailable + (rev ? (state.creating.get(rev)?.size ?? 0) : 0);
  return { available, creating, updatedAvailable, updated };
}

/** When the oldest creating member times out, or a refused revision's backoff ends (the shell's
 * alarm); null with neither. */
export function nextCreateDeadline(state: PoolState, timeoutMs = DEFAULT_CREATE_TIMEOUT_MS): number | null {
  let oldest: number | null = null;
  for (const q of state.creating.values()) {
    const e = q.peek();
    if (e && (oldest === null || creatingSince(e.m) < oldest)) oldest = creatingSince(e.m);
  }
  const timeout = oldest === null ? null : oldest + timeoutMs;
  const f = state.failing;
  // While a member of the refused revision is creating, scaleUp makes no other: its timeout (or
  // its outcome) is what comes next, not the retry time, which has passed by then.
  const rev = state.config?.revision;
  const trying = rev !== undefined && (state.creating.get(rev)?.size ?? 0) > 0;
  const retry = f && f.revision === rev && !trying && state.total < state.config!.spec.replicas ? f.retryAt : null;
  return timeout === null ? retry : retry === null ? timeout : Math.min(timeout, retry);
}

/** When a creating member's timeout started: its creation, or (ready once) when it stopped being
 * ready. A reloaded pool does not know that: such a member counts from its first tick. */
function creatingSince(m: Member): number {
  return m.readyOnce ? (m.unreadySince ?? m.createdAt) : m.createdAt;
}

/**
 * `maxUnavailable` against `replicas`: a percentage rounds up (OpenKruise's SandboxSet,
 * openkruise-agents.md §1.2: `GetScaledValueFromIntOrPercent(…, roundUp=true)`), so any non-zero
 * percentage of a non-empty pool allows at least 1; `0` and `"0%"` allow none.
 */
export function scaled(value: number | string, total: number): number {
  if (typeof value === "number") return value;
  return Math.ceil((Number.parseInt(value, 10) * total) / 100);
}

/** The rolling update's progress, as SandboxSet `.status` shows it. */
export interface Rollout {
  updateRevision: string | null;
  /** The revision of the oldest unclaimed member not yet replaced; `updateRevision` once done. */
  currentRevision: string | null;
  updatedReplicas: number;
  updatedAvailableReplicas: number;
  /** `updateStrategy.maxUnavailable` resolved against `replicas`. */
  maxUnavailable: number;
}

/** O(revisions): reads queue sizes and heads only (status, not the claim path). */
export function rollout(state: PoolState): Rollout {
  const cfg = state.config;
  if (!cfg) return { updateRevision: null, currentRevision: null, updatedReplicas: 0, updatedAvailableReplicas: 0, maxUnavailable: 0 };
  const { updated, updatedAvailable } = counts(state);
  let oldest: Member | undefined;
  for (const queues of [state.available, state.creating]) {
    for (const [rev, q] of queues) {
      const head = rev === cfg.revision ? undefined : q.peek()?.m;
      if (head && (!oldest || head.createdAt < oldest.createdAt)) oldest = head;
    }
  }
  return {
    updateRevision: cfg.revision,
    currentRevision: oldest?.revision ?? cfg.revision,
    updatedReplicas: updated,
    updatedAvailableReplicas: updatedAvailable,
    maxUnavailable: scaled(cfg.spec.updateStrategy.maxUnavailable, cfg.spec.replicas),
  };
}

function claimOne(state: PoolState, ctx: Context, effects: PoolEffect[], mint: boolean): ClaimReply {
  if (!state.config) return refuse("template_not_found", "this template has no pool configured");
  const rev = state.config.revision;
  // The current revision first, even still creating: once one exists, an old member is never
  // handed out (it is only there until the rolling update replaces it).
  const m = mint ? undefined : takeFrom(state.available, rev) ?? takeFrom(state.creating, rev) ?? popOther(state.available, rev) ?? popOther(state.creating, rev);
  if (m) {
    const from = m.state;
    unpool(state, m);
    state.claimed++;
    effects.push({ type: "forget", ids: [m.id] });
    return { ok: true, member: m, state: from };
  }
  state.createdOnDemand++;
  const fresh: Member = { id: ctx.newId(), state: "creating", revision: rev, generation: 0, createdAt: ctx.now, endpoint: null, slot: -1 };
  return { ok: true, member: fresh, state: "new" };
}

function takeFrom(queues: Map<string, Fifo<Entry>>, rev: string): Member | undefined {
  const q = queues.get(rev);
  return q ? take(q) : undefined;
}

/** The head of the first non-empty queue of another revision (only when the current has none). */
function popOther(queues: Map<string, Fifo<Entry>>, rev: string): Member | undefined {
  for (const [r, q] of queues) {
    if (r === rev) continue;
    const m = take(q);
    if (m) return m;
  }
  return undefined;
}

/** Returns whether the inventory changed (so the pool may need to scale). */
function observe(state: PoolState, obs: Observation, now: number, effects: PoolEffect[]): boolean {
  const m = findMember(state, obs.sandboxId);
  if (!m || obs.generation < m.generation) return false;
  switch (obs.phase) {
    case "Running": {
      const want: MemberState = obs.ready ? "available" : "creating";
      const endpointChanged = JSON.stringify(obs.endpoint) !== JSON.stringify(m.endpoint);
      if (want === m.state && !endpointChanged) return false;
      m.endpoint = obs.endpoint;
      if (want !== m.state) {
        dequeue(state, m);
        m.state = want;
        m.unreadySince = want === "creating" ? now : undefined;
        enqueue(state, m);
      }
      if (want === "available") {
        m.readyOnce = true;
        if (state.failing?.revision === m.revision) state.failing = undefined;
      }
      effects.push({ type: "update", member: m });
      return true;
    }
    case "Failed": {
      // Judged against the member's own revision: an old one's refusal says nothing of the template now.
      if (m.revision === state.config?.revision) {
        const failures = (state.failing?.revision === m.revision ? state.failing.failures : 0) + 1;
        // The first refusal is replaced at once (one member may fail for its own reasons).
        const wait = failures < 2 ? 0 : Math.min(FAILURE_BACKOFF_MAX_MS, FAILURE_BACKOFF_MS * 2 ** Math.min(failures - 2, 20));
        state.failing = { revision: m.revision, reason: obs.reason ?? "Failed", message: obs.message ?? "", failures, retryAt: now + wait };
      }
      unpool(state, m);
      effects.push({ type: "delete", members: [bumped(m)] });
      return true;
    }
    case "Deleted":
      unpool(state, m);
      effects.push({ type: "forget", ids: [m.id] });
      return true;
    case "Pending":
    case "Pausing":
    case "Paused":
    case "Resuming":
    case "Terminating":
      // A warm member is never paused by the pool; a pending one is still creating.
      return false;
    default:
      return assertNever(obs.phase);
  }
}

function expireCreating(state: PoolState, ctx: Context, effects: PoolEffect[]): void {
  const limit = ctx.now - (ctx.createTimeoutMs ?? DEFAULT_CREATE_TIMEOUT_MS);
  const expired: Member[] = [];
  for (const q of state.creating.values()) {
    for (const e of q.values()) if (e.m.readyOnce && e.m.unreadySince === undefined) e.m.unreadySince = ctx.now;
    // Queues are in the order members entered them, so the scan stops at the first still in time.
    for (let e = q.peek(); e && creatingSince(e.m) <= limit; e = q.peek()) {
      const m = take(q) as Member;
      unpool(state, m);
      expired.push(bumped(m));
    }
  }
  if (expired.length) effects.push({ type: "delete", members: expired });
}

/**
 * Converges the unclaimed count on `replicas`, then rolls old-revision members
 * (openkruise-agents.md §2.2 steps 3 and 5).
 */
function reconcile(state: PoolState, ctx: Context, effects: PoolEffect[]): void {
  const cfg = state.config;
  if (!cfg) return;
  const { replicas } = cfg.spec;
  const total = state.total;
  if (total > replicas) {
    const victims = scaleDownVictims(state, total - replicas);
    for (const m of victims) unpool(state, m);
    effects.push({ type: "delete", members: victims.map(bumped) });
    return;
  }
  if (total === replicas) rollOldRevision(state, effects);
  scaleUp(state, ctx, effects);
}

function scaleUp(state: PoolState, ctx: Context, effects: PoolEffect[]): void {
  const cfg = state.config;
  if (!cfg) return;
  const delta = cfg.spec.replicas - state.total;
  if (delta <= 0) return;
  const cap = cfg.spec.scaleStrategy.maxUnavailable;
  // Kruise: delta ≤ scaled(maxUnavailable) − (replicas − available), i.e. minus those creating.
  const budget = cap === undefined || cap === null ? delta : scaled(cap, cfg.spec.replicas) - counts(state).creating;
  let n = Math.min(delta, budget);
  // A revision the cluster refuses: one member at a time, once its backoff is over.
  const f = state.failing;
  if (f && f.revision === cfg.revision) n = ctx.now < f.retryAt ? 0 : Math.min(n, 1 - (state.creating.get(cfg.revision)?.size ?? 0));
  if (n <= 0) return;
  const created: Member[] = [];
  for (let i = 0; i < n; i++) {
    const m: Member = { id: ctx.newId(), state: "creating", revision: cfg.revision, generation: 1, createdAt: ctx.now, endpoint: null, slot: -1 };
    addMember(state, m);
    created.push(m);
  }
  effects.push({ type: "create", members: created });
}

/**
 * Deletes every old-revision member still creating that was never ready (its replacement costs
 * no availability), then old ones that were ready (first those that stopped being ready, which
 * may recover and so wait for the budget, then available ones, oldest first) while fewer than
 * `maxUnavailable` of `replicas` are unavailable. Unavailable = not ready, whatever the revision:
 * members creating (old ones included), and those a failure or a timeout took out (their
 * replacements are creating). Runs only when the pool is full, so that is `replicas − available`.
 */
function rollOldRevision(state: PoolState, effects: PoolEffect[]): void {
  const cfg = state.config;
  if (!cfg) return;
  const victims: Member[] = [];
  const unready: Member[] = [];
  for (const [rev, q] of state.creating) {
    if (rev === cfg.revision) continue;
    for (const { m } of q.values()) (m.readyOnce ? unready : victims).push(m);
  }
  for (const m of victims) unpool(state, m);
  const available = sumSizes(state.available);
  let budget = scaled(cfg.spec.updateStrategy.maxUnavailable, cfg.spec.replicas) - (cfg.spec.replicas - available);
  // Those that stopped being ready first: replacing them costs no more availability.
  for (const m of unready) {
    if (budget <= 0) break;
    victims.push(m);
    budget--;
  }
  for (const [rev, q] of state.available) {
    if (rev === cfg.revision) continue;
    for (; budget > 0; budget--) {
      const m = take(q);
      if (!m) break;
      victims.push(m);
    }
  }
  // Drained queues of old revisions go, so a claim's fallback scan stays short.
  for (const queues of [state.available, state.creating]) {
    for (const [rev, q] of queues) if (rev !== cfg.revision && q.size === 0) queues.delete(rev);
  }
  if (!victims.length) return;
  for (const m of victims) unpool(state, m);
  effects.push({ type: "delete", members: victims.map(bumped) });
}

/** Old revision first (creating, then available), then current creating, then current available; oldest first. */
function scaleDownVictims(state: PoolState, n: number): Member[] {
  const rev = state.config?.revision;
  const order: Fifo<Entry>[] = [];
  for (const [r, q] of state.creating) if (r !== rev) order.push(q);
  for (const [r, q] of state.available) if (r !== rev) order.push(q);
  for (const queues of [state.creating, state.available]) {
    const q = rev ? queues.get(rev) : undefined;
    if (q) order.push(q);
  }
  const victims: Member[] = [];
  for (const q of order) {
    while (victims.length < n) {
      const m = take(q);
      if (!m) break;
      victims.push(m);
    }
  }
  return victims;
}

function enqueue(state: PoolState, m: Member): void {
  const q = queueOf(m.state === "available" ? state.available : state.creating, m.revision);
  m.slot = state.nextSlot++;
  q.push({ m, slot: m.slot });
}

function queueOf(queues: Map<string, Fifo<Entry>>, revision: string): Fifo<Entry> {
  let q = queues.get(revision);
  if (!q) {
    q = newQueue();
    queues.set(revision, q);
  }
  return q;
}

/** An entry is live while its member still holds its ticket. */
function newQueue(backlog?: { entries: Backlog<Entry>; size: number }): Fifo<Entry> {
  return new Fifo<Entry>((e) => e.slot === e.m.slot, backlog);
}

/** Pops the oldest live member of a queue and marks it unqueued. */
function take(q: Fifo<Entry>): Member | undefined {
  const e = q.shift();
  if (!e) return undefined;
  e.m.slot = -1;
  return e.m;
}

/** Takes a member out of its queue, if it is still queued (its entry dies lazily). */
function dequeue(state: PoolState, m: Member): void {
  if (m.slot < 0) return;
  const slot = m.slot;
  m.slot = -1;
  (m.state === "available" ? state.available : state.creating).get(m.revision)?.remove(slot);
}

/** Removes a member from the pool, queued or already taken out of its queue. */
function unpool(state: PoolState, m: Member): void {
  if (state.members.get(m.id) !== m) return;
  state.members.delete(m.id);
  state.total--;
  dequeue(state, m);
}

function bumped(m: Member): Member {
  return { ...m, generation: m.generation + 1 };
}

function sumSizes(queues: Map<string, Fifo<Entry>>): number {
  let n = 0;
  for (const q of queues.values()) n += q.size;
  return n;
}

function refuse(code: ErrorCode, message: string): ClaimReply {
  return { ok: false, error: { code, message } };
}

function assertNever(x: never): never {
  throw new Error(`unhandled ${JSON.stringify(x)}`);
}
