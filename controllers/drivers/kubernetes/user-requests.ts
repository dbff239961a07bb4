// Request handling: kubectl edits of a Sandbox become requests to the edge. A `spec.paused` that
// differs from what the edge last asked for (the desired-paused annotation), or a delete the agent
// did not make (its finalizer holds the object until the edge confirms), is reported once per
// action and generation; the driver does not act on it until an intent with a newer generation
// arrives (the edge stays the authority).
import { ANNOTATION } from "../../../schema/crd/labels.ts";
import { crdAutoPausePolicy } from "./auto-pause.ts";
import { stableJson } from "./kube-api.ts";
import type { SandboxObject, SandboxRequest } from "./objects.ts";

export class UserRequests {
  readonly #onRequest?: (req: SandboxRequest) => void;
  /** Last user request reported per sandbox (`action@generation`), so each is reported once. */
  readonly #requested = new Map<string, string>();
  /** The auto-pause policy last reported per sandbox (JSON), or the problem last logged. */
  readonly #policies = new Map<string, string>();
  /** Sandboxes the agent itself is destroying: their deletes are not the user's. */
  readonly #destroying = new Set<string>();

  readonly #log: (msg: string) => void;

  constructor(onRequest?: (req: SandboxRequest) => void, log: (msg: string) => void = () => {}) {
    this.#onRequest = onRequest;
    this.#log = log;
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
    if (!action) return;
    const key = `${action}@${generation}`;
    if (this.#requested.get(id) === key) return;
    this.#requested.set(id, key);
    this.#onRequest({ sandboxId: id, action, generation });
  }

  /** A Sandbox's probes/autoPausePolicy, reported when it changes (the edge starts its probe);
   * one the edge cannot run is logged once. Removing the policy is not reported (not supported). */
  #autoPause(id: string, o: SandboxObject, generation: number): void {
    if (o.metadata?.deletionTimestamp) return;
    const r = crdAutoPausePolicy(o.spec);
    if (!r) return;
    const key = "problem" in r ? `problem:${r.problem}` : stableJson(r.policy);
    if (this.#policies.get(id) === key) return;
    this.#policies.set(id, key);
    if ("problem" in r) return this.#log(`Sandbox ${o.metadata?.name}: auto-pause policy not applied: ${r.problem}`);
    this.#onRequest!({ sandboxId: id, action: "autoPause", generation, autoPausePolicy: r.policy });
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
