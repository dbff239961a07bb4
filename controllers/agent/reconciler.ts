// Level-based reconciliation of one sandbox at a time: read the newest accepted intent and what
// the driver sees, act on the difference, register the sandbox with the embedded runtime, and
// report what is there. Running it twice is harmless; it never acts on an event, only on state.
import { isTerminal, type Driver, type DesiredSandbox, type SandboxObservation } from "../drivers/driver.ts";
import type { Runtime } from "../runtime/runtime.ts";
import type { Intent, ObservationInput, ObservedPhase } from "../../schema/protocol/index.ts";
import type { IntentStore } from "./intent-store.ts";
import { WorkQueue, type Backoff, type WorkResult } from "../lib/work-queue.ts";
import { logger } from "../lib/log.ts";
import type { Context } from "@opentelemetry/api";
import { parentFrom, RUNTIME_SCOPE, traceIdOf, tracingOn, withSpan } from "../lib/tracing.ts";
import { timeStep } from "../lib/metrics.ts";
import type { StartCommands } from "./start-commands.ts";
import { boundedPost } from "../lib/bounded-post.ts";
import { randomBytes } from "node:crypto";

const LOG = logger("reconciler");

export interface ReconcilerDeps {
  store: IntentStore;
  driver: Driver;
  runtime: Runtime;
  /** Sends an observation to the edge (buffered by the link while disconnected). */
  report(obs: ObservationInput): void;
  /** Called once a generation has been acted on: converged (`applied`) or still converging;
   * `snapshotError` when the snapshot it asked for could not be taken. */
  settled(id: string, generation: number, result: "applied" | "accepted", message?: string, snapshotError?: SnapshotError): void;
  now?: () => number;
  /** Retry spacing of failed passes (default: the work queue's). */
  backoff?: Backoff;
  /** Where a failed pass is logged (default: the work queue's logger). */
  onError?: (id: string, err: unknown) => void;
  /** Runs templates' start and ready commands (drivers with a host view); absent: none run. */
  starts?: StartCommands;
}

/** How long a sandbox's ready command may take: a warm member has no client waiting; a sandbox of
 * its own is being created, so it fails before the edge's create wait (10 s) gives up on it. */
export function readyTimeoutMs(intent: Intent): number {
  return intent.owner.kind === "pool" ? 120_000 : 8_000;
}

/** The Failed reason of a sandbox whose template's ready command never passed. */
export const NOT_READY_REASON = "ReadyCommandFailed";

/** Why a snapshot an intent asked for was not taken (CamelCase reason, e.g. `Unsupported`). */
export interface SnapshotError {
  reason: string;
  message: string;
}

/** The Ready reason while a transient failure of `driver.ensure` is being retried. */
export const RETRY_REASON = "ReconcileError";

/** The endpoint the ingress understands for sandboxes whose runtime lives in this process. */
export const EMBEDDED_ENDPOINT = "embedded:";

function phaseOf(obs: SandboxObservation | undefined): ObservedPhase {
  if (!obs) return "Deleted";
  if (obs.phase === "Stopped") return "Paused";
  return obs.phase;
}

export function desiredFor(intent: Intent): DesiredSandbox {
  const t = intent.template!;
  return {
    id: intent.sandboxId,
    generation: intent.generation,
    template: t.image,
    revision: t.revision,
    state: intent.desired.state === "paused" ? "Paused" : "Running",
    pauseStrategy: intent.desired.pauseStrategy,
    resources: { cpuCount: t.resources.cpuCount, memoryMB: t.resources.memoryMB, diskSizeMB: t.resources.diskSizeMB },
    allowInternetAccess: intent.allowInternetAccess,
    egress: intent.egress,
    networkRules: intent.networkRules,
    pool: t.id,
    ...(t.codeInterpreter ? { codeInterpreter: true } : {}),
    ...(t.nestedUserNamespaces ? { nestedUserNamespaces: true } : {}),
    claimed: intent.owner.kind !== "pool",
    namespace: intent.team ?? undefined,
    labels: intent.labels,
    annotations: intent.annotations,
    inplaceUpdate: intent.inplaceUpdate,
    restoreFrom: intent.restoreFrom,
    ...(intent.restoreFs ? { restoreFs: intent.restoreFs } : {}),
  };
}

