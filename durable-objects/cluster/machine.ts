// One cluster's session with its agent, as a deterministic state machine: the desired state per
// sandbox, the outbox of intents (sequence numbers, acks, at-least-once redelivery), the
// inventory diff on hello, and where each observation goes.
//
// Memory holds only what routing and the diff need (owner, generation, desired state per
// sandbox; seq → sandbox for the outbox); full intents stay in the shell's SQLite. The state is
// mutated in place and returned, so an enqueue costs O(1) however many sandboxes the cluster runs.
import type { AckItem, DesiredState, Hello, Intent, Observation, Owner, SandboxId } from "../../schema/protocol/index.ts";

export interface DesiredEntry {
  generation: number;
  owner: Owner;
  state: DesiredState;
}

export interface OutboxEntry {
  sandboxId: SandboxId;
  generation: number;
  /** When it was last written to a socket (null: never, or not since the last reconnect). */
  sentAt: number | null;
}

export interface ClusterState {
  nextSeq: number;
  desired: Map<SandboxId, DesiredEntry>;
  /** Unacked intents in seq order (Map keeps insertion order and seqs only grow). */
  outbox: Map<number, OutboxEntry>;
  /** The outbox seq of each sandbox's pending intent (at most one: newer intents supersede). */
  pendingSeq: Map<SandboxId, number>;
  connected: boolean;
}

export type ClusterEvent =
  | { type: "enqueue"; intents: Intent[] }
  | { type: "ack"; items: AckItem[] }
  | { type: "hello"; hello: Hello }
  | { type: "observations"; items: Observation[] }
  | { type: "disconnect" }
  /** Resend intents written before `olderThan` and still unacked (the shell's alarm). */
  | { type: "redeliver"; olderThan: number };

export type ClusterEffect =
  | { type: "save-desired"; intent: Intent }
  | { type: "drop-desired"; sandboxId: SandboxId }
  /** Persist an outbox row for the sandbox's desired intent; `intent` is it when at hand (null: load it). */
  | { type: "queue"; seq: number; sandboxId: SandboxId; generation: number; intent: Intent | null }
  | { type: "unqueue"; seqs: number[] }
  /** Write these outbox rows to the agent, in this order. */
  | { type: "send"; seqs: number[] }
  | { type: "welcome"; resync: { orphans: number; recreated: number; redelivered: number } }
  | { type: "route"; owner: Owner; observations: Observation[] }
  /** Acks to hand to whoever awaits them (superseded intents are acked as `stale`). */
  | { type: "acked"; items: AckItem[] };

export function initialState(nextSeq = 1): ClusterState {
  return { nextSeq, desired: new Map(), outbox: new Map(), pendingSeq: new Map(), connected: false };
}

/**
 * Applies one event; `seqs` answers `enqueue` (0 for an intent dropped as stale or duplicate).
 * Deterministic, no I/O; it mutates `state` in place on purpose (and returns it), so an event
 * costs O(1) however many sandboxes the cluster holds.
 */
export function transition(
  state: ClusterState,
  event: ClusterEvent,
  now: number,
): { state: ClusterState; effects: ClusterEffect[]; seqs?: number[] } {
  const effects: ClusterEffect[] = [];
  switch (event.type) {
    case "enqueue": {
      const seqs = event.intents.map((i) => accept(state, i, effects));
      sendNew(state, seqs, now, effects);
      return { state, effects, seqs };
    }
    case "ack":
      ack(state, event.items, effects);
      return { state, effects };
    case "hello":
      hello(state, event.hello, now, effects);
      return { state, effects };
    case "observations":
      observe(state, event.items, now, effects);
      return { state, effects };
    case "disconnect":
      state.connected = false;
      for (const e of state.outbox.values()) e.sentAt = null;
      return { state, effects };
    case "redeliver": {
      if (!state.connected) return { state, effects };
      const due: number[] = [];
      for (const [seq, e] of state.outbox) {
        if (e.sentAt !== null && e.sentAt < event.olderThan) {
          e.sentAt = now;
          due.push(seq);
        }
      }
      if (due.length) effects.push({ type: "send", seqs: due });
      return { state, effects };
    }
    default:
      return assertNever(event);
  }
}

