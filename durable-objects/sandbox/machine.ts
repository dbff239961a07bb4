// The sandbox lifecycle as a pure function: `transition(state, event, now)` returns the next
// state, the effects for the shell (sandbox-group-do.ts) and the reply. Expected refusals come back in
// `result`, never as throws.
//
// Phases: Pending → Running → Pausing → Paused → Resuming → Running; any → Terminating → gone;
// a resume the agent fails or rejects goes back, Resuming → Pausing → Paused (`resumeFailed`);
// Failed only when the agent reports it (a terminal error) or rejects an intent otherwise; a
// transient failure the agent retries is a Ready=False reason, never Failed. Condition reasons:
//   Ready              Pending (not yet observed), RuntimeReady (runtime answers and is
//                      initialised for this generation), RuntimeNotReady, Paused, Terminating,
//                      IntentRejected, ReconcileError (the agent retries a failure),
//                      Pid1Restarting (its pid 1 ended and it starts again: Running kept, the
//                      gateway holds its requests until it is back: state.ts `restarting`), or the
//                      agent's own reason (e.g. ImagePullFailed)
//   RuntimeInitialized Pending (re-init with this claim's token and env vars sent), Succeeded
//   SandboxPaused      Pending (pause sent), FreezePauseSucceed (cgroup-frozen, memory kept),
//                      StopPauseSucceed (released, filesystem kept)
//   SandboxResumed     ResumePod (resume sent: False; observed running: True), ResumeFailed
//                      (False: the resume failed and the sandbox is paused again; the message
//                      is the agent's reason and message)
//   Upgrading          UpgradePod (an ops run's new revision sent: False), Succeeded (observed
//                      running, or paused, at it: True), UpgradePodFailed (the agent failed it)
//   SeccompFiltered,   the driver's (schema/crd/conditions.ts), as its observations say: set on
//   UserNamespaced     each that carries it, kept as it was by one that does not
// A snapshot is an intent of its own generation with the same desired state: the agent freezes
// the sandbox for the copy and leaves it as it was; a snapshot it could not take does not fail it.
import { MIN_RESUME_TIMEOUT_S } from "../../schema/api/limits.ts";
import { RESTORE_PENDING } from "../../schema/crd/conditions.ts";
import { ErrorCode, sandboxNotFoundMessage, type Refusal } from "../../schema/errors.ts";
import { egressOf, type Intent, type Observation, type PauseStrategy, type SandboxId } from "../../schema/protocol/index.ts";
import type { SandboxEffect } from "./effects.ts";
import type { SandboxEvent } from "./events.ts";
import { heldBy, restoreOwed } from "./upgrade.ts";
import {
  assertNever,
  DRIVER_CONDITIONS,
  visibleState,
  type Access,
  type Condition,
  type ConditionType,
  type Phase,
  type Result,
  type SandboxNote,
  type SandboxState,
  MAX_SANDBOX_EVENTS,
} from "./state.ts";

/** How long a killed sandbox is remembered without the agent confirming its deletion. */
export const PURGE_GRACE_MS = 10 * 60_000;

export interface Transition {
  state: SandboxState | null;
  effects: SandboxEffect[];
  /** `resumed`: connect/wake started a resume (E2B answers 201 instead of 200). */
  result: Result<{ resumed?: boolean }>;
}

