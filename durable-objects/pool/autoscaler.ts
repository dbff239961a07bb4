// The PoolAutoscaler of one pool (OpenKruise Agents §1.9, §2.5), as a pure machine: PoolDO feeds
// it a sample of its inventory on each evaluation (its alarm, every `intervalMs` while an
// autoscaler is set, and soon after a claim) and applies the replicas it answers.
//
// Cron policies are windows (lib/cron.ts): while one or more are in effect, the highest
// `targetReplicas` among them is the pool's size, applied at once (cron bypasses the cooldown, as
// upstream). Otherwise the watermark (`capacityPolicy`): target available resolved against the
// window's average size, `tolerance` around it. Scale-up looks at the latest sample so a claim
// burst is answered within one evaluation (upstream averages here too, which delays the answer
// by up to the observation window), and it waits while as many members as the last scale-up
// added are still creating (upstream compares spec and status replicas, but this pool counts its
// creating members at once, so that guard never holds here); scale-down looks at the window's averages and waits for a
// full window of samples, so a burst's dip and refill do not make the pool flap. Each direction
// waits its `stabilizationWindowSeconds` after the last scale in either direction; the first
// scale is immediate.
import type { AutoscalerSpec } from "../../schema/api/autoscaler.ts";
import { inWindow, parseCron } from "../../lib/cron.ts";
import { scaled, TICK_EARLY_MS } from "./machine.ts";

export interface Sample {
  at: number;
  /** Unclaimed members ready to be claimed. */
  available: number;
  /** Unclaimed members, creating ones included (SandboxSet `status.replicas`). */
  total: number;
}

export interface AutoscalerEvent {
  at: number;
  type: "Normal" | "Warning";
  reason: "SuccessfulRescale" | "ScaleBlocked" | "CronPolicyActive";
  message: string;
}

export interface Condition {
  type: "ScalingActive" | "AbleToScale" | "ScalingLimited";
  status: "True" | "False";
  reason: string;
  message: string;
}

/** The last evaluation: what the autoscaler wanted and why. */
export interface Decision {
  at: number;
  currentReplicas: number;
  desiredReplicas: number;
  reason: string;
  message: string;
}

export interface AutoscalerState {
  spec: AutoscalerSpec;
  /** Samples of the last `windowMs`, oldest first (in memory only: a restart warms up again). */
  samples: Sample[];
  lastScaleAt: number | null;
  /** Members the last scale-up added (0 after a scale-down): it is in progress while as many
   * members are still creating. */
  lastUpBy: number;
  decision: Decision | null;
  conditions: Condition[];
  /** When each cron policy's current window was first seen in effect (`appliedCronPolicies`). */
  cronSince: Record<string, number>;
  /** The latest events, newest last (bounded: `MAX_EVENTS`). */
  events: AutoscalerEvent[];
}

export interface Options {
  /** How often the shell samples (upstream `--sampling-interval-seconds`, 5). */
  intervalMs: number;
  /** Samples averaged for scale-down (upstream `--observation-window-seconds`, 30). */
  windowMs: number;
}

/** The spec's sampling, in ms. */
export function optionsOf(spec: AutoscalerSpec): Options {
  return { intervalMs: spec.sampling.intervalSeconds * 1000, windowMs: Math.max(spec.sampling.windowSeconds, spec.sampling.intervalSeconds) * 1000 };
}
export const MAX_EVENTS = 20;

export function initialAutoscaler(spec: AutoscalerSpec): AutoscalerState {
  return { spec, samples: [], lastScaleAt: null, lastUpBy: 0, decision: null, conditions: [], cronSince: {}, events: [] };
}

/**
 * One evaluation at `now` with the pool at `replicas` (its spec) and `sample` (its inventory).
 * Returns the replicas to set, or null to leave the pool as it is; `state` is updated in place
 * (decision, conditions, events, samples).
 */
