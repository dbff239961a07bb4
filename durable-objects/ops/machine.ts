// One SandboxUpdateOps run (OpenKruise §1.6, §2.4) as a pure machine: `transition(state, event,
// now)` returns the next state; the shell (update-ops-do.ts) asks the sandboxes' groups to start
// or report every member `inFlight()` names, and feeds their answers back as `progress`.
//
// A run selects once (`select`: claimed sandboxes of the team whose labels match the selector,
// whose phase is in `stateFilter` and whose template has a newer revision), then upgrades them in
// id order, at most `maxUnavailable` (a number, or a percentage of the members rounded up)
// unavailable at a time, members being upgraded and failed ones both counted. `paused` starts
// nothing new. A member whose upgrade fails fails alone; once failures use up the whole budget
// with nothing left in flight the run is Failed (so are runs that end with failures), and
// `resume` retries the failed members with their next attempt.
import { scaled } from "../pool/machine.ts";
import type { UpdateOpsSpec } from "../../schema/api/update-ops.ts";
import { selectorMatches } from "../../schema/api/update-ops.ts";
import { heldMessage, type OpsCandidate, type UpgradeOutcome } from "../sandbox/upgrade.ts";

export type OpsPhase = "Pending" | "Updating" | "Completed" | "Failed";
/** `Skipped`: another run holds the sandbox (its upgrade of it under way, not failed: heldBy); left to it. */
export type MemberStatus = "Pending" | "Updating" | "Succeeded" | "Failed" | "Skipped";

/** One sandbox's status line. */
export interface OpsMember {
  id: string;
  templateId: string;
  /** Revision it ran when selected, and the one it is upgraded to. */
  from: string;
  to: string;
  /** Paused when selected: upgraded paused, it stays paused. */
  paused: boolean;
  status: MemberStatus;
  /** Upgrades asked so far (the group applies each attempt once). */
  attempt: number;
  message?: string;
  updatedAt: number;
  /** The upgrade hooks that ran (and passed) for `attempt`: each runs once per attempt. */
  hooks?: { attempt: number; pre?: true; post?: true };
  /** CheckpointRestore: the snapshot taken of it for `attempt`, before its recreate. */
  checkpoint?: { attempt: number; snapshotId: string };
}

export interface OpsCondition {
  type: "Progressing";
  status: "True" | "False";
  reason: string;
  message?: string;
  lastTransitionTime: number;
}

/** Kubernetes-style events, newest last (bounded). */
export interface OpsEvent {
  at: number;
  type: "Normal" | "Warning";
  reason: string;
  sandboxId?: string;
  message: string;
}

export interface OpsState {
  name: string;
  teamId: string;
  spec: UpdateOpsSpec;
  phase: OpsPhase;
  members: OpsMember[];
  conditions: OpsCondition[];
  events: OpsEvent[];
  /** Events ever added (the list keeps the last MAX_EVENTS): a high-water mark, so a copy of the
   * run tells which events are new without comparing them (newEvents). Absent on a run stored
   * before it existed: counted from the list's length. */
  eventCount?: number;
  createdAt: number;
  updatedAt: number;
  /** CheckpointRestore: snapshots the run no longer needs (their member restored, gone, or
   * checkpointed again), which the shell deletes and reports `freed`. A snapshot otherwise lives
   * only while its member is Updating or Failed (kept as the failed member's recovery point until
   * resume takes the next one or the run is deleted), so at most one per member, and only for
   * members counted against maxUnavailable. */
  freeing?: FreeingSnapshot[];
}

/** A snapshot to delete; a delete that failed is tried again at `nextAt` (backing off), and after
 * MAX_FREE_ATTEMPTS given up on (left to the team, with a Warning event). */
export interface FreeingSnapshot {
  snapshotId: string;
  sandboxId: string;
  attempts?: number;
  nextAt?: number;
}

export const MAX_FREE_ATTEMPTS = 6;
const FREE_BACKOFF_MS = 1_000;