/** Deterministic, no I/O; `current` is never mutated (transitions change a copy). */
export function transition(current: SandboxState | null, ev: SandboxEvent, now: number): Transition {
  const s = current && copy(current);
  switch (ev.type) {
    case "create":
      return s ? refuse(s, ErrorCode.conflict, `Sandbox "${ev.spec.id}" already exists`) : create(ev, now);
    case "observe":
      return s ? unlessUnchanged(current, observe(s, ev.obs, now)) : ok(null, []);
    case "ack":
      return s ? unlessUnchanged(current, ack(s, ev, now)) : ok(null, []);
    case "alarm":
      return s ? unlessUnchanged(current, alarm(s, now, ev.pauseRefused)) : ok(null, []);
    case "upgrade":
      return s && s.phase !== "Terminating" ? upgrade(current!, s, ev, now) : refuse(s, ErrorCode.sandboxNotFound, sandboxNotFoundMessage(current?.spec.id ?? ""));
    case "record":
      if (!s || s.phase === "Terminating" || ev.notes.length === 0) return ok(current, []);
      note(s, ...ev.notes);
      return ok(s, []);
    case "abandon":
      // The row stays, as a kill whose delete intent the alarm delivers until ClusterDO takes it
      // (ClusterDO may have taken the create before its answer was lost).
      return s && s.phase !== "Terminating" ? kill(s, now) : ok(current, []);
    default:
      break;
  }
  if (!s || s.phase === "Terminating") return refuse(s, ErrorCode.sandboxNotFound, sandboxNotFoundMessage(current?.spec.id ?? ""));
  if (ev.type === "kill") return kill(s, now);
  if (s.phase === "Failed") return refuse(s, ErrorCode.sandboxNotFound, sandboxNotFoundMessage(s.spec.id));
  switch (ev.type) {
    case "setTimeout":
      return setEndAt(s, now + ev.timeoutS * 1000, "overwrite");
    case "refresh":
      return setEndAt(s, now + ev.durationS * 1000, "extend");
    case "pause":
      if (s.phase === "Pausing" || s.phase === "Paused") return refuse(s, ErrorCode.alreadyPaused, `Sandbox "${s.spec.id}" is already paused`);
      if (s.phase === "Resuming") return refuse(s, ErrorCode.conflict, `Sandbox "${s.spec.id}" is resuming`);
      return startPause(s, ev.strategy ?? s.spec.pauseStrategy, now);
    case "connect":
      return connect(s, ev.timeoutS, ev.memory, now);
    case "wake":
      return wake(s, now);
    case "updateNetwork":
      return updateNetwork(s, ev, now);
    case "hook":
      setCondition(s, ev.condition.type, ev.condition.status, ev.condition.reason, now, ev.condition.message);
      // Each run is a step on the list too (the condition keeps only the last one).
      note(s, { at: now, type: ev.condition.status === "True" ? "Normal" : "Warning", reason: ev.condition.type, message: `${ev.condition.reason}${ev.condition.message ? `: ${ev.condition.message}` : ""}`, source: "lifecycle hook" });
      return ok(s, []);
    case "hooks": {
      const { hooks: _old, ...rest } = s.spec;
      s.spec = Object.keys(ev.hooks).length ? { ...rest, hooks: ev.hooks } : rest;
      return ok(s, []);
    }
    case "snapshot":
      return snapshot(s, ev.snapshotId, now);
    default:
      return assertNever(ev);
  }
}

/** Appends steps to the sandbox's event list, the oldest dropped past MAX_SANDBOX_EVENTS. */
function note(s: SandboxState, ...notes: SandboxNote[]): void {
  s.events = [...(s.events ?? []), ...notes].slice(-MAX_SANDBOX_EVENTS);
}

/**
 * Agent- and timer-driven events often change nothing (the observation of a re-init its ack
 * already reported, an early alarm): the reply then carries `current` itself, so the shell can
 * tell by identity that there is nothing to persist.
 */
function unlessUnchanged(current: SandboxState | null, t: Transition): Transition {
  if (!current || !t.state || t.effects.length > 0) return t;
  return sameState(current, t.state) ? { ...t, state: current } : t;
}

/** Equal but for the spec's identity: field by field, and a field that is not the very same value
 * compared as JSON (an ack's change usually differs in its first field: nothing is encoded). */
function sameState(a: SandboxState, b: SandboxState): boolean {
  if (a.spec !== b.spec) return false;
  const keys = Object.keys(a) as (keyof SandboxState)[];
  if (keys.length !== Object.keys(b).length) return JSON.stringify({ ...a, spec: null }) === JSON.stringify({ ...b, spec: null });
  for (const k of keys) {
    if (!(k in b)) return JSON.stringify({ ...a, spec: null }) === JSON.stringify({ ...b, spec: null });
    const x = a[k];
    const y = b[k];
    if (x === y) continue;
    if (typeof x !== "object" || typeof y !== "object" || x === null || y === null || JSON.stringify(x) !== JSON.stringify(y)) return false;
  }
  return true;
}

/**
 * A copy to change. Shallow: transitions only assign top-level fields, and replace (never edit)
 * the conditions array, a condition and the endpoint, so nested values are shared safely.
 */
function copy(current: SandboxState): SandboxState {
  return { ...current };
}

/** Whether `access` may see the sandbox at all (its team, or the admin); anything else is answered as not found. */
export function visibleTo(s: SandboxState | null, access: Access): s is SandboxState {
  return s !== null && s.phase !== "Terminating" && (access.admin || access.teamId === s.spec.teamId);
}