/** Earliest time an unacked, already-sent intent becomes due for redelivery, or null. */
export function nextRedelivery(state: ClusterState, afterMs: number): number | null {
  for (const e of state.outbox.values()) if (e.sentAt !== null) return e.sentAt + afterMs;
  return null;
}

/** Records an intent as the sandbox's desired state and queues it; returns its seq or 0. */
function accept(state: ClusterState, intent: Intent, effects: ClusterEffect[]): number {
  const current = state.desired.get(intent.sandboxId);
  // Idempotent by (sandboxId, generation): a redelivered or raced intent changes nothing.
  if (current && intent.generation <= current.generation) return 0;
  state.desired.set(intent.sandboxId, { generation: intent.generation, owner: intent.owner, state: intent.desired.state });
  effects.push({ type: "save-desired", intent });
  supersede(state, intent.sandboxId, effects);
  return queue(state, intent.sandboxId, intent.generation, intent, effects);
}

function queue(state: ClusterState, sandboxId: SandboxId, generation: number, intent: Intent | null, effects: ClusterEffect[]): number {
  const seq = state.nextSeq++;
  state.outbox.set(seq, { sandboxId, generation, sentAt: null });
  state.pendingSeq.set(sandboxId, seq);
  effects.push({ type: "queue", seq, sandboxId, generation, intent });
  return seq;
}

/** The agent only needs a sandbox's newest intent, so an older pending one is dropped. */
function supersede(state: ClusterState, sandboxId: SandboxId, effects: ClusterEffect[]): void {
  const old = state.pendingSeq.get(sandboxId);
  if (old === undefined) return;
  const e = state.outbox.get(old);
  state.outbox.delete(old);
  state.pendingSeq.delete(sandboxId);
  effects.push({ type: "unqueue", seqs: [old] });
  if (e) effects.push({ type: "acked", items: [{ seq: old, sandboxId, generation: e.generation, result: "stale", message: "superseded by a newer intent" }] });
}

function sendNew(state: ClusterState, seqs: number[], now: number, effects: ClusterEffect[]): void {
  if (!state.connected) return;
  const fresh = seqs.filter((s) => s > 0);
  for (const s of fresh) state.outbox.get(s)!.sentAt = now;
  if (fresh.length) effects.push({ type: "send", seqs: fresh });
}

function ack(state: ClusterState, items: AckItem[], effects: ClusterEffect[]): void {
  const done: number[] = [];
  const acked: AckItem[] = [];
  const rejected: Observation[] = [];
  for (const item of items) {
    const e = state.outbox.get(item.seq);
    if (!e || e.sandboxId !== item.sandboxId) continue; // a late duplicate ack
    state.outbox.delete(item.seq);
    if (state.pendingSeq.get(item.sandboxId) === item.seq) state.pendingSeq.delete(item.sandboxId);
    done.push(item.seq);
    acked.push(item);
    if (item.result === "rejected") {
      rejected.push({
        sandboxId: item.sandboxId,
        generation: item.generation,
        phase: "Failed",
        ready: false,
        endpoint: null,
        reason: "IntentRejected",
        message: item.message ?? "the agent rejected the intent",
        observedAt: 0,
      });
    }
  }
  if (done.length) effects.push({ type: "unqueue", seqs: done }, { type: "acked", items: acked });
  if (rejected.length) routeAll(state, rejected, effects);
}

/**
 * The agent's full inventory against the desired state: orphans get a delete intent, missing or
 * outdated sandboxes get their desired intent again, gone ones that should be gone are
 * forgotten; then every unacked intent is redelivered in seq order.
 */