/** How much of a runtime's refusal of /init the error (and the sandbox's Ready message) carries. */
export const INIT_ERROR_MAX_BYTES = 2048;

/** POST /init on a runtime that lives elsewhere (a pod): token, env, default user and workdir.
 * A redirect is an answer, never followed: the tenant's code can answer on the runtime's port,
 * and following would POST the sandbox's token and env, from the agent's network position, to an
 * address it picked (as `boundedGet` does for the pulls). For the same reason a refusal's body is
 * read only up to INIT_ERROR_MAX_BYTES. Through node:http with kept connections (`boundedPost`),
 * not fetch: it is one request per claim. Exported for its unit test. */
export async function initRemote(endpoint: string, intent: Intent, held: (string | undefined)[] = []): Promise<void> {
  // A warm member keeps the token its pod was made with (the runtime is never open); a claim sets
  // its own in place of it, and an empty one when the sandbox was made without a token.
  const warm = intent.owner?.kind === "pool";
  const body = {
    accessToken: warm ? undefined : (intent.envdAccessToken ?? ""),
    envVars: intent.envVars,
    defaultUser: intent.template?.user,
    defaultWorkdir: intent.template?.workdir,
    timestamp: new Date(intent.issuedAt).toISOString(),
  };
  // The token the runtime holds: the driver's guess first (the pod's own before its claim's /init,
  // the claim's after), then the claim's (an /init this agent made before it restarted).
  const tokens = [...new Set([...held, intent.envdAccessToken ?? undefined].filter((t): t is string => !!t))];
  for (let i = 0; ; i++) {
    // Named like every request the ingress forwards, so a runtime serving several sandboxes routes it.
    const headers: Record<string, string> = { "content-type": "application/json", "e2b-sandbox-id": intent.sandboxId };
    if (tokens[i]) headers["x-access-token"] = tokens[i]!;
    const res = await boundedPost(new URL(`${endpoint}/init`), headers, JSON.stringify(body), { maxBytes: INIT_ERROR_MAX_BYTES, timeoutMs: 5000 });
    if (res.status === 401 && i + 1 < tokens.length) continue;
    if (res.status < 200 || res.status > 299) throw new Error(`runtime /init at ${endpoint}: HTTP ${res.status} ${res.text}`);
    return;
  }
}

/** Whether the driver's sandbox is where the intent asks: running ready, or paused (frozen, or
 * stopped with its pod gone, whatever else its report says, e.g. a restore pending on resume). */
export function isConverged(intent: Intent, phase: SandboxObservation["phase"], ready: boolean): boolean {
  return intent.desired.state === "running" ? ready : phase === "Paused" || phase === "Stopped";
}

/** Pending sandboxes are looked at again soon (250 ms), or when the driver says something can
 * change (`retryAfterMs`: a restart's backoff, up to a minute of nothing to do); converged and
 * failed ones wait for the next intent (or a driver event), so a sandbox resting paused costs the
 * agent nothing. */
export function requeueFor(intent: Intent, phase: SandboxObservation["phase"], ready: boolean, retryAfterMs?: number): { requeueAfterMs: number } | undefined {
  return isConverged(intent, phase, ready) || phase === "Failed" ? undefined : { requeueAfterMs: retryAfterMs ?? 250 };
}

/** How long after the last claim (any urgent pass) a pool's refill still waits: a client creating
 * sandboxes one after another sends its next claim within it, and a loaded edge delivers a burst's
 * claims in flushes hundreds of ms apart (WorkQueue, "Claims before refills"). A judgment, not a
 * measured optimum: 200 and 500 ms gave the same figures (bench/kube.ts, two runs). */
export const REFILL_YIELD_LINGER_MS = 500;

/** Whether a pool member's pass may wait for claims: only while its pool keeps at least half its
 * members ready, so a sustained claim rate cannot drain it into cold creates (below that the refill
 * runs beside the claims, as it always did). */
export function refillMayWait(ready: number, members: number): boolean {
  return ready > 0 && 2 * ready >= members;
}