/** The earliest time the alarm must fire, or null for none. */
export function dueAt(s: SandboxState | null): number | null {
  if (!s) return null;
  switch (s.phase) {
    case "Terminating":
      return s.purgeAt;
    case "Pausing":
    case "Paused":
      return s.retainUntil;
    case "Pending":
    case "Running":
    case "Resuming":
    case "Failed":
      return s.endAt;
    default:
      return assertNever(s.phase);
  }
}

function create(ev: Extract<SandboxEvent, { type: "create" }>, now: number): Transition {
  const s: SandboxState = {
    spec: ev.spec,
    phase: "Pending",
    conditions: [],
    generation: ev.generation,
    observedGeneration: 0,
    desired: "running",
    pauseStrategy: ev.spec.pauseStrategy,
    startedAt: now,
    endAt: ev.spec.neverTimeout ? null : now + ev.timeoutS * 1000,
    retainUntil: null,
    purgeAt: null,
    endpoint: ev.endpoint,
    rev: 0,
  };
  setCondition(s, "Ready", "False", "Pending", now);
  setCondition(s, "RuntimeInitialized", "False", "Pending", now);
  return ok(s, [sendIntent(s, now), index(s)]);
}

function kill(s: SandboxState, now: number): Transition {
  s.phase = "Terminating";
  s.desired = "deleted";
  s.generation++;
  s.purgeAt = now + PURGE_GRACE_MS;
  s.killedAt = now;
  setCondition(s, "Ready", "False", "Terminating", now);
  return ok(s, [sendIntent(s, now), index(s)]);
}

function setEndAt(s: SandboxState, endAt: number, mode: "overwrite" | "extend"): Transition {
  if (s.phase === "Pausing" || s.phase === "Paused") return refuse(s, ErrorCode.conflict, `Sandbox "${s.spec.id}" is paused`);
  if (s.spec.neverTimeout || s.endAt === null) return ok(s, []);
  const next = mode === "extend" ? Math.max(s.endAt, endAt) : endAt;
  if (next === s.endAt) return ok(s, []);
  s.endAt = next;
  return ok(s, [index(s)]);
}

/** The rules take effect when the agent applies the new generation (the shell waits for its ack). */
function updateNetwork(s: SandboxState, ev: Extract<SandboxEvent, { type: "updateNetwork" }>, now: number): Transition {
  if (s.phase !== "Running" && s.phase !== "Pending") return refuse(s, ErrorCode.conflict, `Sandbox "${s.spec.id}" is not running`);
  // E2B's egress configuration is replaced whole: lists and header rules not given are cleared.
  const { allowOut: _a, denyOut: _d, rules: _r, ...rest } = s.spec.network ?? {};
  const rules = ev.rules && Object.keys(ev.rules).length ? { rules: ev.rules } : {};
  const network = { ...rest, ...(ev.allowOut ? { allowOut: ev.allowOut } : {}), ...(ev.denyOut ? { denyOut: ev.denyOut } : {}), ...rules };
  s.spec = { ...s.spec, network: Object.keys(network).length ? network : null, allowInternetAccess: ev.allowInternetAccess };
  s.generation++;
  return ok(s, [sendIntent(s, now)]);
}

/**
 * Recreate: the newest intent carries the new template (the agent replaces the runtime and keeps
 * the files). Idempotent by (revision, attempt), so an ops run that lost the answer asks again
 * safely; a sandbox the agent failed at it can be retried with the next attempt. A paused
 * sandbox is upgraded paused and stays paused: its resume gives the new version.
 */