export function evaluate(state: AutoscalerState, replicas: number, sample: Omit<Sample, "at">, now: number, opts: Options = optionsOf(state.spec)): number | null {
  const spec = state.spec;
  state.samples.push({ at: now, ...sample });
  while (state.samples.length && state.samples[0]!.at <= now - opts.windowMs) state.samples.shift();
  if (spec.suspend) {
    decide(state, now, replicas, replicas, "Suspended", "the autoscaler is suspended");
    state.conditions = [cond("ScalingActive", false, "Suspended", "spec.suspend is true")];
    return null;
  }

  const cron = activeCron(state, now);
  let want: number;
  let reason: string;
  let message: string;
  let capacity = false;
  if (cron) {
    [want, reason, message] = [cron.targetReplicas, "CronPolicy", `cron policy "${cron.name}" (${cron.schedule}${cron.timeZone ? ` in ${cron.timeZone}` : ""}) is in effect`];
  } else if (spec.capacityPolicy) {
    [want, reason, message] = watermark(state, replicas, opts);
    capacity = true;
  } else {
    [want, reason, message] = [replicas, "NoPolicyInEffect", "no cron policy in effect and no capacityPolicy"];
  }

  const desired = Math.min(Math.max(want, spec.minReplicas), spec.maxReplicas);
  const limited = desired !== want;
  state.conditions = [
    cond("ScalingActive", true, reason, message),
    limited
      ? cond("ScalingLimited", true, want < desired ? "TooFewReplicas" : "TooManyReplicas", `${want} replicas clamped to ${desired} (min ${spec.minReplicas}, max ${spec.maxReplicas})`)
      : cond("ScalingLimited", false, "DesiredWithinRange", `${desired} replicas is within ${spec.minReplicas}..${spec.maxReplicas}`),
  ];
  if (limited) message += `; clamped from ${want}`;

  if (desired === replicas) {
    state.conditions.push(cond("AbleToScale", true, "ReadyForNewScale", "the pool is at the desired size"));
    decide(state, now, replicas, desired, reason, message);
    return null;
  }
  if (capacity && state.lastScaleAt !== null) {
    const up = desired > replicas;
    const waitMs = ((up ? spec.capacityPolicy!.scaleUp : spec.capacityPolicy!.scaleDown).stabilizationWindowSeconds * 1000) - (now - state.lastScaleAt);
    if (waitMs > 0) {
      const why = `scale ${up ? "up" : "down"} to ${desired} waits ${Math.ceil(waitMs / 1000)} s more (${up ? "scaleUp" : "scaleDown"} stabilization window since the last scale)`;
      state.conditions.push(cond("AbleToScale", false, up ? "BackoffUp" : "BackoffDown", why));
      // One ScaleBlocked event per blocked target, not one per evaluation.
      const previous = state.decision;
      if (!(previous?.reason === "ScaleBlocked" && previous.desiredReplicas === desired)) event(state, now, "Normal", "ScaleBlocked", `${why}: ${message}`);
      decide(state, now, replicas, desired, "ScaleBlocked", `${why}: ${message}`);
      return null;
    }
  }
  state.conditions.push(cond("AbleToScale", true, "SucceededRescale", `scaled from ${replicas} to ${desired}`));
  state.lastScaleAt = now;
  state.lastUpBy = Math.max(desired - replicas, 0);
  decide(state, now, replicas, desired, reason, message);
  event(state, now, "Normal", "SuccessfulRescale", `New size: ${desired} (was ${replicas}); reason: ${message}`);
  return desired;
}

/**
 * The time an evaluation due at `due` is judged as, when the shell looks at `now`, or null when
 * it is not due. The shell's alarm is set for `due`, and it may run with the object's clock (which
 * moves only with I/O) just short of it: judged as of `now` it would find nothing due and re-arm
 * for the time of the alarm running, which the runtime drops, and the autoscaler would stop until
 * the pool's object was loaded again. So a due time within TICK_EARLY_MS is judged as of that time,
 * as the pool's own tick is (machine.ts).
 */
export function evaluationTime(due: number | null, now: number): number | null {
  if (due === null) return null;
  if (due <= now) return now;
  return due <= now + TICK_EARLY_MS ? due : null;
}

/** When the shell should evaluate again (null: not while suspended). */
export function nextEvaluation(state: AutoscalerState, now: number): number | null {
  return state.spec.suspend ? null : now + optionsOf(state.spec).intervalMs;
}