export type OpsInput =
  /** The team's sandboxes, each template's current revision (null: the template is gone), and
   * clusters whose driver cannot recreate a sandbox (why), whose sandboxes are left alone. */
  | { type: "select"; candidates: OpsCandidate[]; targets: Record<string, string | null>; unsupported?: Record<string, string> }
  | { type: "progress"; outcomes: Record<string, UpgradeOutcome> }
  | { type: "change"; paused?: boolean; maxUnavailable?: number | string }
  /** Retry the failed members (a Failed run continues). */
  | { type: "resume" }
  /** A member's preUpgrade or postUpgrade hook ran for `attempt`: passed (or `Ignore`d), it is
   * not run again for that attempt; failed, the member fails (the run goes on). */
  | { type: "hooked"; id: string; attempt: number; stage: "pre" | "post"; proceed: boolean; reason: string; message: string; none?: true }
  /** CheckpointRestore: the member's snapshot for `attempt` was taken (`snapshotId`), or not
   * (`error`: the member fails, the run goes on). */
  | { type: "checkpointed"; id: string; attempt: number; snapshotId?: string; error?: string }
  /** Those snapshots of `freeing` were deleted (or were gone already). */
  | { type: "freed"; snapshotIds: string[] }
  /** Deleting that snapshot of `freeing` failed (`error`): tried again later, or given up on. */
  | { type: "freeFailed"; snapshotId: string; error: string };

export const MAX_EVENTS = 200;

export function initialState(name: string, teamId: string, spec: UpdateOpsSpec, now: number): OpsState {
  const s: OpsState = { name, teamId, spec, phase: "Pending", members: [], conditions: [], events: [], createdAt: now, updatedAt: now };
  setProgressing(s, "True", "Selecting", "selecting sandboxes", now);
  return s;
}

/** Deterministic; `current` is not mutated. */
export function transition(current: OpsState, ev: OpsInput, now: number): OpsState {
  const s: OpsState = { ...current, members: current.members.map((m) => ({ ...m })), events: [...current.events], conditions: [...current.conditions], updatedAt: now };
  switch (ev.type) {
    case "select":
      if (s.phase === "Pending") select(s, ev.candidates, ev.targets, ev.unsupported ?? {}, now);
      break;
    case "progress":
      progress(s, ev.outcomes, now);
      break;
    case "hooked":
      hooked(s, ev, now);
      break;
    case "checkpointed":
      checkpointed(s, ev, now);
      break;
    case "freed":
      for (const f of (s.freeing ?? []).filter((x) => ev.snapshotIds.includes(x.snapshotId))) event(s, now, "Normal", "CheckpointDeleted", `checkpoint snapshot ${f.snapshotId} deleted: the run no longer needs it`, f.sandboxId);
      s.freeing = (s.freeing ?? []).filter((x) => !ev.snapshotIds.includes(x.snapshotId));
      break;
    case "freeFailed":
      freeFailed(s, ev, now);
      break;
    case "change":
      s.spec = {
        ...s.spec,
        ...(ev.paused === undefined ? {} : { paused: ev.paused }),
        updateStrategy: { ...s.spec.updateStrategy, ...(ev.maxUnavailable === undefined ? {} : { maxUnavailable: ev.maxUnavailable }) },
      };
      break;
    case "resume":
      for (const m of s.members.filter((x) => x.status === "Failed")) {
        Object.assign(m, { status: "Pending", message: undefined, updatedAt: now });
        event(s, now, "Normal", "UpgradeRetried", "retrying the failed upgrade", m.id);
      }
      if (s.phase === "Failed") s.phase = "Updating";
      break;
  }
  if (s.phase === "Updating") schedule(s, now);
  return s;
}

/** The events `after` added since `before` (none before: all of them), by the runs' event
 * counts, so a deep copy (a run loaded back from storage) or equal events at the same instant
 * are told apart right. At most the last MAX_EVENTS (those still on the list). */
export function newEvents(before: OpsState | null | undefined, after: OpsState): OpsEvent[] {
  const added = eventCount(after) - (before ? eventCount(before) : 0);
  return added > 0 ? after.events.slice(-added) : [];
}

const eventCount = (s: OpsState) => s.eventCount ?? s.events.length;

/** Members whose group must be asked: started or polled (idempotent either way). */
export function inFlight(s: OpsState): OpsMember[] {
  return s.members.filter((m) => m.status === "Updating");
}

/** The `.status` counts of the CRD (and the admin API). */
export function counts(s: OpsState): { replicas: number; updatedReplicas: number; failedReplicas: number; updatingReplicas: number } {
  const n = (st: MemberStatus) => s.members.filter((m) => m.status === st).length;
  return { replicas: s.members.length, updatedReplicas: n("Succeeded"), failedReplicas: n("Failed"), updatingReplicas: n("Updating") };
}

