// Request handling: kubectl edits of a Sandbox become requests to the edge. A `spec.paused` that
// differs from what the edge last asked for (the desired-paused annotation), or a delete the agent
// did not make (its finalizer holds the object until the edge confirms), is reported once per
// action and generation; the driver does not act on it until an intent with a newer generation
// arrives (the edge stays the authority).
//
// Any namespace can hold a Sandbox annotated with another team's sandbox id: one outside the
// namespace the agent placed that sandbox in (its intent's team) is ignored with a Warning Event.
// Before the sandbox's intent is known (the first list after a restart) the request is sent with
// the object's namespace and the edge refuses it unless that is the sandbox's team.
//
// A policy or hooks removed while the agent was down leave nothing to compare with: the agent
// knows only what it reported itself. So its first look at each claimed Sandbox made before it
// started reports the Sandbox's state whole, also when empty (`resync`): the edge drops what it
// holds from that Sandbox, and a Sandbox that never had any costs it one cheap request.
import { EventReason } from "../../../schema/crd/conditions.ts";
import { ANNOTATION, LABEL } from "../../../schema/crd/labels.ts";
import { crdAutoPausePolicy } from "./auto-pause.ts";
import { Lifecycle } from "../../../schema/api/hooks.ts";
import { stableJson } from "./kube-api.ts";
import type { SandboxObject, SandboxRequest } from "./objects.ts";

/** The policy key of a Sandbox without one. */
const OFF = "off";
/** The lifecycle key of a Sandbox without hooks. */
const EMPTY = "{}";

type Warn = (namespace: string, o: SandboxObject, reason: string, message: string) => void;
/** A sandbox as one namespace's Sandbox names it; `key` (`namespace/id`) keys what was reported. */
type Target = { id: string; namespace: string; key: string };

export class UserRequests {
  readonly #onRequest?: (req: SandboxRequest) => void;
  /** The namespace the agent placed a sandbox in (undefined: its intent is not known yet). */
  readonly #placedIn: (id: string) => string | undefined;
  /** Last user request reported per `namespace/sandbox` (`action@generation`), so each is reported once. */
  readonly #requested = new Map<string, string>();
  /** The auto-pause policy last reported per `namespace/sandbox` (JSON), or the problem last logged. */
  readonly #policies = new Map<string, string>();
  /** The lifecycle hooks last reported per `namespace/sandbox` (JSON), or the refused ones. */
  readonly #hooks = new Map<string, string>();
  /** Sandboxes the agent itself is destroying: their deletes are not the user's. */
  readonly #destroying = new Set<string>();

  readonly #log: (msg: string) => void;
  /** A Warning Event on the Sandbox in `namespace` (best effort). */
  readonly #warn: Warn;
  /** Foreign Sandboxes already warned about (`namespace/uid`). */
  readonly #foreign = new Set<string>();
  /** When this agent started (ms): older Sandboxes may have lost a policy or hooks meanwhile. */
  readonly #startedAt: number;

  constructor(
    onRequest?: (req: SandboxRequest) => void,
    log: (msg: string) => void = () => {},
    warn: Warn = () => {},
    placedIn: (id: string) => string | undefined = () => undefined,
    startedAt: number = Date.now(),
  ) {
    this.#onRequest = onRequest;
    this.#startedAt = startedAt;
    this.#placedIn = placedIn;
    this.#log = log;
    this.#warn = warn;
  }