function upgrade(current: SandboxState, s: SandboxState, ev: Extract<SandboxEvent, { type: "upgrade" }>, now: number): Transition {
  const u = s.upgrade;
  if (u && u.revision === ev.template.revision && u.attempt >= ev.attempt) return ok(current, []);
  // Another run's upgrade under way (not a failed one) holds it: not applied (its outcome says `held`).
  if (heldBy(s, ev.by)) return ok(current, []);
  const retry = s.phase === "Failed" && u !== undefined && !u.done;
  if (s.phase === "Failed" && !retry) return refuse(s, ErrorCode.conflict, `Sandbox "${s.spec.id}" has failed`);
  if (s.phase !== "Running" && s.phase !== "Paused" && !retry) return refuse(s, ErrorCode.conflict, `Sandbox "${s.spec.id}" is ${s.phase}; it is upgraded once that settles`);
  const before = { phase: s.phase, endAt: s.endAt };
  const paused = retry ? u.paused : s.phase === "Paused";
  if (retry) {
    s.phase = paused ? "Pausing" : "Pending";
    s.desired = paused ? "paused" : "running";
  }
  s.spec = { ...s.spec, template: ev.template };
  s.generation++;
  // A restore the last upgrade still owes (a CheckpointRestore whose pod naming the checkpoint is
  // not made yet: the Kubernetes driver's Stop-paused sandbox restores on resume) is not dropped
  // by this one: a Recreate carries it forward (its next pod still restores that checkpoint, and
  // the driver's pending mark keeps naming it), and a CheckpointRestore with its own snapshot
  // replaces it, the old snapshot held until this upgrade is done (the agent may still act on the
  // old mark until it applies this intent). Either way nothing is freed while a mark may name it.
  const owed = u && restoreOwed(u) ? u.restoreFs : undefined;
  const restoreFs = ev.restoreFs ?? owed;
  s.upgrade = {
    revision: ev.template.revision,
    attempt: ev.attempt,
    generation: s.generation,
    paused,
    done: false,
    ...(restoreFs ? { restoreFs, ...(paused ? { restore: "unreported" as const } : {}) } : {}),
    ...(owed && owed !== restoreFs ? { replaces: owed } : {}),
    ...(ev.by ? { by: ev.by } : {}),
  };
  const holders = { ...(owed && u?.holders?.[owed] ? { [owed]: u.holders[owed] } : {}), ...(ev.restoreFs && ev.holder ? { [ev.restoreFs]: ev.holder } : {}) };
  if (Object.keys(holders).length) s.upgrade.holders = holders;
  setCondition(s, "Upgrading", "False", "UpgradePod", now);
  if (!paused) setCondition(s, "Ready", "False", "Upgrading", now);
  return ok(s, changed(s, before) ? [sendIntent(s, now), index(s)] : [sendIntent(s, now)]);
}

/** The sandbox runs (or rests paused) at the generation its upgrade sent: the upgrade is done. */
function upgradeDone(s: SandboxState, now: number): void {
  if (!s.upgrade || s.upgrade.done || s.observedGeneration < s.upgrade.generation) return;
  s.upgrade = { ...s.upgrade, done: true };
  setCondition(s, "Upgrading", "True", "Succeeded", now);
}

/** Where a paused sandbox's restore stands, from a report at the upgrade's generation or later. */
function restoreSeen(s: SandboxState, obs: Pick<Observation, "generation" | "phase" | "ready" | "reason">): void {
  const u = s.upgrade;
  if (!u?.restore || u.restore === "restored" || obs.generation < u.generation) return;
  if (obs.reason === RESTORE_PENDING) s.upgrade = { ...u, restore: "pending" };
  else if (obs.phase === "Paused" || (obs.phase === "Running" && obs.ready)) s.upgrade = { ...u, restore: "restored" };
}

function snapshot(s: SandboxState, snapshotId: string, now: number): Transition {
  if (s.phase !== "Running" && s.phase !== "Paused") return refuse(s, ErrorCode.conflict, `Sandbox "${s.spec.id}" is ${s.phase.toLowerCase()}; retry the snapshot once it is running or paused`);
  s.generation++;
  s.snapshot = { id: snapshotId, generation: s.generation };
  return ok(s, [sendIntent(s, now)]);
}

function startPause(s: SandboxState, strategy: PauseStrategy, now: number): Transition {
  delete s.timeoutPauseDeferrals;
  s.phase = "Pausing";
  s.desired = "paused";
  s.pauseStrategy = strategy;
  s.generation++;
  s.retainUntil = s.spec.pausedRetentionMs === null ? null : now + s.spec.pausedRetentionMs;
  setCondition(s, "SandboxPaused", "False", "Pending", now);
  setCondition(s, "Ready", "False", "Paused", now);
  removeCondition(s, "SandboxResumed");
  return ok(s, [sendIntent(s, now), index(s)]);
}

function connect(s: SandboxState, timeoutS: number, memory: boolean | undefined, now: number): Transition {
  switch (s.phase) {
    case "Pending":
    case "Running":
      return setEndAt(s, now + timeoutS * 1000, "extend");
    case "Resuming": {
      const t = setEndAt(s, now + timeoutS * 1000, "extend");
      return { ...t, result: { ok: true, resumed: true } };
    }
    case "Pausing":
    case "Paused":
      if (memory === false && s.pauseStrategy === "Freeze") {
        return refuse(s, ErrorCode.badRequest, "Resuming without memory (reboot) is not supported for a sandbox paused with its memory kept");
      }
      return resume(s, Math.max(timeoutS, MIN_RESUME_TIMEOUT_S), now);
    case "Terminating":
    case "Failed":
      return refuse(s, ErrorCode.sandboxNotFound, sandboxNotFoundMessage(s.spec.id));
    default:
      return assertNever(s.phase);
  }
}