/** Whether the shell has work left (its alarm). */
export function active(s: OpsState): boolean {
  return s.phase === "Pending" || (s.phase === "Updating" && inFlight(s).length > 0) || (s.freeing?.length ?? 0) > 0;
}

/** The snapshots of `freeing` whose delete is due now (not backing off after a failure). */
export function freeDue(s: OpsState, now: number): FreeingSnapshot[] {
  return (s.freeing ?? []).filter((f) => (f.nextAt ?? 0) <= now);
}

/** When the shell should next wake for `freeing` alone (none: nothing to free). */
export function nextFreeAt(s: OpsState): number | undefined {
  const at = (s.freeing ?? []).map((f) => f.nextAt ?? 0);
  return at.length ? Math.min(...at) : undefined;
}

function freeFailed(s: OpsState, ev: Extract<OpsInput, { type: "freeFailed" }>, now: number): void {
  const f = (s.freeing ?? []).find((x) => x.snapshotId === ev.snapshotId);
  if (!f) return;
  const attempts = (f.attempts ?? 0) + 1;
  if (attempts >= MAX_FREE_ATTEMPTS) {
    s.freeing = (s.freeing ?? []).filter((x) => x !== f);
    event(s, now, "Warning", "CheckpointLeft", `checkpoint snapshot ${f.snapshotId} could not be deleted after ${attempts} attempts (${ev.error}); it is left to the team to delete`, f.sandboxId);
    return;
  }
  s.freeing = (s.freeing ?? []).map((x) => (x === f ? { ...f, attempts, nextAt: now + FREE_BACKOFF_MS * 2 ** (attempts - 1) } : x));
}

/** Every snapshot the run still holds. */
export function heldSnapshots(s: OpsState): string[] {
  return [...new Set([...(s.freeing ?? []).map((f) => f.snapshotId), ...s.members.flatMap((m) => (m.checkpoint ? [m.checkpoint.snapshotId] : []))])];
}

/** The snapshots deleted with the run: all it holds but those of members whose upgrade (sent
 * naming the snapshot to restore from) is under way, which would fail without it. */
export function snapshotsFreedOnDelete(s: OpsState): string[] {
  const restoring = new Set(restoringMembers(s).map((m) => m.checkpoint!.snapshotId));
  return heldSnapshots(s).filter((id) => !restoring.has(id));
}

/** Members whose upgrade under way restores from their checkpoint (the upgrade names it). */
export function restoringMembers(s: OpsState): OpsMember[] {
  return s.members.filter((m) => m.status === "Updating" && m.checkpoint?.attempt === m.attempt);
}

function select(s: OpsState, candidates: OpsCandidate[], targets: Record<string, string | null>, unsupported: Record<string, string>, now: number): void {
  const states = new Set<string>(s.spec.stateFilter.states);
  const missing = new Set<string>();
  const left = new Map<string, number>();
  for (const c of [...candidates].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0))) {
    if (!states.has(c.phase) || !selectorMatches(s.spec.selector, c.labels)) continue;
    if (unsupported[c.cluster]) {
      left.set(c.cluster, (left.get(c.cluster) ?? 0) + 1);
      continue;
    }
    const to = targets[c.templateId];
    if (!to) {
      missing.add(c.templateId);
      continue;
    }
    if (to === c.revision) continue; // already at it (OpenKruise: NoNeedUpdate)
    s.members.push({ id: c.id, templateId: c.templateId, from: c.revision, to, paused: c.phase === "Paused", status: "Pending", attempt: 0, updatedAt: now });
    // Another run's upgrade of it under way: left to that run before any hook or checkpoint of
    // ours (one that starts later is answered `held` by the sandbox instead).
    if (c.upgradingBy && c.upgradingBy !== s.name) skip(s, s.members.at(-1)!, heldMessage(c.upgradingBy), now);
  }
  for (const t of missing) event(s, now, "Warning", "TemplateNotFound", `template "${t}" no longer exists: its sandboxes are not upgraded`);
  for (const [cluster, n] of left) event(s, now, "Warning", "RecreateNotSupported", `${n} selected sandboxes on cluster "${cluster}" are left alone: ${unsupported[cluster]}`);
  s.phase = "Updating";
  event(s, now, "Normal", "Selected", `${s.members.length} sandboxes to upgrade`);
}

