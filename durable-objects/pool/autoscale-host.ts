// The PoolAutoscaler's side of PoolDO: holds the machine's state (autoscaler.ts), runs an
// evaluation when the pool's alarm finds one due, and renders its status. PoolDO applies the
// replicas it answers as a `configure` with the new size.
//
// Why in PoolDO and not an object beside it: every input (available and creating members, the
// claims that eat them) and the one output (the pool's size) are this object's own state, so an
// evaluation is a read of counters and a scale is a local event, with no RPC, no second copy of
// the inventory to go stale, and a claim can bring the next evaluation forward at the cost of
// comparing two numbers.
import type { AutoscalerSpec } from "../../schema/api/autoscaler.ts";
import { evaluate, evaluationTime, initialAutoscaler, nextEvaluation, type AutoscalerState } from "./autoscaler.ts";
import type { AutoscalerStatus } from "./rpc.ts";
import type { PoolStore } from "./store.ts";

/** Where the autoscaler's state is kept (the pool's SQLite). */
export type AutoscalerStore = Pick<PoolStore, "loadAutoscaler" | "saveAutoscaler">;

/** A claim brings the next evaluation this close (a burst is answered within ~this + the RPC). */
export const CLAIM_REACTION_MS = 200;

export class AutoscaleHost {
  state: AutoscalerState | null;
  /** When the next evaluation is due (null: none set, or suspended). */
  due: number | null = null;

  private readonly store: AutoscalerStore;

  constructor(store: AutoscalerStore) {
    this.store = store;
    const saved = store.loadAutoscaler();
    this.state = saved ? { ...saved, samples: [] } : null;
    if (this.state) this.due = Date.now();
  }

  set(spec: AutoscalerSpec | null, now: number): void {
    this.state = spec ? { ...(this.state ?? initialAutoscaler(spec)), spec } : null;
    this.store.saveAutoscaler(this.state);
    this.due = spec ? now : null;
  }

  /** The size an autoscaler keeps the pool at, which a new template spec does not override. */
  managedReplicas(): number | null {
    const d = this.state?.spec.suspend ? null : this.state?.decision;
    return d ? d.desiredReplicas : null;
  }

  /** Brings the next evaluation forward after a claim; true when it moved (re-arm the alarm). */
  claimed(now: number): boolean {
    if (!this.state || this.state.spec.suspend) return false;
    const soon = now + CLAIM_REACTION_MS;
    if (this.due !== null && this.due <= soon) return false;
    this.due = soon;
    return true;
  }

  /** Whether an evaluation is due at `now` (or just after it: evaluationTime). */
  isDue(now: number): boolean {
    return this.state !== null && evaluationTime(this.due, now) !== null;
  }

  /** The last evaluation as span attributes: what it decided (scale_up, scale_down, blocked,
   * none), why, and the sizes it compared. */
  decisionAttributes(scaledTo: number | null): Record<string, string | number> {
    const d = this.state?.decision;
    if (!d) return { "autoscaler.decision": "none", "autoscaler.reason": this.state?.conditions[0]?.reason ?? "" };
    const decision = scaledTo === null ? (d.reason === "ScaleBlocked" ? "blocked" : "none") : scaledTo > d.currentReplicas ? "scale_up" : "scale_down";
    return { "autoscaler.decision": decision, "autoscaler.reason": d.reason, "autoscaler.current_replicas": d.currentReplicas, "autoscaler.desired_replicas": d.desiredReplicas };
  }

  /** Evaluates if due (`pool` null: the template has no pool now); answers the replicas to scale to, or null. */
  run(pool: { replicas: number; available: number; total: number } | null, now: number): number | null {
    const st = this.state;
    const at = evaluationTime(this.due, now);
    if (!st || at === null) return null;
    if (!pool) {
      this.due = nextEvaluation(st, at);
      st.conditions = [{ type: "AbleToScale", status: "False", reason: "FailedGetTarget", message: "the template has no pool configured" }];
      return null;
    }
    const desired = evaluate(st, pool.replicas, { available: pool.available, total: pool.total }, at);
    this.due = nextEvaluation(st, at);
    this.store.saveAutoscaler(st);
    return desired;
  }

  status(replicas: number, available: number): AutoscalerStatus {
    const st = this.state;
    const iso = (t: number) => new Date(t).toISOString();
    return {
      configured: st !== null,
      spec: st?.spec ?? null,
      suspended: st?.spec.suspend ?? false,
      currentReplicas: replicas,
      desiredReplicas: st?.decision?.desiredReplicas ?? replicas,
      lastScaleTime: st?.lastScaleAt ? iso(st.lastScaleAt) : null,
      currentCapacity: { available },
      appliedCronPolicies: Object.entries(st?.cronSince ?? {}).map(([name, at]) => ({ name, lastScheduleTime: iso(at) })),
      lastDecision: st?.decision ? { time: iso(st.decision.at), reason: st.decision.reason, message: st.decision.message, currentReplicas: st.decision.currentReplicas, desiredReplicas: st.decision.desiredReplicas } : null,
      conditions: st?.conditions ?? [],
      events: (st?.events ?? []).map((e) => ({ time: iso(e.at), type: e.type, reason: e.reason, message: e.message })),
    };
  }
}
