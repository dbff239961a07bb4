// Request handling: kubectl edits of a Sandbox become requests to the edge. A `spec.paused` that
// differs from what the edge last asked for (the desired-paused annotation), or a delete the agent
// did not make (its finalizer holds the object until the edge confirms), is reported once per
// action and generation; the driver does not act on it until an intent with a newer generation
// arrives (the edge stays the authority).
import { EventReason } from "../../../schema/crd/conditions.ts";
import { ANNOTATION } from "../../../schema/crd/labels.ts";
import { crdAutoPausePolicy } from "./auto-pause.ts";
import { Lifecycle } from "../../../schema/api/hooks.ts";
import { stableJson } from "./kube-api.ts";
import type { SandboxObject, SandboxRequest } from "./objects.ts";

/** The policy key of a Sandbox without one. */
const OFF = "off";
/** The lifecycle key of a Sandbox without hooks. */
const EMPTY = "{}";

export class UserRequests {
  readonly #onRequest?: (req: SandboxRequest) => void;
  /** Last user request reported per sandbox (`action@generation`), so each is reported once. */
  readonly #requested = new Map<string, string>();
  /** The auto-pause policy last reported per sandbox (JSON), or the problem last logged. */
  readonly #policies = new Map<string, string>();
  /** The lifecycle hooks last reported per sandbox (JSON), or the refused ones. */
  readonly #hooks = new Map<string, string>();
  /** Sandboxes the agent itself is destroying: their deletes are not the user's. */
  readonly #destroying = new Set<string>();

  readonly #log: (msg: string) => void;
  /** A Warning Event on the Sandbox (best effort). */
  readonly #warn: (o: SandboxObject, reason: string, message: string) => void;

  constructor(onRequest?: (req: SandboxRequest) => void, log: (msg: string) => void = () => {}, warn: (o: SandboxObject, reason: string, message: string) => void = () => {}) {
    this.#onRequest = onRequest;
    this.#log = log;
    this.#warn = warn;
  }

  /** A Sandbox was added or changed (an informer event). */
  seen(o: SandboxObject): void {
    const id = o.metadata?.annotations?.[ANNOTATION.sandboxId];
    if (!id || !this.#onRequest || this.#destroying.has(id)) return;
    const generation = Number(o.metadata?.annotations?.[ANNOTATION.generation] ?? 0);
    let action: SandboxRequest["action"] | undefined;
    if (o.metadata?.deletionTimestamp) action = "kill";
    else {
      const wanted = o.metadata?.annotations?.[ANNOTATION.desiredPaused];
      if (wanted !== undefined && String(Boolean(o.spec.paused)) !== wanted) action = o.spec.paused ? "pause" : "resume";
    }
    this.#autoPause(id, o, generation);
    this.#lifecycle(id, o, generation);
    if (!action) return;
    const key = `${action}@${generation}`;
    if (this.#requested.get(id) === key) return;
    this.#requested.set(id, key);
    this.#onRequest({ sandboxId: id, action, generation });
  }

  /**
   * A Sandbox's probes/autoPausePolicy, reported when it changes (the edge starts its probe). One
   * the edge cannot run is a Warning Event on the Sandbox; it and a removed policy (after one was
   * reported) are reported without a policy, which stops the edge's probe. A policy removed while
   * the agent was down is not seen (the agent only knows the policies it reported itself).
   */
  #autoPause(id: string, o: SandboxObject, generation: number): void {
    if (o.metadata?.deletionTimestamp) return;
    const r = crdAutoPausePolicy(o.spec);
    const had = this.#policies.get(id);
    const key = !r ? OFF : "problem" in r ? `problem:${r.problem}` : stableJson(r.policy);
    if (had === key || (had === undefined && key === OFF)) return;
    this.#policies.set(id, key);
    if (r && "problem" in r) {
      this.#log(`Sandbox ${o.metadata?.name}: auto-pause policy not applied: ${r.problem}`);
      this.#warn(o, EventReason.AutoPausePolicyNotApplied, `auto-pause policy not applied: ${r.problem}`);
    }
    const running = had !== undefined && had !== OFF && !had.startsWith("problem:");
    if (r && !("problem" in r)) this.#onRequest!({ sandboxId: id, action: "autoPause", generation, autoPausePolicy: r.policy });
    else if (running) this.#onRequest!({ sandboxId: id, action: "autoPause", generation });
  }

  /**
   * A Sandbox's own `spec.lifecycle` hooks, reported when they change (the edge runs them before a
   * pause, after a resume, around an upgrade, ahead of the template's); removed, reported as `{}`.
   * Ones the edge cannot take (a hook with both or neither of exec and http) are a Warning Event,
   * and none are sent. Like the policy above, a removal while the agent was down is not seen.
   */
  #lifecycle(id: string, o: SandboxObject, generation: number): void {
    if (o.metadata?.deletionTimestamp) return;
    const given = (o.spec as { lifecycle?: unknown }).lifecycle;
    const parsed = given === undefined || given === null ? { success: true as const, data: {} } : Lifecycle.safeParse(given);
    const had = this.#hooks.get(id);
    const key = parsed.success ? stableJson(parsed.data) : `problem:${stableJson(given)}`;
    if (had === key || (had === undefined && key === EMPTY)) return;
    this.#hooks.set(id, key);
    if (!parsed.success) {
      const why = parsed.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ");
      this.#log(`Sandbox ${o.metadata?.name}: lifecycle not applied: ${why}`);
      return this.#warn(o, EventReason.LifecycleNotApplied, `lifecycle not applied: ${why}`);
    }
    this.#onRequest!({ sandboxId: id, action: "lifecycle", generation, lifecycle: parsed.data });
  }

  /** Runs the agent's own destroy of `id`, during which its Sandbox's delete is not reported. */
  async destroying(id: string, fn: () => Promise<void>): Promise<void> {
    // Not in a finally: a destroy that failed is retried, and its Sandbox's delete stays ours.
    this.#destroying.add(id);
    await fn();
    this.#requested.delete(id);
    this.#destroying.delete(id);
  }
}