function wake(s: SandboxState, now: number): Transition {
  if (s.phase !== "Pausing" && s.phase !== "Paused") return ok(s, [], { resumed: s.phase === "Resuming" });
  // One rule decides (wakeResumes, which the group's quota reservation asks too); what follows
  // only says why not.
  if (wakeResumes(s)) return resume(s, MIN_RESUME_TIMEOUT_S, now);
  if (!s.spec.lifecycle.autoResume) return refuse(s, ErrorCode.conflict, `Sandbox "${s.spec.id}" is paused and auto-resume is off`);
  if (s.pauseStrategy === "Stop") return refuse(s, ErrorCode.conflict, `Sandbox "${s.spec.id}" was paused without memory; resume it with connect`);
  const failed = s.resumeFailure;
  const why = failed ? `${failed.reason}${failed.message ? ` (${failed.message})` : ""}` : "unknown";
  return refuse(s, ErrorCode.resumeFailed, `Sandbox "${s.spec.id}" is paused: its last resume failed: ${why}; traffic does not resume it again, a connect does (once the cause is fixed)`);
}

/**
 * Whether traffic (the gateway's wake) resumes this sandbox now. Not once a resume of it failed
 * (`resumeFailure`, cleared by a resume that succeeds): every request a client retries would start
 * another resume, its host start, its pause back and its Warning (review M2 of s35-resume); an
 * explicit connect still resumes it. The group reserves the resume's quota only when this holds.
 */
export function wakeResumes(s: SandboxState): boolean {
  return (s.phase === "Pausing" || s.phase === "Paused") && s.spec.lifecycle.autoResume && s.pauseStrategy !== "Stop" && !s.resumeFailure;
}

function resume(s: SandboxState, timeoutS: number, now: number): Transition {
  s.phase = "Resuming";
  s.desired = "running";
  s.generation++;
  s.retainUntil = null;
  if (!s.spec.neverTimeout) s.endAt = Math.max(s.endAt ?? 0, now + timeoutS * 1000);
  setCondition(s, "SandboxResumed", "False", "ResumePod", now);
  setCondition(s, "RuntimeInitialized", "False", "Pending", now);
  return ok(s, [sendIntent(s, now), index(s)], { resumed: true });
}

function observe(s: SandboxState, obs: Observation, now: number): Transition {
  if (obs.generation < s.generation) return ok(s, []);
  s.observedGeneration = Math.max(s.observedGeneration, obs.generation);
  if (obs.endpoint) s.endpoint = obs.endpoint;
  if (obs.address) s.address = obs.address;
  const before = { phase: s.phase, endAt: s.endAt };
  restoreSeen(s, obs);
  driverConditions(s, obs, now);
  switch (obs.phase) {
    case "Deleted":
      if (s.desired === "deleted") return ok(null, [{ kind: "purge" }]);
      fail(s, obs.reason ?? "SandboxGone", obs.message ?? "the sandbox disappeared from its cluster", now, true);
      break;
    case "Failed":
      if (s.desired === "deleted") break;
      if (rollsBack(s)) return ok(s, resumeFailed(s, obs.reason ?? "Failed", obs.message, now));
      fail(s, obs.reason ?? "Failed", obs.message, now);
      break;
    case "Running":
      if (s.desired !== "running") {
        retrying(s, obs, now); // a pause the agent retries
        break;
      }
      if (obs.ready) becomeRunning(s, now);
      else setCondition(s, "Ready", "False", obs.reason ?? "RuntimeNotReady", now, obs.message);
      break;
    case "Paused":
      if (s.desired === "paused") becomePaused(s, now);
      else retrying(s, obs, now);
      break;
    case "Pending":
    case "Pausing":
    case "Resuming":
      retrying(s, obs, now);
      break;
    case "Terminating":
      break;
    default:
      return assertNever(obs.phase);
  }
  return ok(s, changed(s, before) ? [index(s)] : []);
}