function hello(state: ClusterState, h: Hello, now: number, effects: ClusterEffect[]): void {
  state.connected = true;
  let orphans = 0;
  let recreated = 0;
  const redelivered = state.outbox.size;
  const seen = new Set<SandboxId>();
  const known: Observation[] = [];
  for (const obs of h.inventory) {
    seen.add(obs.sandboxId);
    const d = state.desired.get(obs.sandboxId);
    if (!d) {
      if (obs.phase !== "Deleted") {
        orphanDelete(state, obs, now, effects);
        orphans++;
      }
      continue;
    }
    known.push(obs);
    if (obs.generation < d.generation && !state.pendingSeq.has(obs.sandboxId)) {
      queue(state, obs.sandboxId, d.generation, null, effects);
      recreated++;
    }
  }
  const gone: Observation[] = [];
  for (const [id, d] of state.desired) {
    if (seen.has(id)) continue;
    if (d.state === "deleted") {
      gone.push({ sandboxId: id, generation: d.generation, phase: "Deleted", ready: false, endpoint: null, reason: "NotInInventory", observedAt: now });
    } else if (!state.pendingSeq.has(id)) {
      queue(state, id, d.generation, null, effects);
      recreated++;
    }
  }
  routeAll(state, known, effects);
  // `gone` sandboxes were meant to be deleted: tell their owners, then forget them.
  routeAll(state, gone, effects);
  for (const o of gone) forget(state, o.sandboxId, effects);
  effects.push({ type: "welcome", resync: { orphans, recreated, redelivered } });
  const all = [...state.outbox.keys()];
  for (const e of state.outbox.values()) e.sentAt = now;
  if (all.length) effects.push({ type: "send", seqs: all });
}

function observe(state: ClusterState, items: Observation[], now: number, effects: ClusterEffect[]): void {
  const routed: Observation[] = [];
  for (const obs of items) {
    const d = state.desired.get(obs.sandboxId);
    if (!d) {
      // Not ours (anymore): delete it unless it is already gone.
      if (obs.phase !== "Deleted" && obs.phase !== "Terminating") {
        orphanDelete(state, obs, now, effects);
        sendNew(state, [state.pendingSeq.get(obs.sandboxId) ?? 0], now, effects);
      }
      continue;
    }
    routed.push(obs);
  }
  routeAll(state, routed, effects);
  for (const obs of routed) {
    const d = state.desired.get(obs.sandboxId);
    // Gone at (or after) the desired generation: owners re-create by sending a newer intent.
    if (d && obs.phase === "Deleted" && obs.generation >= d.generation) forget(state, obs.sandboxId, effects);
  }
}

function orphanDelete(state: ClusterState, obs: Observation, now: number, effects: ClusterEffect[]): void {
  accept(state, deleteIntent(obs.sandboxId, obs.generation + 1, now), effects);
}

/** Deletes a sandbox nobody owns (an orphan, or a claimed member no group ever took). */
export function deleteIntent(sandboxId: SandboxId, generation: number, now: number): Intent {
  return {
    sandboxId,
    generation,
    owner: { kind: "cluster" },
    desired: { state: "deleted", pauseStrategy: "Freeze" },
    template: null,
    envVars: {},
    envdAccessToken: null,
    allowInternetAccess: false,
    labels: {},
    annotations: {},
    egress: null,
    networkRules: {},
    team: null,
    issuedAt: now,
  };
}

function forget(state: ClusterState, sandboxId: SandboxId, effects: ClusterEffect[]): void {
  state.desired.delete(sandboxId);
  effects.push({ type: "drop-desired", sandboxId });
  const seq = state.pendingSeq.get(sandboxId);
  if (seq !== undefined) {
    state.pendingSeq.delete(sandboxId);
    state.outbox.delete(seq);
    effects.push({ type: "unqueue", seqs: [seq] });
  }
}

/** Groups observations by owner (one route effect per owner, in first-seen order). */
function routeAll(state: ClusterState, items: Observation[], effects: ClusterEffect[]): void {
  const byOwner = new Map<string, { owner: Owner; observations: Observation[] }>();
  for (const obs of items) {
    const d = state.desired.get(obs.sandboxId);
    if (!d || d.owner.kind === "cluster") continue;
    const key = d.owner.kind === "pool" ? `pool:${d.owner.id}` : `sandbox:${obs.sandboxId}`;
    const group = byOwner.get(key) ?? { owner: d.owner, observations: [] };
    group.observations.push(obs);
    byOwner.set(key, group);
  }
  for (const g of byOwner.values()) effects.push({ type: "route", owner: g.owner, observations: g.observations });
}

function assertNever(x: never): never {
  throw new Error(`unhandled ${JSON.stringify(x)}`);
}
