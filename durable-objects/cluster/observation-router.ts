// Which sandbox observations ClusterDO routes to their groups, deterministic, no I/O: the shell
// feeds it the awaited acks and the observations, and sends what it hands back.
//
// One kind is not routed: after an `applied` ack of a running intent that its owner awaited
// (`enqueue(…, {awaitAckMs, knownEndpoint})`), the agent's next observation of that generation
// says Running, ready, at the endpoint the owner passed, which the ack already told it. Two guards
// keep the drop exact: no confirmation if any observation of the sandbox was routed while the
// enqueue waited (its endpoint may have moved and come back), and a dropped observation is held
// until another one of the sandbox is routed, so a group that lost the enqueue's answer and
// re-sends the intent still gets it.
import type { AckItem, Intent, Observation } from "../../schema/protocol/index.ts";

/** Bound on remembered confirmations and held observations. */
export const MAX_CONFIRMED = 10_000;

export class ObservationRouter {
  /** Applied acks their owner awaited, by sandbox: the observation repeating one is not routed. */
  private readonly confirmed = new Map<string, { generation: number; endpoint: string }>();
  /**
   * Sandboxes with an awaited enqueue (knownEndpoint) in flight → whether an observation of them
   * was routed meanwhile: then the owner's endpoint may have moved, and the ack confirms nothing.
   */
  private readonly watching = new Map<string, boolean>();
  /** Observations not routed as repeats of an ack, until a re-sent intent asks for them. */
  private readonly held = new Map<string, Observation>();
  private readonly max: number;

  constructor(max = MAX_CONFIRMED) {
    this.max = max;
  }

  /** An awaited enqueue of these sandboxes (with the owner's known endpoint) starts. */
  watch(sandboxIds: string[]): void {
    for (const id of sandboxIds) this.watching.set(id, false);
  }

  /** The awaited enqueue answered. */
  unwatch(sandboxIds: string[]): void {
    for (const id of sandboxIds) this.watching.delete(id);
  }

  /**
   * An ack the owner awaited, with the endpoint it knows (JSON) and whether ClusterDO still wants
   * the sandbox running: an applied one, with nothing of the sandbox routed meanwhile, is remembered.
   */
  acked(a: AckItem, knownEndpoint: string, wantsRunning: boolean): void {
    if (a.result !== "applied" || this.watching.get(a.sandboxId) !== false || !wantsRunning) return;
    // Bounded: an agent that never observes (or a lost session) must not grow this forever.
    if (this.confirmed.size >= this.max) this.confirmed.clear();
    this.confirmed.set(a.sandboxId, { generation: a.generation, endpoint: knownEndpoint });
  }

  /** The observations (in order) to route to sandbox groups; repeats of an ack are held instead. */
  route(observations: Observation[]): Observation[] {
    const out: Observation[] = [];
    for (const o of observations) {
      if (this.repeatsAck(o)) continue;
      // On its way to its group: it voids a pending confirmation and a held observation.
      if (this.watching.has(o.sandboxId)) this.watching.set(o.sandboxId, true);
      this.held.delete(o.sandboxId);
      out.push(o);
    }
    return out;
  }

  /**
   * A group re-sends an intent ClusterDO already holds (seq 0) when it lost the enqueue's answer
   * (its instance died, the reply was lost): it never applied that ack, so the observation held
   * back as the ack's repeat goes to it after all. Returns those observations.
   */
  resent(intents: Intent[], seqs: number[]): Observation[] {
    if (this.held.size === 0) return [];
    const out: Observation[] = [];
    intents.forEach((i, k) => {
      const h = seqs[k] === 0 && i.owner.kind === "sandbox" ? this.held.get(i.sandboxId) : undefined;
      if (!h || h.generation < i.generation) return;
      this.held.delete(i.sandboxId);
      out.push(h);
    });
    return out;
  }

  /** Forgets the confirmations (the state they were made against was reloaded). */
  reset(): void {
    this.confirmed.clear();
  }

  /** Whether an observation only repeats an applied ack its owner awaited; each is used once. */
  private repeatsAck(obs: Observation): boolean {
    const c = this.confirmed.get(obs.sandboxId);
    if (!c || obs.generation < c.generation) return false;
    this.confirmed.delete(obs.sandboxId);
    // One with conditions tells more than the ack did (the driver's own: a holder refiltered).
    const repeats = obs.generation === c.generation && obs.phase === "Running" && obs.ready && JSON.stringify(obs.endpoint ?? null) === c.endpoint && !obs.conditions?.length;
    if (repeats) {
      if (this.held.size >= this.max) this.held.clear();
      this.held.set(obs.sandboxId, obs);
    }
    return repeats;
  }
}