function ack(s: SandboxState, ev: Extract<SandboxEvent, { type: "ack" }>, now: number): Transition {
  if (ev.generation !== s.generation) return ok(s, []);
  const before = { phase: s.phase, endAt: s.endAt };
  // The snapshot's answer (taken or not, which the caller reads in the ack): asked no more.
  if (s.snapshot?.generation === ev.generation) s.snapshot = null;
  if (ev.result === "rejected") {
    if (s.desired === "deleted") return ok(null, [{ kind: "purge" }]);
    if (rollsBack(s)) return ok(s, resumeFailed(s, "IntentRejected", ev.message, now));
    fail(s, "IntentRejected", ev.message, now);
  } else if (ev.result === "applied") {
    // Applied means the agent holds this generation: its observation of it adds nothing new.
    s.observedGeneration = Math.max(s.observedGeneration, ev.generation);
    // Running ready at this generation (the observation repeating it may never reach this machine:
    // ClusterDO's router drops it), so a restore owed is done: a driver reports a pending restore
    // as not ready, which is never acked applied.
    if (s.desired === "running") restoreSeen(s, { generation: ev.generation, phase: "Running", ready: true });
    if (s.desired === "running") becomeRunning(s, now);
    else if (s.desired === "paused") becomePaused(s, now);
    else return ok(null, [{ kind: "purge" }]);
  }
  return ok(s, changed(s, before) ? [index(s)] : []);
}

/**
 * A timeout's auto-pause the team quota could not reserve: `deferred` times (backoff) while the
 * quota cannot answer, then paused anyway. The bound briefly passed is better than a user's data
 * destroyed for an infrastructure fault; the quota's reconcile (and the group's assert) counts it.
 */
export const TIMEOUT_PAUSE_DEFER_MS = [5_000, 15_000, 30_000, 60_000, 120_000];

function alarm(s: SandboxState, now: number, pauseRefused?: Refusal): Transition {
  const due = dueAt(s);
  if (due === null || due > now) return ok(s, []);
  switch (s.phase) {
    case "Terminating":
      return ok(null, [{ kind: "purge" }]);
    case "Pausing":
    case "Paused":
    case "Failed":
      return kill(s, now);
    case "Pending":
    case "Running":
    case "Resuming":
      if (s.spec.lifecycle.onTimeout !== "pause") return kill(s, now);
      return pauseRefused === undefined ? startPause(s, s.spec.lifecycle.timeoutPauseStrategy, now) : timeoutPauseRefused(s, pauseRefused, now);
    default:
      return assertNever(s.phase);
  }
}

/** Only a definite "over the limit" kills (never left running past its timeout, never paused over
 * the bound); a quota that cannot answer keeps it running and asks again later, then pauses it. */
function timeoutPauseRefused(s: SandboxState, refusal: Refusal, now: number): Transition {
  if (refusal.code === ErrorCode.quotaExceeded) {
    note(s, { at: now, type: "Warning", reason: "TimeoutPauseRefused", message: `timed out and killed instead of paused: ${refusal.message}`, source: "team quota" });
    return kill(s, now);
  }
  const tries = s.timeoutPauseDeferrals ?? 0;
  const wait = TIMEOUT_PAUSE_DEFER_MS[tries];
  if (wait === undefined) {
    note(s, { at: now, type: "Warning", reason: "TimeoutPauseUncounted", message: `timed out and paused although the team quota could not count it (${tries} tries): ${refusal.message}`, source: "team quota" });
    return startPause(s, s.spec.lifecycle.timeoutPauseStrategy, now);
  }
  s.timeoutPauseDeferrals = tries + 1;
  s.endAt = now + wait;
  note(s, { at: now, type: "Warning", reason: "TimeoutPauseDeferred", message: `timed out; its auto-pause is tried again in ${wait / 1000} s (${refusal.message})`, source: "team quota" });
  return ok(s, [index(s)]);
}

function becomeRunning(s: SandboxState, now: number): void {
  if (s.phase === "Resuming") {
    setCondition(s, "SandboxResumed", "True", "ResumePod", now);
    removeCondition(s, "SandboxPaused");
    delete s.resumeFailure;
  }
  if (s.phase === "Pending" || s.phase === "Resuming") s.phase = "Running";
  setCondition(s, "Ready", "True", "RuntimeReady", now);
  setCondition(s, "RuntimeInitialized", "True", "Succeeded", now);
  upgradeDone(s, now);
}