function progress(s: OpsState, outcomes: Record<string, UpgradeOutcome>, now: number): void {
  const gone = new Set<string>();
  for (const m of s.members) {
    const o = outcomes[m.id];
    if (!o || m.status !== "Updating") continue;
    if (o.status === "gone") {
      gone.add(m.id);
      free(s, m);
      event(s, now, "Normal", "SandboxGone", "the sandbox was deleted; it is no longer part of the run", m.id);
    } else if (o.status === "succeeded") {
      const restored = m.checkpoint?.attempt === m.attempt ? m.checkpoint.snapshotId : undefined;
      const onResume = restored && o.restorePending;
      // A restore an earlier run's CheckpointRestore still owes is carried forward by this upgrade
      // (the sandbox's group keeps it), so the line says its resume still restores that snapshot.
      const carried = !restored && o.restorePending ? `the pending restore of checkpoint snapshot ${o.restoreFs ?? "(unknown)"} is carried forward: its next start restores it` : undefined;
      Object.assign(m, { status: "Succeeded", message: restored ? restoredMessage(restored, Boolean(onResume)) : carried, updatedAt: now });
      // Restored only when it resumes: the shell keeps the snapshot until then (beyond the run).
      if (onResume) {
        delete m.checkpoint;
        event(s, now, "Normal", "CheckpointKept", `checkpoint snapshot ${restored} kept until the sandbox resumes: its next pod restores it, then it is deleted`, m.id);
      } else free(s, m);
      event(s, now, "Normal", "UpgradeSucceeded", `upgraded to revision ${m.to}${m.paused ? " (stays paused)" : ""}`, m.id);
    } else if (o.status === "held") {
      // Not re-sent: two runs with different targets would take turns (each re-sending its own).
      free(s, m);
      skip(s, m, o.message ?? heldMessage("another run"), now);
    } else if (o.status === "failed") {
      const kept = m.checkpoint ? `; checkpoint snapshot ${m.checkpoint.snapshotId} kept (resume replaces it, deleting the run deletes it)` : "";
      Object.assign(m, { status: "Failed", message: `${o.message ?? "the upgrade failed"}${kept}`, updatedAt: now });
      event(s, now, "Warning", "UpgradeFailed", m.message!, m.id);
    } else if (o.message !== m.message) {
      m.message = o.message;
      m.updatedAt = now;
    }
  }
  if (gone.size) s.members = s.members.filter((m) => !gone.has(m.id));
}

function hooked(s: OpsState, ev: Extract<OpsInput, { type: "hooked" }>, now: number): void {
  const m = s.members.find((x) => x.id === ev.id);
  if (!m || m.status !== "Updating" || m.attempt !== ev.attempt) return;
  const name = ev.stage === "pre" ? "preUpgrade" : "postUpgrade";
  // A member without that hook only notes it as done (no event).
  if (!ev.none) event(s, now, ev.proceed ? "Normal" : "Warning", ev.stage === "pre" ? "PreUpgradeHook" : "PostUpgradeHook", `${name} ${ev.reason}: ${ev.message}`, m.id);
  if (!ev.proceed) return progress(s, { [m.id]: { status: "failed", message: `${name} hook failed: ${ev.message}` } }, now);
  const done = m.hooks?.attempt === m.attempt ? m.hooks : { attempt: m.attempt };
  m.hooks = { ...done, [ev.stage]: true };
}

/** What a CheckpointRestore member's line says once upgraded: it was recreated on the
 * checkpoint's files (local: its layer copied back from the snapshot; Kubernetes: the new pod
 * names the checkpoint for the cluster's checkpoint engine), and the snapshot is then deleted. Its
 * memory is not restored (no process checkpointing here: CRIU does not run on the local driver's
 * kernels, and a pod's new container starts its processes afresh). */
export function restoredMessage(snapshotId: string, onResume = false): string {
  return `files restored from checkpoint snapshot ${snapshotId}${onResume ? " when it resumes" : ""} (deleted once restored); memory not restored (processes start afresh)`;
}

function skip(s: OpsState, m: OpsMember, message: string, now: number): void {
  Object.assign(m, { status: "Skipped", message, updatedAt: now });
  event(s, now, "Warning", "SandboxHeld", message, m.id);
}

/** The member's snapshot is no longer needed: it goes to `freeing`. */
function free(s: OpsState, m: OpsMember): void {
  if (!m.checkpoint) return;
  s.freeing = [...(s.freeing ?? []), { snapshotId: m.checkpoint.snapshotId, sandboxId: m.id }];
  delete m.checkpoint;
}