/** The policy in effect with the highest target (ties: the first listed), or null. */
function activeCron(state: AutoscalerState, now: number) {
  let best: AutoscalerSpec["cronPolicies"][number] | null = null;
  const active = new Set<string>();
  for (const p of state.spec.cronPolicies) {
    if (!inWindow(parseCron(p.schedule), now, p.timeZone ?? "UTC")) continue;
    active.add(p.name);
    if (!(p.name in state.cronSince)) {
      state.cronSince[p.name] = now;
      event(state, now, "Normal", "CronPolicyActive", `cron policy "${p.name}" in effect: ${p.targetReplicas} replicas`);
    }
    if (!best || p.targetReplicas > best.targetReplicas) best = p;
  }
  for (const name of Object.keys(state.cronSince)) if (!active.has(name)) delete state.cronSince[name];
  return best;
}

/** The capacity path: [replicas wanted, reason, message]. */
function watermark(state: AutoscalerState, replicas: number, opts: Options): [number, string, string] {
  const policy = state.spec.capacityPolicy!;
  const latest = state.samples.at(-1)!;
  const avgTotal = Math.round(mean(state.samples.map((s) => s.total)));
  const avgAvailable = Math.round(mean(state.samples.map((s) => s.available)));
  const { target, lower, upper } = watermarks(policy.targetAvailable, policy.tolerance, avgTotal);
  const band = `target available ${target} (${lower}..${upper})`;
  if (latest.available < lower) {
    if (state.lastUpBy > 0 && latest.total - latest.available >= state.lastUpBy) return [replicas, "ScaleUpInProgress", `available ${latest.available} below ${band}; the last scale-up is still creating members`];
    return [latest.total + Math.max(target - latest.available, 1), "BelowTarget", `available ${latest.available} below ${band}`];
  }
  if (avgAvailable > upper) {
    const full = state.samples.length >= Math.floor(opts.windowMs / opts.intervalMs);
    if (!full) return [replicas, "WarmingUp", `available ${avgAvailable} above ${band}; waiting for a full observation window before scaling down`];
    if (replicas < avgTotal) return [replicas, "ScaleDownInProgress", `available ${avgAvailable} above ${band}; the last scale-down is still converging`];
    return [Math.max(avgTotal - (avgAvailable - target), 0), "AboveTarget", `available ${avgAvailable} (average) above ${band}`];
  }
  return [replicas, "WithinTolerance", `available ${latest.available} within ${band}`];
}

/**
 * Watermarks around the target (§2.5 step 4): both percentages scale `base` together; otherwise
 * the target resolves against `base` and the tolerance against the target.
 */
export function watermarks(targetAvailable: number | string, tolerance: number | string, base: number): { target: number; lower: number; upper: number } {
  if (typeof targetAvailable === "string" && typeof tolerance === "string") {
    const t = Number.parseInt(targetAvailable, 10);
    const tol = Number.parseInt(tolerance, 10);
    return { target: Math.ceil((base * t) / 100), lower: Math.max(Math.ceil((base * (t - tol)) / 100), 0), upper: Math.ceil((base * (t + tol)) / 100) };
  }
  const target = scaled(targetAvailable, base);
  const tol = scaled(tolerance, target);
  return { target, lower: Math.max(target - tol, 0), upper: target + tol };
}

function decide(state: AutoscalerState, at: number, currentReplicas: number, desiredReplicas: number, reason: string, message: string): void {
  state.decision = { at, currentReplicas, desiredReplicas, reason, message };
}

function event(state: AutoscalerState, at: number, type: AutoscalerEvent["type"], reason: AutoscalerEvent["reason"], message: string): void {
  state.events.push({ at, type, reason, message });
  if (state.events.length > MAX_EVENTS) state.events.shift();
}

function cond(type: Condition["type"], ok: boolean, reason: string, message: string): Condition {
  return { type, status: ok ? "True" : "False", reason, message };
}

function mean(xs: number[]): number {
  return xs.reduce((a, b) => a + b, 0) / xs.length;
}