function becomePaused(s: SandboxState, now: number): void {
  s.phase = "Paused";
  setCondition(s, "Ready", "False", "Paused", now); // replaces a retry's reason
  setCondition(s, "SandboxPaused", "True", s.pauseStrategy === "Stop" ? "StopPauseSucceed" : "FreezePauseSucceed", now);
  upgradeDone(s, now);
}

/**
 * The agent is retrying a transient failure (its Ready condition False with a reason): not
 * Failed, the phase stays, and Ready says why, so a create that runs out of time answers with it.
 */
function retrying(s: SandboxState, obs: Observation, now: number): void {
  const ready = obs.conditions?.find((c) => c.type === "Ready" && c.status === "False" && c.reason);
  if (ready && s.desired !== "deleted") setCondition(s, "Ready", "False", ready.reason!, now, ready.message);
}

/** The driver's own conditions in an observation, each as told. One an observation does not
 * carry stays: the driver reports a change (False, then True), never an absence. */
function driverConditions(s: SandboxState, obs: Observation, now: number): void {
  for (const c of obs.conditions ?? []) {
    const type = DRIVER_CONDITIONS.find((t) => t === c.type);
    const prev = s.conditions.find((x) => x.type === type);
    // Told again as it is: unchanged (the same state back, no write).
    if (!type || (prev && prev.status === c.status && prev.reason === (c.reason ?? type) && prev.message === c.message)) continue;
    setCondition(s, type, c.status, c.reason ?? type, now, c.message);
  }
}

/**
 * How long a Failed sandbox is kept before the edge kills it (its host side deleted): while it is,
 * its conditions and event list say why it failed (`GET /admin/sandboxes/{id}`, the console's
 * timeline; E2B's API already answers 404 for it), and it counts against its team's quota as a
 * running one (ledger.ts `holds`). OpenKruise deletes a failed claim at once by default and keeps
 * one it retains on failure for 5 min (`cleanup-retain-on-failure`); this keeps it as long as a
 * killed sandbox is remembered.
 */
export const FAILED_RETAIN_MS = PURGE_GRACE_MS;

/**
 * The sandbox failed. Its end moves to FAILED_RETAIN_MS from the first failure at the latest, also
 * for a never-timeout one: nothing else deletes its host side, and nobody can use it any more
 * (E2B's API answers 404 for it). Two are kept to their own timeout instead, still counted: one
 * whose upgrade failed (its update ops run retries it with the next attempt), and one whose pause
 * back from a failed resume (`resumeFailed`) failed too while its host side is still there
 * (`hostGone` false): its disk holds what the user paused, and the failure may be ours (an image
 * the agent no longer has, a snapshot error, a rejected intent), so the 10-min kill would destroy
 * the user's data for it; the team's key frees it by id. A failed resume itself is not Failed: it
 * goes back to paused (`resumeFailed`).
 */
function fail(s: SandboxState, reason: string, message: string | undefined, now: number, hostGone = false): void {
  const first = s.phase !== "Failed";
  // The pause that takes a failed resume back (resumeFailed), failing too.
  const rollingBack = s.phase === "Pausing" && s.resumeFailure?.generation === s.generation - 1;
  s.phase = "Failed";
  setCondition(s, "Ready", "False", reason, now, message);
  if (s.upgrade && !s.upgrade.done) {
    setCondition(s, "Upgrading", "False", "UpgradePodFailed", now, message ?? reason);
    return;
  }
  if (!first) return;
  if (rollingBack && !hostGone) {
    const until = s.endAt === null ? "until it is killed (never-timeout)" : `until ${new Date(s.endAt).toISOString()} (its timeout)`;
    note(s, { at: now, type: "Warning", reason, message: `failed to pause again after its resume failed${message ? `: ${message}` : ""}; its paused disk is kept ${until}, counted against the team quota as a running sandbox; kill it by id to free it`, source: "sandbox" });
    return;
  }
  const deleteAt = now + FAILED_RETAIN_MS;
  if (s.endAt === null || s.endAt > deleteAt) s.endAt = deleteAt;
  note(s, { at: now, type: "Warning", reason, message: `failed${message ? `: ${message}` : ""}; killed (its host side deleted) by ${new Date(s.endAt).toISOString()} at the latest, counted against the team quota until then`, source: "sandbox" });
}

/**
 * Whether a failure of the newest intent takes the sandbox back to paused (`resumeFailed`): it was
 * resuming, with no upgrade under way (a failed upgrade stays Failed: its update ops run retries it
 * with its next attempt, which needs the Failed phase).
 */
function rollsBack(s: SandboxState): boolean {
  return s.phase === "Resuming" && !(s.upgrade && !s.upgrade.done);
}

