// Request handling: kubectl edits of a Sandbox become requests to the edge. A `spec.paused` that
// differs from what the edge last asked for (the desired-paused annotation), or a delete the agent
// did not make (its finalizer holds the object until the edge confirms), is reported once per
// action and generation; the driver does not act on it until an intent with a newer generation
// arrives (the edge stays the authority).
import { ANNOTATION } from "../../../schema/crd/labels.ts";
import type { SandboxObject, SandboxRequest } from "./objects.ts";

export class UserRequests {
  readonly #onRequest?: (req: SandboxRequest) => void;
  /** Last user request reported per sandbox (`action@generation`), so each is reported once. */
  readonly #requested = new Map<string, string>();
  /** Sandboxes the agent itself is destroying: their deletes are not the user's. */
  readonly #destroying = new Set<string>();

  constructor(onRequest?: (req: SandboxRequest) => void) {
    this.#onRequest = onRequest;
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
    if (!action) return;
    const key = `${action}@${generation}`;
    if (this.#requested.get(id) === key) return;
    this.#requested.set(id, key);
    this.#onRequest({ sandboxId: id, action, generation });
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