  /**
   * A Sandbox in `namespace` was added or changed (an informer event). False: it claims a sandbox
   * the agent placed in another namespace, and nothing about it is the sandbox's.
   */
  seen(o: SandboxObject, namespace: string): boolean {
    const id = o.metadata?.annotations?.[ANNOTATION.sandboxId];
    if (!id) return true;
    const placed = this.#placedIn(id);
    if (placed !== undefined && placed !== namespace) {
      this.#refuseForeign(o, namespace, id, placed);
      return false;
    }
    if (!this.#onRequest || this.#destroying.has(id)) return true;
    const generation = Number(o.metadata?.annotations?.[ANNOTATION.generation] ?? 0);
    let action: SandboxRequest["action"] | undefined;
    if (o.metadata?.deletionTimestamp) action = "kill";
    else {
      const wanted = o.metadata?.annotations?.[ANNOTATION.desiredPaused];
      if (wanted !== undefined && String(Boolean(o.spec.paused)) !== wanted) action = o.spec.paused ? "pause" : "resume";
    }
    const at = { id, namespace, key: `${namespace}/${id}` };
    const resync = this.#older(o);
    this.#autoPause(at, o, generation, resync);
    this.#lifecycle(at, o, generation, resync);
    if (!action) return true;
    const key = `${action}@${generation}`;
    if (this.#requested.get(at.key) === key) return true;
    this.#requested.set(at.key, key);
    this.#onRequest({ sandboxId: id, namespace, action, generation });
    return true;
  }

  /** A claimed Sandbox made before this agent started (warm members have no policy or hooks). */
  #older(o: SandboxObject): boolean {
    const made = Date.parse(String(o.metadata?.creationTimestamp ?? ""));
    return made < this.#startedAt && o.metadata?.labels?.[LABEL.claimed] !== "false";
  }

  /** Logs and warns once per object (by uid) about a Sandbox claiming another namespace's sandbox. */
  #refuseForeign(o: SandboxObject, namespace: string, id: string, placed: string): void {
    const once = `${namespace}/${o.metadata?.uid ?? o.metadata?.name}`;
    if (this.#foreign.has(once)) return;
    this.#foreign.add(once);
    const why = `annotation ${ANNOTATION.sandboxId}=${id} names a sandbox of namespace ${placed}; this Sandbox is ignored`;
    this.#log(`Sandbox ${namespace}/${o.metadata?.name}: ${why}`);
    this.#warn(namespace, o, EventReason.ForeignSandboxId, why);
  }

  /**
   * A Sandbox's probes/autoPausePolicy, reported when it changes (the edge starts its probe). One
   * the edge cannot run is a Warning Event on the Sandbox; it and a removed policy (after one was
   * reported) are reported without a policy, which stops the edge's probe. The first look at an
   * older Sandbox without one reports none as a `resync` (removed while the agent was down?).
   */
  #autoPause({ id, namespace, key: at }: Target, o: SandboxObject, generation: number, resync: boolean): void {
    if (o.metadata?.deletionTimestamp) return;
    const r = crdAutoPausePolicy(o.spec);
    const had = this.#policies.get(at);
    const key = !r ? OFF : "problem" in r ? `problem:${r.problem}` : stableJson(r.policy);
    if (had === key) return;
    this.#policies.set(at, key);
    if (had === undefined && key === OFF) {
      if (resync) this.#onRequest!({ sandboxId: id, namespace, action: "autoPause", generation, resync: true });
      return;
    }
    if (r && "problem" in r) {
      this.#log(`Sandbox ${o.metadata?.name}: auto-pause policy not applied: ${r.problem}`);
      this.#warn(namespace, o, EventReason.AutoPausePolicyNotApplied, `auto-pause policy not applied: ${r.problem}`);
    }
    const running = had !== undefined && had !== OFF && !had.startsWith("problem:");
    if (r && !("problem" in r)) this.#onRequest!({ sandboxId: id, namespace, action: "autoPause", generation, autoPausePolicy: r.policy });
    else if (running) this.#onRequest!({ sandboxId: id, namespace, action: "autoPause", generation });
    // A policy it cannot run, first seen: one the edge ran may be gone meanwhile.
    else if (had === undefined && resync) this.#onRequest!({ sandboxId: id, namespace, action: "autoPause", generation, resync: true });
  }

  /**
   * A Sandbox's own `spec.lifecycle` hooks, reported when they change (the edge runs them before a
   * pause, after a resume, around an upgrade, ahead of the template's); removed, reported as `{}`.
   * Ones the edge cannot take (a hook with both or neither of exec and http) are a Warning Event,
   * and none are sent. The first look at an older Sandbox without hooks reports `{}` as a `resync`.
   */
  #lifecycle({ id, namespace, key: at }: Target, o: SandboxObject, generation: number, resync: boolean): void {
    if (o.metadata?.deletionTimestamp) return;
    const given = (o.spec as { lifecycle?: unknown }).lifecycle;
    const parsed = given === undefined || given === null ? { success: true as const, data: {} } : Lifecycle.safeParse(given);
    const had = this.#hooks.get(at);
    const key = parsed.success ? stableJson(parsed.data) : `problem:${stableJson(given)}`;
    if (had === key) return;
    this.#hooks.set(at, key);
    if (had === undefined && key === EMPTY) {
      if (resync) this.#onRequest!({ sandboxId: id, namespace, action: "lifecycle", generation, lifecycle: {}, resync: true });
      return;
    }
    if (!parsed.success) {
      const why = parsed.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ");
      this.#log(`Sandbox ${o.metadata?.name}: lifecycle not applied: ${why}`);
      return this.#warn(namespace, o, EventReason.LifecycleNotApplied, `lifecycle not applied: ${why}`);
    }
    this.#onRequest!({ sandboxId: id, namespace, action: "lifecycle", generation, lifecycle: parsed.data });
  }

  /** Runs the agent's own destroy of `id`, during which its Sandbox's delete is not reported. */
  async destroying(id: string, fn: () => Promise<void>): Promise<void> {
    // Not in a finally: a destroy that failed is retried, and its Sandbox's delete stays ours.
    this.#destroying.add(id);
    await fn();
    for (const k of this.#requested.keys()) if (k.slice(k.indexOf("/") + 1) === id) this.#requested.delete(k);
    this.#destroying.delete(id);
  }
}