export class Reconciler {
  readonly queue: WorkQueue;
  readonly #d: ReconcilerDeps;
  readonly #now: () => number;
  /** The generation whose token and env the runtime holds for each registered sandbox. */
  readonly #configured = new Map<string, number>();
  /** A snapshot that failed, by sandbox, until the ack of its generation carries it. */
  readonly #snapshotErrors = new Map<string, SnapshotError & { generation: number }>();
  /** Where the runtime of each sandbox lives, for drivers without a host view. */
  readonly #endpoints = new Map<string, string>();

  /** What was last reported per sandbox (generation, phase, readiness, endpoint, reason). */
  readonly #reported = new Map<string, string>();
  /** The trace context of each sandbox's newest intent, until it is acted on: its spans' parent
   * (tracing on) and, on or off, the request id its log lines carry (the edge hands it on untraced). */
  readonly #traces = new Map<string, string>();
  /** The traceparent each pass under way started with (undefined: none), by sandbox. */
  readonly #inPass = new Map<string, string | undefined>();
  /** The phase last reported per sandbox and whether a pool owns it: the metrics' sandboxes by state. */
  readonly #phases = new Map<string, { phase: ObservedPhase; pool: boolean }>();
  /** When this reconciler started: a sandbox created before it was adopted (its start command runs). */
  readonly #bootedAt: number;
  /** Per sandbox, the incarnation of its processes (driver observations) this reconciler saw first
   * and last: a change means they were all replaced (a Stop pause's resume, an update ops
   * recreate), and its start command runs again in the new ones, adopted or not. */
  readonly #incarnations = new Map<string, { first: string; last: string }>();
  /** Each pool member's pool (template id), and per pool its members and those last reported
   * ready: the stock `refillMayWait` judges. A claim or delete takes the member out at its offer. */
  readonly #poolOf = new Map<string, string>();
  readonly #poolMembers = new Map<string, Set<string>>();
  readonly #poolReady = new Map<string, Set<string>>();

  /** Sandboxes by last reported phase and owner (`pool` or `sandbox`), for the metrics gauge. */
  *phaseCounts(): Iterable<[{ state: string; owner: string }, number]> {
    const counts = new Map<string, number>();
    for (const { phase, pool } of this.#phases.values()) {
      const key = `${phase}|${pool ? "pool" : "sandbox"}`;
      counts.set(key, (counts.get(key) ?? 0) + 1);
    }
    for (const [key, n] of counts) {
      const [state, owner] = key.split("|") as [string, string];
      yield [{ state, owner }, n];
    }
  }

  /** The trace id (the edge's request id) of the intent a sandbox is being brought to, for its log lines. */
  traceIdOf(id: string): string | undefined {
    // A pass under way speaks for the intent it started with: a newer one offered meanwhile (a
    // kill sent as soon as the pause was answered) is not what its lines are about.
    const trace = this.#inPass.has(id) ? this.#inPass.get(id) : this.#traces.get(id);
    return trace?.slice(3, 35);
  }

  /** The remote runtime URL of a sandbox (undefined: the embedded runtime serves it). */
  endpoint(id: string): string | undefined {
    return this.#endpoints.get(id);
  }

  constructor(deps: ReconcilerDeps) {
    this.#d = deps;
    this.#now = deps.now ?? Date.now;
    this.#bootedAt = Date.now();
    // Where the runtime lives in a pod, a claim's pass is mostly waiting (the driver answers a warm
    // member from its cache, then one HTTP /init), so more passes run at once
    // (docs/decisions/reconcile-concurrency.md).
    // Pool members' passes (a refill's create, its pod coming up) wait while claims run, as long
    // as their pool has stock (docs/ARCHITECTURE.md, "Claims before refills").
    this.queue = new WorkQueue({
      name: "sandbox",
      work: (id) => this.reconcile(id),
      urgentConcurrency: deps.driver.capabilities.hostView ? undefined : 64,
      backoff: deps.backoff,
      onError: deps.onError,
      yields: (id) => this.#refillMayWait(id),
      yieldLingerMs: REFILL_YIELD_LINGER_MS,
    });
  }