function checkpointed(s: OpsState, ev: Extract<OpsInput, { type: "checkpointed" }>, now: number): void {
  const m = s.members.find((x) => x.id === ev.id);
  if (!m || m.status !== "Updating" || m.attempt !== ev.attempt || m.checkpoint?.attempt === m.attempt) return;
  // The last attempt's snapshot (a resumed failed member's) is replaced, and freed.
  free(s, m);
  if (!ev.snapshotId) return progress(s, { [m.id]: { status: "failed", message: `checkpoint failed: ${ev.error ?? "the snapshot was not taken"}` } }, now);
  m.checkpoint = { attempt: m.attempt, snapshotId: ev.snapshotId };
  event(s, now, "Normal", "CheckpointTaken", `snapshot ${ev.snapshotId} of the sandbox's files (no memory) before its recreate`, m.id);
}

/** Whether a CheckpointRestore member still needs its snapshot for its current attempt. */
export function checkpointDue(s: OpsState, m: OpsMember): boolean {
  return s.spec.updateStrategy.type === "CheckpointRestore" && m.checkpoint?.attempt !== m.attempt;
}

/** Whether the member's hook `stage` is still to run for its current attempt. */
export function hookDue(m: OpsMember, stage: "pre" | "post"): boolean {
  return !(m.hooks?.attempt === m.attempt && m.hooks[stage]);
}

/** Starts what the budget allows and settles the phase. */
function schedule(s: OpsState, now: number): void {
  const c = counts(s);
  const pending = s.members.filter((m) => m.status === "Pending");
  const budget = scaled(s.spec.updateStrategy.maxUnavailable, c.replicas) - c.updatingReplicas - c.failedReplicas;
  if (!s.spec.paused) {
    for (const m of pending.slice(0, Math.max(0, budget))) {
      Object.assign(m, { status: "Updating", attempt: m.attempt + 1, message: undefined, updatedAt: now });
      event(s, now, "Normal", "UpgradeStarted", `upgrading from revision ${m.from} to ${m.to}${m.paused ? " (paused)" : ""}`, m.id);
    }
  }
  const after = counts(s);
  const left = s.members.filter((m) => m.status === "Pending").length;
  if (after.updatingReplicas === 0 && left === 0) {
    s.phase = after.failedReplicas > 0 ? "Failed" : "Completed";
    const skipped = s.members.filter((m) => m.status === "Skipped").length;
    const msg = `${after.updatedReplicas} upgraded, ${after.failedReplicas} failed${skipped ? `, ${skipped} skipped (held by another run)` : ""}`;
    setProgressing(s, "False", after.failedReplicas > 0 ? "SandboxesFailed" : "Completed", msg, now);
    event(s, now, after.failedReplicas > 0 ? "Warning" : "Normal", s.phase, msg);
  } else if (after.updatingReplicas === 0 && after.failedReplicas > 0 && budget <= 0) {
    s.phase = "Failed";
    const msg = `${after.failedReplicas} failed upgrades use up maxUnavailable; ${left} not started (resume retries the failed ones)`;
    setProgressing(s, "False", "TooManyFailed", msg, now);
    event(s, now, "Warning", "TooManyFailed", msg);
  } else if (s.spec.paused) {
    setProgressing(s, "True", "Paused", `paused: ${after.updatingReplicas} upgrading, ${left} waiting`, now);
  } else {
    const how = s.spec.updateStrategy.type === "CheckpointRestore" ? " (CheckpointRestore: files restored from each sandbox's snapshot, memory not restored)" : "";
    setProgressing(s, "True", "Updating", `${after.updatedReplicas}/${after.replicas} upgraded${how}`, now);
  }
}

function setProgressing(s: OpsState, status: OpsCondition["status"], reason: string, message: string, now: number): void {
  const prev = s.conditions.find((c) => c.type === "Progressing");
  if (prev && prev.status === status && prev.reason === reason && prev.message === message) return;
  const lastTransitionTime = prev && prev.status === status ? prev.lastTransitionTime : now;
  s.conditions = [...s.conditions.filter((c) => c.type !== "Progressing"), { type: "Progressing", status, reason, message, lastTransitionTime }];
}

function event(s: OpsState, at: number, type: OpsEvent["type"], reason: string, message: string, sandboxId?: string): void {
  s.eventCount = eventCount(s) + 1;
  s.events.push({ at, type, reason, message, ...(sandboxId ? { sandboxId } : {}) });
  if (s.events.length > MAX_EVENTS) s.events.splice(0, s.events.length - MAX_EVENTS);
}