/**
 * A resume the agent failed (its template's ready command did not pass, the host side could not be
 * started: a terminal error) or rejected goes back to paused as it was paused, with the next
 * generation: the agent stops what the failed start left (a Stop pause ends its processes and
 * unmounts its disk; a Freeze pause freezes them again), and deletes nothing of its files. It holds
 * a paused slot again (quota-link follows the phase), lists as paused, is kept to its paused
 * retention, and a later connect resumes it again (once the cause is fixed). E2B has no Failed
 * state to show: a Failed sandbox is a 404, so the user's paused work would be unreachable.
 * `resumeFailure` names the failed resume, so the connect or wake waiting on it answers with the
 * reason (sandbox-group-do.ts); a Warning and the SandboxResumed condition keep it too.
 */
function resumeFailed(s: SandboxState, reason: string, message: string | undefined, now: number): SandboxEffect[] {
  s.resumeFailure = { generation: s.generation, reason, ...(message !== undefined ? { message } : {}), at: now };
  s.phase = "Pausing";
  s.desired = "paused";
  s.generation++;
  s.retainUntil = s.spec.pausedRetentionMs === null ? null : now + s.spec.pausedRetentionMs;
  const why = `${reason}${message ? `: ${message}` : ""}`;
  setCondition(s, "SandboxResumed", "False", "ResumeFailed", now, why);
  setCondition(s, "SandboxPaused", "False", "Pending", now);
  setCondition(s, "Ready", "False", reason, now, message);
  note(s, { at: now, type: "Warning", reason, message: `failed to resume${message ? `: ${message}` : ""}; paused again (${s.pauseStrategy}), its files kept: connect resumes it again`, source: "sandbox" });
  return [sendIntent(s, now), index(s)];
}

/** Index rows carry what list shows; a phase change E2B cannot see (Pending → Running) is not written. */
function changed(s: SandboxState, before: { phase: Phase; endAt: number | null }): boolean {
  return visibleState(s.phase) !== visibleState(before.phase) || s.endAt !== before.endAt;
}

function sendIntent(s: SandboxState, now: number): SandboxEffect {
  const intent: Intent = {
    sandboxId: s.spec.id as SandboxId,
    generation: s.generation,
    owner: { kind: "sandbox" },
    desired: { state: s.desired, pauseStrategy: s.pauseStrategy },
    template: s.spec.template,
    envVars: s.spec.envVars,
    envdAccessToken: s.spec.envdAccessToken,
    allowInternetAccess: s.spec.allowInternetAccess ?? true,
    labels: s.spec.labels,
    annotations: s.spec.annotations ?? {},
    egress: egressOf(s.spec.network),
    networkRules: s.spec.network?.rules ?? {},
    team: s.spec.teamName ?? null,
    ...(s.spec.inplaceUpdate ? { inplaceUpdate: s.spec.inplaceUpdate } : {}),
    ...(s.spec.restoreFrom ? { restoreFrom: s.spec.restoreFrom } : {}),
    ...(s.snapshot?.generation === s.generation ? { snapshot: { id: s.snapshot.id } } : {}),
    // Until the upgrade is done: its snapshot is freed after, and the agent restores once per id.
    ...(s.upgrade?.restoreFs && !s.upgrade.done ? { restoreFs: { id: s.upgrade.restoreFs } } : {}),
    issuedAt: now,
  };
  return { kind: "intent", intent };
}

function index(s: SandboxState): SandboxEffect {
  s.rev++;
  return { kind: "index" };
}

function setCondition(s: SandboxState, type: ConditionType, status: Condition["status"], reason: string, now: number, message?: string): void {
  const prev = s.conditions.find((c) => c.type === type);
  const next: Condition = { type, status, reason, lastTransitionTime: prev && prev.status === status ? prev.lastTransitionTime : now };
  if (message !== undefined) next.message = message;
  s.conditions = [...s.conditions.filter((c) => c.type !== type), next];
}

function removeCondition(s: SandboxState, type: ConditionType): void {
  s.conditions = s.conditions.filter((c) => c.type !== type);
}

function ok(state: SandboxState | null, effects: SandboxEffect[], extra: { resumed?: boolean } = {}): Transition {
  return { state, effects, result: { ok: true, ...extra } };
}

function refuse(state: SandboxState | null, code: Refusal["code"], message: string): Transition {
  return { state, effects: [], result: { ok: false, error: { code, message } } };
}