  #refillMayWait(id: string): boolean {
    const pool = this.#poolOf.get(id);
    if (pool === undefined) return false;
    return refillMayWait(this.#poolReady.get(pool)?.size ?? 0, this.#poolMembers.get(pool)?.size ?? 0);
  }

  /** Keeps the pools' stock as intents change owner: a pool's running member is in it, a claimed
   * or deleted one leaves it at once. True for a member new to its pool (a refill, a scale-up). */
  #trackPool(intent: Intent): boolean {
    const id = intent.sandboxId;
    const pool = intent.owner.kind === "pool" && intent.desired.state !== "deleted" ? intent.template?.id : undefined;
    const was = this.#poolOf.get(id);
    if (was === pool) return false;
    if (was !== undefined) {
      this.#poolOf.delete(id);
      for (const sets of [this.#poolMembers, this.#poolReady]) {
        const set = sets.get(was);
        set?.delete(id);
        if (set?.size === 0) sets.delete(was);
      }
    }
    if (pool === undefined) return false;
    this.#poolOf.set(id, pool);
    const members = this.#poolMembers.get(pool) ?? new Set<string>();
    members.add(id);
    this.#poolMembers.set(pool, members);
    return was === undefined;
  }

  /** Accepts an intent if it is newer than the stored one and schedules the sandbox. */
  offer(intent: Intent, traceparent?: string): "stale" | "queued" {
    if (!this.#d.store.offer(intent)) {
      // The edge re-sent what we have: it may have lost our observation, so the next one goes out.
      this.#reported.delete(intent.sandboxId);
      // "stale" is acked at once: what is acked is on disk.
      this.#d.store.durable(intent.sandboxId);
      return "stale";
    }
    if (traceparent) this.#traces.set(intent.sandboxId, traceparent);
    const refill = this.#trackPool(intent);
    // A sandbox's own intents (claim, pause, resume) have a client waiting on them; the pool's
    // (warming members up, scaling down) do not, and must not hold them up. Nor does a delete: a
    // kill is answered without waiting for the agent, and a destroy (cgroup removal, unmounts) is
    // the slowest pass there is: in the urgent lane, claims waited behind kills (issue 16).
    // A new pool member is the echo of a claim (or a scale-up): the edge's pool sends a claim's
    // refill before the claim's own intent reaches us, so its first pass waits out the linger
    // from now as well (WorkQueue `echo`); after a lull the first refills of a burst otherwise
    // started ahead of the burst's claims.
    this.queue.add(intent.sandboxId, { urgent: intent.owner.kind === "sandbox" && intent.desired.state !== "deleted", echo: refill });
    return "queued";
  }

  /** One pass for one sandbox; a span of the intent's trace while it has one. */
  reconcile(id: string): Promise<WorkResult> {
    const traced = this.#traces.get(id);
    this.#inPass.set(id, traced);
    return this.#traced(id, traced).finally(() => this.#inPass.delete(id));
  }

  #traced(id: string, traced: string | undefined): Promise<WorkResult> {
    if (!traced) return this.#pass(id);
    // Converged (or final): later passes are not this request's. A newer intent offered during
    // the pass (a claim arriving while the pool's create runs) brought its own trace: it stays.
    const done = (out: WorkResult) => {
      if (out === undefined && this.#traces.get(id) === traced) this.#traces.delete(id);
      return out;
    };
    if (!tracingOn()) return this.#pass(id).then(done);
    const intent = this.#d.store.get(id);
    const attrs = { "sandbox.id": id, "sandbox.generation": intent?.generation ?? 0, "sandbox.desired": intent?.desired.state ?? "deleted", "agent.driver": this.#d.driver.name };
    return withSpan("reconcile", parentFrom(traced), attrs, async (ctx) => done(await this.#pass(id, ctx)));
  }

  async #pass(id: string, ctx = parentFrom(undefined)): Promise<WorkResult> {
    const { store, driver } = this.#d;
    const intent = store.get(id);

    if (!intent || intent.desired.state === "deleted") {
      // Its file goes first: an agent that dies while destroying must not build it again.
      if (intent) store.durable(id);
      this.#unregister(id);
      this.#incarnations.delete(id);
      await withSpan("driver.destroy", ctx, { "sandbox.id": id }, () => timeStep("destroy", () => driver.destroy(id)));
      if (intent) {
        store.forget(id);
        this.#d.settled(id, intent.generation, "applied");
      }
      this.#reported.delete(id);
      if (this.#phases.delete(id)) LOG.info("phase", { sandboxId: id, generation: intent?.generation ?? 0, phase: "Deleted" });
      this.#d.report({ sandboxId: id, generation: intent?.generation ?? 0, phase: "Deleted", ready: false, observedAt: this.#now() });
      return;
    }

    // On disk before the driver acts on it, not only before its ack: a generation the cluster
    // reflects must be the one a restarted agent holds. A claimed sandbox's recreate (update ops)
    // is acked only once its new pod is ready; an agent restarting in between read the previous
    // generation back, put the old template on again, and the redelivered intent replaced the pod
    // a third time. The write happens once per generation either way (durable is a no-op after).
    store.durable(id);
    let obs: SandboxObservation;
    try {
      // A runtime in a pod is reached by the driver too (freeze/thaw): it needs the token. Drivers
      // with a host view never get it, so it is not written into their records.
      const desired = driver.capabilities.hostView ? desiredFor(intent) : { ...desiredFor(intent), accessToken: intent.envdAccessToken };
      obs = await withSpan("driver.ensure", ctx, { "sandbox.id": id, "sandbox.state": desired.state }, () => timeStep("ensure", () => driver.ensure(desired)));
    } catch (err) {
      return this.#ensureFailed(intent, err);
    }

    if (intent.snapshot && store.get(id)?.snapshot) await this.#snapshot(intent, obs, ctx);
    if (!driver.capabilities.hostView) return this.#reconcileRemote(intent, obs, ctx);

    // Replaced within this one ensure (an update ops recreate): what ran in its old processes
    // went with them (the start command, process handles), as after a Stop pause.
    if (this.#replaced(id, obs)) this.#unregister(id, true);
    if (obs.phase === "Running") await withSpan("runtime.register", ctx, { "sandbox.id": id }, () => timeStep("register", () => this.#register(intent)), RUNTIME_SCOPE);
    // Stop-paused, starting again, failed: cut its streams. What it carried (code contexts) stays
    // for its next registration: only its deletion (above) drops that.
    else if (obs.phase !== "Paused") this.#unregister(id, true);
    // A frozen sandbox stays registered: its processes and open streams resume on thaw.

    let ready = obs.phase === "Running" && this.#configured.get(id) === intent.generation;
    const start = ready ? this.#startStatus(intent, obs) : undefined;
    if (start?.state === "starting") ready = false;
    const notReady = start?.state === "failed" ? start.message : undefined;
    if (notReady) ready = false;
    this.#report(
      {
      sandboxId: id,
      generation: intent.generation,
      phase: notReady ? "Failed" : phaseOf(obs),
      ready,
      endpoint: { runtime: EMBEDDED_ENDPOINT },
      address: obs.address,
      revision: intent.template?.revision,
      reason: notReady ? NOT_READY_REASON : obs.phase === "Failed" ? "SandboxFailed" : undefined,
      message: notReady ?? obs.message,
      observedAt: this.#now(),
      startedAt: Date.parse(obs.createdAt) || undefined,
      ...(obs.conditions ? { conditions: obs.conditions } : {}),
      },
      traceIdOf(ctx),
    );
    const converged = isConverged(intent, obs.phase, ready);
    this.#settle(intent, converged, notReady ? "Failed" : obs.phase, notReady ?? obs.message);
    return notReady ? undefined : requeueFor(intent, obs.phase, ready, obs.retryAfterMs);
  }

  /**
   * `driver.ensure` threw. A TerminalError is final for this generation: phase Failed with its
   * reason, acked, not retried (the next intent is). Anything else is transient: the sandbox is
   * kept, the edge sees `Ready=False` (reason ReconcileError, the error and the retry in the
   * message) and the work queue tries again after its backoff. A create waiting on this sandbox
   * is not acked meanwhile, so its bound decides (ARCHITECTURE.md, "Error model").
   */
  async #ensureFailed(intent: Intent, err: unknown): Promise<WorkResult> {
    const id = intent.sandboxId;
    const base = { sandboxId: id, generation: intent.generation, ready: false, revision: intent.template?.revision, observedAt: this.#now() };
    if (isTerminal(err)) {
      const condition = { type: "Ready", status: "False" as const, reason: err.reason, message: err.message, lastTransitionTime: this.#now() };
      this.#report({ ...base, phase: "Failed", reason: err.reason, message: err.message, conditions: [condition] });
      this.#ack(id, intent.generation, "accepted", err.message);
      return;
    }
    const attempt = this.queue.failures(id) + 1;
    const afterMs = this.queue.retryDelay(attempt);
    const message = `${(err as Error)?.message ?? String(err)} (attempt ${attempt}, retrying in ${afterMs} ms)`;
    const seen = await this.#d.driver.observe(id).catch(() => undefined);
    // What is there stays what it is (a running sandbox whose update failed still runs); a sandbox
    // not made yet, or broken on the way, is still Pending: it is being retried, not failed.
    const phase = !seen || seen.phase === "Failed" ? "Pending" : phaseOf(seen);
    const condition = { type: "Ready", status: "False" as const, reason: RETRY_REASON, message, lastTransitionTime: this.#now() };
    this.#report({ ...base, phase, reason: RETRY_REASON, message, conditions: [condition, ...(seen?.conditions ?? [])] });
    this.#settle(intent, false, "Pending", message);
    throw err;
  }

  /**
   * Takes the snapshot the intent asks for (the driver freezes a running sandbox for the copy and
   * puts it back). Taking one that exists returns it, so a second pass is harmless. A failure is
   * not retried: the generation's ack carries it, and the edge answers the client that asked;
   * the sandbox itself is unchanged.
   */
  async #snapshot(intent: Intent, obs: SandboxObservation, ctx = parentFrom(undefined)): Promise<void> {
    const id = intent.sandboxId;
    if (obs.phase === "Pending" || obs.phase === "Failed") return; // not there yet: next pass
    try {
      const snapshotId = intent.snapshot!.id;
      await withSpan("driver.snapshotFs", ctx, { "sandbox.id": id, "snapshot.id": snapshotId }, () => timeStep("snapshotFs", () => this.#d.driver.snapshotFs(id, snapshotId)));
    } catch (err) {
      const message = (err as Error)?.message ?? String(err);
      LOG.warn("snapshot failed", { sandboxId: id, snapshotId: intent.snapshot!.id, error: message });
      this.#snapshotErrors.set(id, { generation: intent.generation, reason: isTerminal(err) ? err.reason : "SnapshotFailed", message });
    }
    this.#d.store.snapshotDone(id, intent.generation);
  }

  /** The remote-runtime half of reconcile: re-init the pod's runtime once per generation. */
  async #reconcileRemote(intent: Intent, obs: SandboxObservation, ctx: Context): Promise<WorkResult> {
    const id = intent.sandboxId;
    let ready = false;
    let reason = obs.reason;
    let message = obs.message;
    if (obs.phase === "Running" && obs.ready && obs.endpoint) {
      this.#endpoints.set(id, obs.endpoint);
      try {
        if (this.#configured.get(id) !== intent.generation) {
          const held = this.#d.driver.runtimeTokens?.(id) ?? [];
          await withSpan("runtime.init", ctx, { "sandbox.id": id }, () => timeStep("init", () => initRemote(obs.endpoint!, intent, held)), RUNTIME_SCOPE);
          if (intent.owner?.kind !== "pool") this.#d.driver.runtimeInitialized?.(id, intent.envdAccessToken ?? "");
          this.#configured.set(id, intent.generation);
        }
        ready = true;
      } catch (err) {
        // The pod is Ready but its runtime does not answer yet: not ready, look again soon.
        reason = "RuntimeNotReady";
        message = (err as Error).message;
      }
    } else if (obs.phase !== "Paused") {
      this.#endpoints.delete(id);
      this.#configured.delete(id);
    }
    this.#report({
      sandboxId: id,
      generation: intent.generation,
      phase: phaseOf(obs),
      ready,
      endpoint: obs.endpoint ? { runtime: obs.endpoint } : null,
      address: obs.address,
      revision: intent.template?.revision,
      reason,
      message,
      observedAt: this.#now(),
      startedAt: Date.parse(obs.createdAt) || undefined,
    });
    const converged = isConverged(intent, obs.phase, ready);
    this.#settle(intent, converged, obs.phase, message);
    return requeueFor(intent, obs.phase, ready, obs.retryAfterMs);
  }

  /**
   * Acks the generation. A client waiting to use a sandbox (E2B create on a claimed or new
   * sandbox, connect) is answered by this ack, so a sandbox of its own that is still starting (a
   * pod not Ready, a runtime not answering yet) is not acked "accepted": the ack waits for a pass
   * that finds it ready or failed (the edge gives up after its own wait and kills it). Acking at
   * once let the create return a sandbox whose first command the gateway refused.
   */
  #settle(intent: Intent, converged: boolean, phase: SandboxObservation["phase"], message?: string): void {
    const starting = !converged && intent.owner.kind === "sandbox" && intent.desired.state === "running" && phase !== "Failed";
    if (starting) return;
    const failed = this.#snapshotErrors.get(intent.sandboxId);
    this.#snapshotErrors.delete(intent.sandboxId);
    const snapshotError = failed?.generation === intent.generation ? { reason: failed.reason, message: failed.message } : undefined;
    this.#ack(intent.sandboxId, intent.generation, converged ? "applied" : "accepted", message, snapshotError);
  }

  /** Settles a generation once the intent held is on disk: what the edge hears was done survives
   * an agent crash (intent-store.ts). */
  #ack(id: string, generation: number, result: "applied" | "accepted", message?: string, snapshotError?: SnapshotError): void {
    this.#d.store.durable(id);
    this.#d.settled(id, generation, result, message, snapshotError);
  }

  /**
   * Sends an observation unless it says what the last one of this sandbox said. Every pass
   * reports (level-based), and a pod coming up takes several passes (pod events, requeues) that
   * mostly repeat themselves; each repeat cost the edge's ClusterDO and the sandbox's group a
   * round of work for nothing. A reconnect sends the whole inventory anyway.
   */
  #report(obs: ObservationInput, traceId = ""): void {
    const before = this.#phases.get(obs.sandboxId);
    const was = before?.phase;
    const pool = this.#d.store.get(obs.sandboxId)?.owner.kind === "pool";
    if (obs.phase === "Deleted") this.#phases.delete(obs.sandboxId);
    else this.#phases.set(obs.sandboxId, { phase: obs.phase, pool });
    const stock = this.#poolOf.get(obs.sandboxId);
    if (stock !== undefined) {
      const ready = this.#poolReady.get(stock) ?? new Set<string>();
      if (obs.ready) ready.add(obs.sandboxId);
      else ready.delete(obs.sandboxId);
      if (ready.size) this.#poolReady.set(stock, ready);
      else this.#poolReady.delete(stock);
    }
    // One line per phase change (not per pass): what an operator greps a sandbox's history for.
    if (was !== obs.phase) LOG.info("phase", { sandboxId: obs.sandboxId, generation: obs.generation, phase: obs.phase, from: was, reason: obs.reason, traceId: traceId || undefined });
    // A warm member claimed keeps its phase: its claim is a line too (with the create's request id).
    else if (before?.pool && !pool) LOG.info("claimed", { sandboxId: obs.sandboxId, generation: obs.generation, phase: obs.phase, traceId: traceId || undefined });
    const key = `${obs.generation}|${obs.phase}|${obs.ready}|${obs.endpoint?.runtime ?? ""}|${obs.address ?? ""}|${obs.reason ?? ""}|${obs.message ?? ""}|${obs.revision ?? ""}|${obs.conditions?.map((c) => `${c.type}=${c.status}:${c.reason ?? ""}`).join(",") ?? ""}`;
    if (this.#reported.get(obs.sandboxId) === key) return;
    this.#reported.set(obs.sandboxId, key);
    this.#d.report(obs);
  }

  /** Observations for every sandbox the driver or the store knows (the hello inventory). */
  async inventory(): Promise<ObservationInput[]> {
    // The inventory replaces the edge's view of every sandbox, so what `#report` last sent is no
    // longer what the edge holds: the next report of each must go out, even if it equals that one
    // (a restart's Running/ready after an inventory's Pid1Restarting would otherwise be dropped and
    // the edge would hold the sandbox's requests for good).
    this.#reported.clear();
    const seen = new Map<string, SandboxObservation>();
    for (const o of await this.#d.driver.list()) seen.set(o.id, o);
    const ids = new Set([...seen.keys(), ...this.#d.store.ids()]);
    return [...ids].map((id) => {
      const o = seen.get(id);
      const intent = this.#d.store.get(id);
      const generation = intent?.generation ?? o?.generation ?? 0;
      return {
        sandboxId: id,
        generation: o ? generation : 0,
        phase: phaseOf(o),
        ready: o?.phase === "Running" && this.#configured.get(id) === generation,
        endpoint: o ? { runtime: o.endpoint ?? EMBEDDED_ENDPOINT } : null,
        address: o?.address,
        revision: intent?.template?.revision,
        observedAt: this.#now(),
        ...(o?.conditions ? { conditions: o.conditions } : {}),
      };
    });
  }

  /** After a restart: reconcile everything the driver or the store knows, adopting live ones. */
  async resumeAll(): Promise<void> {
    for (const id of this.#d.store.ids()) this.#trackPool(this.#d.store.get(id)!);
    const ids = new Set([...(await this.#d.driver.list()).map((o) => o.id), ...this.#d.store.ids()]);
    for (const id of ids) this.queue.add(id);
  }

  #register(intent: Intent): void {
    const { runtime, driver } = this.#d;
    const id = intent.sandboxId;
    const opts = {
      // One model with pods' runtimes (initRemote): a warm member is never open; its token is one
      // only this agent ever knew, and the claim's (or none, when made without one) replaces it.
      accessToken: intent.envdAccessToken ?? (intent.owner?.kind === "pool" ? randomBytes(32).toString("base64url") : ""),
      envVars: intent.envVars,
      defaultUser: intent.template?.user,
      defaultWorkdir: intent.template?.workdir,
      interpreter: intent.template?.codeInterpreter === true,
    };
    const existing = runtime.getSandbox(id);
    if (!existing) runtime.addSandbox(id, driver.view(id), opts);
    else if (this.#configured.get(id) !== intent.generation) existing.configure(opts);
    this.#configured.set(id, intent.generation);
  }

  /** The template's start/ready commands of a running, registered sandbox (none: `undefined`). */
  #startStatus(intent: Intent, obs: SandboxObservation) {
    const t = intent.template;
    const sbx = this.#d.runtime.getSandbox(intent.sandboxId);
    if (!this.#d.starts || !t || !sbx || (!t.startCmd && !t.readyCmd)) return undefined;
    // Its processes as they were when this agent started: its start command runs in them already.
    const seen = this.#incarnations.get(intent.sandboxId);
    const adopted = (Date.parse(obs.createdAt) || Infinity) < this.#bootedAt && (!seen || seen.first === seen.last);
    return this.#d.starts.status(intent.sandboxId, sbx, { startCmd: t.startCmd, readyCmd: t.readyCmd, user: t.user, workdir: t.workdir }, readyTimeoutMs(intent), adopted);
  }

  /** Records the observation's incarnation; whether it differs from the last one seen. */
  #replaced(id: string, obs: SandboxObservation): boolean {
    if (obs.incarnation === undefined) return false;
    const seen = this.#incarnations.get(id);
    this.#incarnations.set(id, { first: seen?.first ?? obs.incarnation, last: obs.incarnation });
    return seen !== undefined && seen.last !== obs.incarnation;
  }

  #unregister(id: string, keepState = false): void {
    this.#d.starts?.forget(id);
    this.#d.runtime.removeSandbox(id, { keepState });
    this.#configured.delete(id);
  }
}
