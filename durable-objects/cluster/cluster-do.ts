// ClusterDO: one cluster's agent session and intent outbox. A thin shell around machine.ts: the
// agent's WebSocket uses the Hibernation API (the object may sleep between frames; raw pings are
// answered without waking it), state loads once per object instance from ctx.storage.sql.
import { stubOf } from "../object-ids.ts";
import { DurableObject } from "cloudflare:workers";
import type { Env } from "../env.ts";
import { ErrorCode } from "../../schema/errors.ts";
import { MAX_INVENTORY_SANDBOXES } from "../../schema/api/limits.ts";
import {
  ACK_OBSERVATIONS_FEATURE,
  AgentMessageSchema,
  CloseCode,
  CRD_SYNC_FEATURES,
  parseFrame,
  PING_FRAME,
  PONG_FRAME,
  PROTOCOL_VERSION,
  type AckItem,
  type EdgeMessage,
  type Hello,
  type Intent,
  type Inventory,
  type Observation,
  type Owner,
  type SandboxId,
} from "../../schema/protocol/index.ts";
import { IndexQueue } from "../sandbox/index-queue.ts";
import { directIndexWriter } from "../sandbox/sandbox-index-do.ts";
import { sandboxGroupOf, sandboxGroupStub } from "../sandbox/stub.ts";
import { CoarseTimers } from "../coarse-timers.ts";
import { TurnWrites } from "../turn-writes.ts";
import { CrdSync } from "./crd-sync.ts";
import { batches, FRAME_MAX_BYTES, utf8Bytes } from "../../schema/protocol/batches.ts";
import { BUILD_FEATURE, type BuildEvents, type BuildFrame } from "../../schema/protocol/build.ts";
import { recordBuildEvents } from "../operations/template-builds.ts";
import { collectImages, IMAGE_RECHECK_MS, IMAGE_SWEEP_MS } from "../operations/image-gc.ts";
import type { Result } from "../sandbox/state.ts";
import { ObservationRouter } from "./observation-router.ts";
import { nextRedelivery, transition, type ClusterEffect, type ClusterEvent, type ClusterState } from "./machine.ts";
import type { ClusterStatus, EnqueueOptions, EnqueueResult, LogsResult } from "./rpc.ts";
import type { SandboxLogEntry, SandboxLogsQuery } from "../../schema/api/sandbox-logs.ts";
import { openClusterStore, type ClusterStore, type IntentWrite } from "./store.ts";
import { edgeLogger } from "../tracing/edge-log.ts";
import { getDb } from "../store/db.ts";
import { listTrafficPolicies } from "../store/traffic-policies.ts";
import { listSecurityProfiles } from "../store/security-profiles.ts";
import { clusterTeams } from "../operations/team-clusters.ts";
import { tokenSecretNames, withholdLiterals, type SecurityProfileEntry } from "../../schema/api/security-profile.ts";
import { teamSecretValues } from "../store/secrets.ts";
import { transformSecrets } from "../../schema/egress/transforms.ts";
import { HeldTeams } from "./held-teams.ts";

const LOG = edgeLogger("cluster");

/** Header the agent-link route uses to pass the cluster name (a DO does not know its own name). */
export const CLUSTER_HEADER = "X-Cluster-Id";
/** How often the agent should heartbeat, and when an unacked intent is sent again. */
const HEARTBEAT_MS = 15_000;
const REDELIVER_MS = 30_000;
/** Silence after which the session is considered dead (three missed heartbeats). */
const LIVENESS_MS = 3 * HEARTBEAT_MS;
/** Intents per `intents` frame, so a resync of thousands stays well under frame limits. */
const FRAME_BATCH = 256;
/** Delay for deleting acked outbox rows in one batch. */
const ACK_FLUSH_MS = 50;
/** Unacked intents whose trace context is kept in memory for redelivery (lost with the object's memory). */
const MAX_TRACED_INTENTS = 10_000;
/** The longest an `enqueue` may wait for acks. */
const MAX_AWAIT_MS = 30_000;
/** How long a logs request waits for the agent's answer. */
const LOGS_WAIT_MS = 5_000;
/** Pause before each retry of an owner's observeBatch that failed (then it is dropped and logged). */
const ROUTE_RETRY_MS = [100, 1_000];

interface Attachment {
  cluster: string;
  helloAt: number | null;
  agentId: string | null;
}

/** How soon intents held for their team's profiles (holdIntents) are tried again. */
const PROFILES_RETRY_MS = 1000;

export class ClusterDO extends DurableObject<Env> {
  private state: ClusterState | null = null;
  private store: ClusterStore | null = null;
  private waiters = new Map<number, (ack: AckItem) => void>();
  private readonly timers = new CoarseTimers();
  /** Index rows that came with enqueues (EnqueueOptions.index), committed in shared batches,
   * straight to libSQL (not through SandboxIndexDO: one hop less per batch). */
  private readonly indexQueue = new IndexQueue(() => directIndexWriter(this.env), (p) => this.ctx.waitUntil(p), []);
  /** Intents to write to the agent at the end of this turn (see flushIntents). */
  private unsent: Unsent[] = [];
  /** Whether the agent of this session enforces `network.rules` (appliesProfiles), once read. */
  private networkRules: boolean | null = null;
  /** Frames waiting for secret values (libSQL): later frames queue behind them, in order. */
  private secretsChain: Promise<void> | null = null;
  /** The teams whose SecurityProfiles this agent session has (HeldTeams), and those of them served
   * by a template here at the last send (the rest are served by sandboxes: see pruneProfiles). */
  private readonly profileTeams = new HeldTeams();
  private templateTeams = new Set<string>();
  private pruneTimer: ReturnType<typeof setTimeout> | null = null;
  private gcTimer: ReturnType<typeof setTimeout> | null = null;
  private profilesChain: Promise<unknown> = Promise.resolve();
  /** The teams whose TrafficPolicies this agent session has (HeldTeams; "every": the sole
   * cluster's), those of them bound here (the rest are served by sandboxes: see pruneProfiles),
   * and the chain that keeps their sends in call order. */
  private readonly policyTeams = new HeldTeams();
  private policyBound = new Set<string>();
  private policiesChain: Promise<unknown> = Promise.resolve();
  /** The resend a failed send of either set scheduled (resendSoon). */
  private readonly resendTimers: { policies?: ReturnType<typeof setTimeout>; profiles?: ReturnType<typeof setTimeout> } = {};
  /** The trace context of unacked intents, by seq, sent with each (re)delivery (traceIntent). */
  private traces = new Map<number, string>();
  private unsentFlush: ReturnType<typeof setTimeout> | null = null;
  /**
   * The outbox writes of this turn's enqueues: they share one commit, and each enqueue answers
   * after it (a commit of their own per enqueue cost ~5 % of the edge's CPU per create). Any other
   * event runs them first; the intents frame leaves after them.
   */
  private readonly turn = new TurnWrites("cluster", this.ctx.storage, () => {
    this.state = null;
    this.observations.reset();
  });
  /** The turn's intent writes, in one call (a field: `deferRow` joins rows of the same function). */
  private readonly writeIntents = (writes: IntentWrite[]) => this.store!.writeIntents(writes);
  /** Which sandbox observations go to their groups (repeats of an awaited ack do not). */
  private readonly observations = new ObservationRouter();
  /** Per-owner delivery chains, so one owner sees its observations in arrival order. */
  private routes = new Map<string, Promise<void>>();
  /** A hello whose inventory goes on in `inventory` frames, until their last. */
  private partialHello: { ws: WebSocket; hello: Hello } | null = null;
  private sessionId = "";
  private lastSeenWrite = 0;
  private acked: number[] = [];
  private ackFlush: ReturnType<typeof setTimeout> | null = null;
  /** The redelivery alarm this instance set (null: none, or unknown after a restart). */
  private alarmAt: number | null = null;
  private crd: CrdSync | null = null;
  /** Build events go to libSQL one frame after another, so a build's end follows its logs. */
  private builds: Promise<void> = Promise.resolve();
  /** Image collection passes, one after another (operations/image-gc.ts). */
  private imageGc: Promise<unknown> = Promise.resolve();
  /** imageGcAt's value (undefined: not read yet). */
  private gcAt: number | null | undefined = undefined;
  /** When a pass last claimed (meta `imageClaimAt`; undefined: not read yet): the periodic pass
   * is due `IMAGE_SWEEP_MS` after it. */
  private claimedAt: number | undefined = undefined;
  /** Logs requests sent to the agent, by id, until it answers (or the wait ends). */
  private logsWaiters = new Map<string, (entries: SandboxLogEntry[]) => void>();

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    ctx.setWebSocketAutoResponse(new WebSocketRequestResponsePair(PING_FRAME, PONG_FRAME));
  }

  /** The agent's WebSocket upgrade, forwarded by the agent-link route after authentication. */
  override async fetch(request: Request): Promise<Response> {
    if (request.headers.get("Upgrade")?.toLowerCase() !== "websocket") {
      return Response.json({ code: 426, message: "expected a WebSocket upgrade" }, { status: 426 });
    }
    const cluster = request.headers.get(CLUSTER_HEADER) ?? "local";
    this.load();
    // One agent per cluster: a new connection replaces the old one (e.g. after a restart).
    for (const old of this.ctx.getWebSockets()) {
      const att = old.deserializeAttachment() as Attachment | null;
      if (att) old.serializeAttachment({ ...att, helloAt: null } satisfies Attachment);
      this.closeSocket(old, CloseCode.replaced, "replaced by a newer connection");
    }
    this.apply({ type: "disconnect" });
    const pair = new WebSocketPair();
    const attachment: Attachment = { cluster, helloAt: null, agentId: null };
    this.ctx.acceptWebSocket(pair[1]);
    pair[1].serializeAttachment(attachment);
    this.store!.setMeta("cluster", cluster);
    return new Response(null, { status: 101, webSocket: pair[0] });
  }

  /**
   * Durably queues intents for the agent; optionally waits (bounded) for their acks. The callers
   * are our own objects, which build whole intents with the `Intent` type (the agent validates
   * every frame it reads); parsing each one here again was ~3 % of the edge's CPU per create.
   */
  async enqueue(intents: Intent[], opts: EnqueueOptions = {}): Promise<EnqueueResult> {
    // Queued first; the answer waits for their commit (the create's read-your-writes).
    const indexed = opts.index?.length ? Promise.all(opts.index.map((op) => this.indexQueue.push(op))).then((r) => r.every(Boolean)) : null;
    const { seqs = [] } = this.apply({ type: "enqueue", intents });
    if (opts.traceparent) for (const s of seqs) if (s > 0) this.traceIntent(s, opts.traceparent);
    for (const h of this.observations.resent(intents, seqs)) this.route({ kind: "sandbox" }, [h]);
    const connected = this.state!.connected;
    const waitMs = Math.min(opts.awaitAckMs ?? 0, MAX_AWAIT_MS);
    // Durably queued before any answer (the output gate holds it until their commit). An ack
    // cannot come sooner: the intents frame leaves after the writes.
    const written = this.turn.written;
    if (written) {
      try {
        await written;
      } catch (err) {
        return { ok: false, error: { code: ErrorCode.internal, message: `outbox write failed: ${String(err)}` } };
      }
    }
    if (waitMs <= 0) {
      const committed = await indexed;
      return { ok: true, seqs, connected, acks: [], timedOut: false, ...(committed === null ? {} : { indexed: committed }) };
    }
    const known = opts.knownEndpoint === undefined ? null : JSON.stringify(opts.knownEndpoint);
    const watched = known === null ? [] : intents.map((i) => i.sandboxId);
    this.observations.watch(watched);
    const [{ acks, timedOut }, committed] = await Promise.all([
      this.awaitAcks(seqs.filter((s) => s > 0), waitMs, (a) => {
        if (known !== null) this.observations.acked(a, known, this.state!.desired.get(a.sandboxId)?.state === "running");
      }),
      indexed,
    ]);
    this.observations.unwatch(watched);
    return { ok: true, seqs, connected, acks, timedOut, ...(committed === null ? {} : { indexed: committed }) };
  }

  /**
   * Hands a template build to the agent (build.ts). Not queued: a build is refused unless the agent
   * is connected now and has a builder (501 for a cluster without one, e.g. the kubernetes driver).
   */
  async startBuild(frame: Omit<BuildFrame, "type">): Promise<Result> {
    this.load();
    const store = this.store!;
    if (store.getMeta("builder") !== "1") {
      const driver = store.getMeta("driver");
      return { ok: false, error: { code: ErrorCode.notImplemented, message: `cluster "${store.getMeta("cluster") ?? "?"}" has no template builder${driver ? ` (its agent runs the ${driver} driver)` : ""}: template builds need an agent with the local driver` } };
    }
    if (!this.state!.connected || !this.agentSocket()) return { ok: false, error: { code: ErrorCode.capacityUnavailable, message: "the cluster's agent is not connected; retry the build later" } };
    this.send({ type: "build", ...frame });
    return { ok: true };
  }

  /** Why this cluster cannot take E2B `network.rules`, or null: only an agent that said in its
   * last hello that it enforces them may get them (an older agent, which says nothing, would run
   * the sandbox with its rules silently unapplied). A driver that cannot is `not_implemented`;
   * no agent connected yet to say so is `agent_unavailable` (503: retry once it is up). */
  async networkRulesRefusal(name: string): Promise<{ code: ErrorCode; message: string } | null> {
    this.load();
    const store = this.store!;
    const stated = store.getMeta("networkRules");
    if (stated === "1") return null;
    const cluster = `network.rules is not supported on cluster "${name}"`;
    const driver = store.getMeta("driver");
    const no = (message: string) => ({ code: ErrorCode.notImplemented, message });
    if (stated === "0") return no(`${cluster}${driver ? ` (its agent runs the ${driver} driver, whose sandboxes' requests no proxy inspects)` : ""}`);
    if (stated === "") return no(`${cluster}: its agent did not say it enforces them (an older agent); upgrade the agent`);
    return { code: ErrorCode.agentUnavailable, message: `${cluster} yet: no agent has connected yet to say it enforces them; retry once the cluster's agent is up` };
  }

  /** A sandbox's log entries from its agent (E2B's logs routes; the caller checked the access). */
  async logs(sandboxId: string, query: SandboxLogsQuery): Promise<LogsResult> {
    this.load();
    if (!this.agentSocket()) return { ok: false, error: { code: ErrorCode.agentUnavailable, message: `the agent of sandbox "${sandboxId}" is not connected; retry` } };
    const id = crypto.randomUUID();
    const entries = await new Promise<SandboxLogEntry[] | null>((resolve) => {
      const cancel = this.timers.after(LOGS_WAIT_MS, () => {
        this.logsWaiters.delete(id);
        resolve(null);
      });
      this.logsWaiters.set(id, (e) => {
        cancel();
        this.logsWaiters.delete(id);
        resolve(e);
      });
      this.send({ type: "logsRequest", id, sandboxId: sandboxId as SandboxId, query });
    });
    if (!entries) return { ok: false, error: { code: ErrorCode.agentUnavailable, message: `the agent of sandbox "${sandboxId}" did not answer within ${LOGS_WAIT_MS} ms; retry` } };
    return { ok: true, entries };
  }

  /**
   * A pass of the built-image collection for this cluster (operations/image-gc.ts): claims what
   * nothing in libSQL references, and tells the agent about claimed images past their grace that
   * no sandbox here names. Passes run one after another; the next is armed on the alarm. `cluster`:
   * the caller's name for it (an object whose agent never connected has none of its own); `now`
   * lets tests look past the grace period; `welcome`: a new session's pass; `claim`: false for a
   * recheck of what is claimed already (collectImages in image-gc.ts). Answers once the pass ran
   * (tests); a nudge from an operation is `nudgeImages`.
   */
  async collectImages(cluster?: string, now: number = Date.now(), welcome = false, claim = true): Promise<{ ok: true; sent: string[] }> {
    this.load();
    const store = this.store!;
    const name = store.getMeta("cluster") ?? cluster;
    if (!name) return { ok: true, sent: [] };
    const lookAgainAt = (at: number | null) => {
      // Nothing to send while no agent is connected: the next hello runs a pass.
      const due = at !== null && this.agentSocket() ? at : null;
      store.setMeta("imageGcAt", due === null ? "" : String(due));
      this.gcAt = due;
      this.armAlarm(Date.now());
    };
    const setClaimedAt = (at: number) => {
      this.claimedAt = at;
      store.setMeta("imageClaimAt", String(at));
    };
    // Stamped when the pass is queued: a hello's pass is not followed at once by a periodic one.
    if (claim) setClaimedAt(Date.now());
    const next = this.imageGc.then(async () => {
      const r = await collectImages(this.env, name, {
        inUse: (images) => {
          this.turn.flush();
          return store.imagesInUse(images);
        },
        send: (names) => {
          if (!this.agentSocket()) return false;
          this.send({ type: "rootfsDeletes", names });
          return true;
        },
      }, now, welcome, claim).catch((err: unknown) => {
        // A failed pass (libSQL unreachable) is tried again at the recheck, not at once; one that
        // was to claim claims then (the periodic pass is made due at that time).
        if (claim) setClaimedAt(Date.now() + IMAGE_RECHECK_MS - IMAGE_SWEEP_MS);
        lookAgainAt(Date.now() + IMAGE_RECHECK_MS);
        throw err;
      });
      lookAgainAt(r.nextAt);
      return r.sent;
    });
    this.imageGc = next.catch((err: unknown) => LOG.warn("image collection failed; tried again at the next hello or alarm", { error: err }));
    return { ok: true, sent: await next };
  }

  /** A reference to one of this cluster's images changed (operations/image-gc.ts `nudgeImageGc`):
   * schedules a claiming pass and answers at once, so the caller (a template PUT, this object's
   * own build events) does not wait behind it or behind a pass already running. */
  async nudgeImages(cluster?: string): Promise<{ ok: true }> {
    this.ctx.waitUntil(this.collectImages(cluster).catch(() => {}));
    return { ok: true };
  }

  /** Asks the agent to free snapshots the edge deleted. Best effort: sent only while it is
   * connected (`sent` says whether it was); nothing is queued for a later session. */
  async deleteSnapshots(ids: string[]): Promise<{ ok: true; sent: boolean }> {
    this.load();
    if (ids.length === 0 || !this.agentSocket()) return { ok: true, sent: false };
    this.send({ type: "snapshotDeletes", ids });
    return { ok: true, sent: true };
  }

  /**
   * Sends the agent the GlobalTrafficPolicies and the TrafficPolicies of the teams this cluster
   * serves (bound to it, every team for the `SINGLE_CLUSTER` one, the teams of the sandboxes the
   * edge placed here, plus `also`: teams of intents about to leave), never another team's: a policy
   * shows a team's hosts and labels, and a cluster not trusted with the team has no use for them.
   * After each hello, whenever the admin API changes one, and before a team's first intent here
   * (flushIntents). The set replaces the agent's; sends go out in call order, each read fresh.
   * `sent`: whether an agent was connected and got it; one that connects later gets them with its
   * welcome.
   */
  async sendTrafficPolicies(also: Iterable<string> = []): Promise<{ ok: true; sent: boolean }> {
    this.load();
    const extra = [...also];
    const next = this.policiesChain.then(async () => {
      if (!this.agentSocket()) return false;
      const served = await clusterTeams(this.env, this.store!.getMeta("cluster") ?? "local");
      // Desired rows this turn wrote are read back (a first sandbox's team is there before its intent leaves).
      this.turn.flush();
      const teams = served.every ? null : new Set([...served.bound, ...extra, ...this.store!.liveTeams()]);
      // In flight from here (HeldTeams): a flush meanwhile whose team this set leaves out (a team's
      // new sandbox after this set dropped the team), or that the agent does not have yet, chains
      // its own send behind this one rather than letting its intent leave first.
      this.policyTeams.reading(teams ?? "every");
      this.policyBound = served.bound;
      return this.deliverSet(this.policyTeams, "policies", async () => ({ type: "trafficPolicies", policies: await listTrafficPolicies(getDb(this.env), teams ? [null, ...teams] : undefined) }));
    });
    this.policiesChain = next.catch(() => false);
    return { ok: true, sent: await next };
  }

  /**
   * Sends the agent the GlobalSecurityProfiles and the SecurityProfiles of the teams this cluster
   * serves (those bound to it with a template here, and those of the sandboxes the edge placed
   * here, plus `also`: teams of intents about to leave), never another team's:
   * a profile may hold a literal token. Secret values go only for the teams bound to it (any team
   * for the `SINGLE_CLUSTER` one): a team's sandbox from another team's public template on a
   * cluster not bound to the team gets the team's profiles (their restrictions must apply there)
   * but none of its secrets, so a credential rule refuses the request it would have added the
   * credential to (the proxy's "credential … is not available", audited) rather than hand the
   * value to a cluster not trusted with the team; likewise a rule of the team's that adds a
   * literal header value (it may be a hard-coded token) goes there as a block (withholdLiterals). The set replaces the agent's, so a team no
   * longer served is pruned there: at the next send, and as soon as its last sandbox here is gone
   * (pruneProfiles). Sends go out in call order, each read fresh. Nothing goes to an agent that
   * does not apply profiles (appliesProfiles). `sent`: whether an agent was connected and got it.
   */
  async sendSecurityProfiles(also: Iterable<string> = []): Promise<{ ok: true; sent: boolean }> {
    this.load();
    const extra = [...also];
    const next = this.profilesChain.then(async () => {
      if (!this.agentSocket() || !this.appliesProfiles()) return false;
      const db = getDb(this.env);
      // Teams with a template here count only while bound to this cluster (a template the admin
      // places binds its team; the check keeps a binding's absence final even so).
      const cluster = this.store!.getMeta("cluster") ?? "local";
      const served = await clusterTeams(this.env, cluster);
      const teams = new Set(served.withTemplates);
      // Desired rows this turn wrote are read back (a first sandbox's team is there before its intent leaves).
      this.turn.flush();
      for (const t of [...extra, ...this.store!.liveTeams()]) teams.add(t);
      // In flight from here, as the policies' (sendTrafficPolicies).
      this.profileTeams.reading(teams);
      this.templateTeams = served.withTemplates;
      return this.deliverSet(this.profileTeams, "profiles", async () => {
        const listed = await listSecurityProfiles(db, [null, ...teams]);
        const secrets = await this.profileSecrets(listed, served.every ? teams : new Set([...teams].filter((t) => served.bound.has(t))));
        // Nor the literals a team's rules add to requests (they may be credentials) to a cluster not bound to it.
        const profiles = served.every ? listed : listed.map((p) => (p.team === null || served.bound.has(p.team) ? p : { ...p, spec: withholdLiterals(p.spec, `rule withheld: SecurityProfile ${p.name} of team ${p.team} adds header values to this request, and cluster ${cluster} is not bound to the team`) }));
        return { type: "securityProfiles", profiles, ...(secrets ? { secrets } : {}) };
      });
    });
    this.profilesChain = next.catch(() => false);
    return { ok: true, sent: await next };
  }

  /** Reads a set's frame and sends it, keeping `held` true to what the agent has: delivered once
   * the frame left, unknown (and resent soon) when the reads failed. Both sets go this way. */
  private async deliverSet(held: HeldTeams, kind: "policies" | "profiles", frame: () => Promise<EdgeMessage>): Promise<true> {
    try {
      this.send(await frame());
      held.delivered();
      return true;
    } catch (err) {
      held.failed();
      this.resendSoon(kind);
      throw err;
    }
  }

  /** After a failed send of a set: the agent keeps its previous one, which may hold a team that
   * should have left it (a prune, an unbind, a changed secret) or lack one whose intent waits; the
   * set goes again soon, while this agent stays connected (the next session gets both with its
   * welcome). One pending resend per set. */
  private resendSoon(kind: "policies" | "profiles"): void {
    if (this.resendTimers[kind] || !this.agentSocket()) return;
    this.resendTimers[kind] = setTimeout(() => {
      delete this.resendTimers[kind];
      (kind === "policies" ? this.sendTrafficPolicies() : this.sendSecurityProfiles()).catch((err: unknown) => LOG.warn(`${kind === "policies" ? "traffic policies" : "security profiles"} not resent`, { error: err }));
    }, PROFILES_RETRY_MS);
  }

  /** After sandboxes here are gone: when a team the agent holds profiles of has neither a sandbox
   * here any more nor had a template here at the last send, the set goes again without it (the
   * frame replaces the agent's set: the removal); so do the TrafficPolicies of a team not bound
   * here. Reads SQLite only (an index lookup per team not kept otherwise, not a scan of every
   * sandbox), unless a team left. */
  private pruneProfiles(): void {
    this.pruneTimer ??= setTimeout(() => {
      this.pruneTimer = null;
      if (!this.agentSocket()) return;
      this.turn.flush();
      // What the agent holds or will hold once a send in flight lands; unknown (after a wake, which
      // keeps the session but not this memory, or a failed send) may hold the team that left.
      const left = (held: HeldTeams, kept: Set<string>) => {
        const teams = held.teams();
        return teams === null || (teams !== "every" && [...teams].some((t) => !kept.has(t) && !this.store!.hasTeam(t)));
      };
      if (this.appliesProfiles() && left(this.profileTeams, this.templateTeams)) this.sendSecurityProfiles().catch((err: unknown) => LOG.warn("security profiles not pruned", { error: err }));
      if (left(this.policyTeams, this.policyBound)) this.sendTrafficPolicies().catch((err: unknown) => LOG.warn("traffic policies not pruned", { error: err }));
    }, 0);
  }

  /** After sandboxes here are gone, while freed images wait (one may have been held by them): a
   * pass soon rather than at the next recheck, one per second at most (a burst of deletes, or
   * churn beside a long-lived sandbox holding an image, is one pass). Nothing is read when none
   * wait. */
  private collectSoon(): void {
    const at = this.imageGcAt();
    if (at === null) return;
    this.gcTimer ??= setTimeout(() => {
      this.gcTimer = null;
      // A recheck: sandboxes going release claimed images, they do not unreference new ones.
      this.collectImages(undefined, undefined, false, false).catch(() => {});
    }, 1_000);
    // And on the alarm (armed by the event's apply) in case the timer does not fire: an object
    // with only hibernatable sockets may be evicted first, and the alarm outlives it.
    const soon = Date.now() + 2_000;
    if (at <= soon) return;
    this.gcAt = soon;
    this.store!.setMeta("imageGcAt", String(soon));
  }

  /** Sends the set again if this session's agent has, or may have, `team`'s profiles (a secret
   * they name changed, a template of it left); no libSQL read when it does not. */
  async resendForTeam(team: string): Promise<{ ok: true; sent: boolean }> {
    this.load();
    if (this.profileTeams.holds(team) === "no") return { ok: true, sent: false };
    return this.sendSecurityProfiles();
  }

  /** After the admin unbound `team` from this cluster: each set that may hold the team's goes
   * again, so the agent drops its secret values (and its policies, unless a sandbox of it runs
   * here) now rather than at its next hello. No libSQL read when neither set held the team. */
  async teamUnbound(team: string): Promise<{ ok: true; sent: boolean }> {
    this.load();
    const [policies, profiles] = await Promise.all([
      this.policyTeams.holds(team) !== "no" ? this.sendTrafficPolicies() : null,
      this.profileTeams.holds(team) !== "no" ? this.sendSecurityProfiles() : null,
    ]);
    return { ok: true, sent: Boolean(policies?.sent || profiles?.sent) };
  }

  /** Whether the agent said in its hello that it enforces `network.rules`, and with them
   * SecurityProfiles: only such an agent gets profiles (which may hold literal tokens) and
   * secrets; both drivers' agents say true (agent.ts: a driver that takes sandbox secrets), an
   * older agent nothing. */
  private appliesProfiles(): boolean {
    return (this.networkRules ??= this.store!.getMeta("networkRules") === "1");
  }

  async status(): Promise<ClusterStatus> {
    const st = this.load();
    const ws = this.agentSocket();
    const att = ws ? (ws.deserializeAttachment() as Attachment) : null;
    const store = this.store!;
    const pinged = ws ? this.ctx.getWebSocketAutoResponseTimestamp(ws)?.getTime() ?? null : null;
    const seen = Number(store.getMeta("lastSeenAt") ?? 0) || null;
    return {
      cluster: store.getMeta("cluster"),
      connected: st.connected,
      agentId: att?.agentId ?? store.getMeta("agentId"),
      driver: store.getMeta("driver"),
      isolation: store.getMeta("isolation"),
      ingressUrl: store.getMeta("ingressUrl"),
      sessionId: store.getMeta("sessionId"),
      lastSeenAt: Math.max(pinged ?? 0, seen ?? 0) || null,
      pending: st.outbox.size,
      sandboxes: st.desired.size,
    };
  }

  override async webSocketMessage(ws: WebSocket, message: string | ArrayBuffer): Promise<void> {
    this.load();
    if (typeof message !== "string") return this.protocolError(ws, "bad_frame", "frames are JSON text");
    const parsed = parseFrame(AgentMessageSchema, message);
    if (!parsed.ok) return this.protocolError(ws, "bad_frame", parsed.error);
    const msg = parsed.value;
    const att = ws.deserializeAttachment() as Attachment;
    if (msg.type === "inventory") return this.inventoryPart(ws, att, msg);
    if (msg.type !== "hello" && att.helloAt === null) return this.protocolError(ws, "hello_required", "send hello first");
    this.touch();
    switch (msg.type) {
      case "hello":
        if (msg.more) {
          this.partialHello = { ws, hello: msg };
          return;
        }
        this.partialHello = null;
        return this.hello(ws, att, msg);
      case "ack":
        // Acks first: an awaited ack confirms what the observation beside it repeats
        // (observation-router.ts), as when they came as two frames in this order.
        this.apply({ type: "ack", items: msg.items });
        if (msg.observations?.length) this.apply({ type: "observations", items: msg.observations });
        return;
      case "observations":
        this.apply({ type: "observations", items: msg.items });
        return;
      case "heartbeat":
        return;
      case "buildEvents":
        return this.onBuildEvents(msg);
      case "logs":
        this.logsWaiters.get(msg.id)?.(msg.entries);
        return;
      case "sandboxsets":
      case "requests":
      case "claims":
      case "quotas":
      case "autoscalers":
      case "updateops":
      case "trafficpolicyobjects":
      case "securityprofileobjects":
        this.crd ??= new CrdSync({
          env: this.env,
          sql: this.ctx.storage.sql,
          cluster: () => this.store!.getMeta("cluster") ?? "local",
          desired: (id) => this.load().desired.get(id),
          reply: (items) => this.send({ type: "replies", items }),
          log: (m) => LOG.warn(m),
        });
        this.crd.handle(msg);
        return;
      default:
        msg satisfies never;
    }
  }

  override async webSocketClose(ws: WebSocket, code: number, reason: string): Promise<void> {
    this.closeSocket(ws, code === 1005 || code === 1006 ? 1000 : code, reason);
    this.onSocketGone(ws);
  }

  override async webSocketError(ws: WebSocket): Promise<void> {
    this.onSocketGone(ws);
  }

  override async alarm(): Promise<void> {
    this.alarmAt = null;
    await this.sweep();
    const gcAt = this.imageGcAt();
    // The alarm may run before the object's clock (which moves only with I/O) has reached its
    // time: its pass runs as of that time. Skipped, it would re-arm the alarm at the time of the
    // one running, which the runtime drops when the handler ends: nothing would wake it again.
    const sweep = this.sweepDueAt();
    const gcDue = gcAt !== null && gcAt <= Date.now() + 1_000;
    const sweepDue = sweep !== null && sweep <= Date.now() + 1_000;
    if (gcDue || sweepDue) {
      // Claims only when the periodic pass is due: a recheck looks at what is claimed already.
      await this.collectImages(undefined, Math.max(Date.now(), gcDue && gcAt !== null ? gcAt : 0), false, sweepDue).catch(() => {});
      // Armed again from what the pass left (sweep armed it for the time of this very alarm).
      this.alarmAt = null;
      this.armAlarm(Date.now());
    }
  }

  /** When the periodic claiming pass is due (null: no agent connected, the next hello runs one). */
  private sweepDueAt(): number | null {
    if (!this.state?.connected) return null;
    // None yet: the hello's pass (which stamps it) is about to run; not due before it.
    if (this.claimedAt === undefined) this.claimedAt = Number(this.store!.getMeta("imageClaimAt") ?? Date.now());
    return this.claimedAt + IMAGE_SWEEP_MS;
  }

  /** When claimed images are next looked at (null: none wait, or no agent to tell); kept in meta
   * for the next instance, read once per instance (armAlarm runs on every event). */
  private imageGcAt(): number | null {
    if (this.gcAt === undefined) {
      const v = this.store!.getMeta("imageGcAt");
      this.gcAt = v ? Number(v) : null;
    }
    return this.gcAt;
  }

  /**
   * The alarm's work: redeliver unacked intents that are due, and drop a session that has been
   * silent for three heartbeat intervals. `now` lets tests look into the future.
   */
  async sweep(now: number = Date.now()): Promise<{ ok: true; closed: boolean }> {
    this.load();
    const ws = this.agentSocket();
    if (ws && now - this.lastHeard(ws) > LIVENESS_MS) {
      this.protocolError(ws, "heartbeat_timeout", `no frame or ping for ${LIVENESS_MS} ms`, CloseCode.heartbeatTimeout);
      return { ok: true, closed: true };
    }
    this.apply({ type: "redeliver", olderThan: now - REDELIVER_MS });
    return { ok: true, closed: false };
  }

  /** A part of the inventory of this socket's hello (sent with `more`); the last runs the hello. In
   * memory only: an instance that went away between the parts closes the session, and the agent
   * says hello again. */
  private inventoryPart(ws: WebSocket, att: Attachment, msg: Inventory): void {
    const partial = this.partialHello;
    if (!partial || partial.ws !== ws) return this.protocolError(ws, "hello_required", "an inventory frame follows a hello with more: true");
    if (partial.hello.inventory.length + msg.items.length > MAX_INVENTORY_SANDBOXES) {
      this.partialHello = null;
      return this.protocolError(ws, "bad_frame", `at most ${MAX_INVENTORY_SANDBOXES} sandboxes per inventory`);
    }
    for (const o of msg.items) partial.hello.inventory.push(o);
    if (msg.more) return;
    this.partialHello = null;
    this.touch();
    this.hello(ws, att, partial.hello);
  }

  private hello(ws: WebSocket, att: Attachment, hello: Hello): void {
    if (hello.protocol !== PROTOCOL_VERSION) {
      return this.protocolError(ws, "protocol_version", `edge speaks protocol ${PROTOCOL_VERSION}, agent sent ${hello.protocol}`);
    }
    const sessionId = crypto.randomUUID();
    ws.serializeAttachment({ ...att, helloAt: Date.now(), agentId: hello.agentId } satisfies Attachment);
    const store = this.store!;
    store.setMeta("agentId", hello.agentId);
    store.setMeta("driver", hello.driver);
    store.setMeta("isolation", hello.isolation);
    store.setMeta("ingressUrl", hello.ingress.url);
    store.setMeta("builder", hello.capabilities.builder ? "1" : "0");
    store.setMeta("networkRules", hello.capabilities.networkRules === undefined ? "" : hello.capabilities.networkRules ? "1" : "0");
    this.networkRules = hello.capabilities.networkRules === true;
    store.setMeta("sessionId", sessionId);
    this.sessionId = sessionId;
    this.profileTeams.reset();
    this.policyTeams.reset();
    this.apply({ type: "hello", hello });
    this.sendTrafficPolicies().catch((err: unknown) => LOG.warn("traffic policies not sent", { error: err }));
    this.sendSecurityProfiles().catch((err: unknown) => LOG.warn("security profiles not sent", { error: err }));
    // Images freed while it was away, and those whose frame a dropped session may have lost.
    this.collectImages(undefined, undefined, true).catch(() => {});
  }

  private onBuildEvents(msg: BuildEvents): void {
    const cluster = this.store!.getMeta("cluster") ?? "local";
    const next = this.builds.then(() => recordBuildEvents(this.env, cluster, msg.items)).catch((err) => console.error("cluster: build events not recorded", err));
    this.builds = next;
    this.ctx.waitUntil(next);
  }

  /**
   * Acked rows are deleted a little later, in batches: a write in the ack handler would hold the
   * awaiting enqueue's reply behind its commit (output gate). If the object dies first, the rows
   * are redelivered on reconnect and the agent acks them as stale: at-least-once, harmless.
   */
  private deferUnqueue(seqs: number[]): void {
    this.acked.push(...seqs);
    if (this.ackFlush) return;
    this.ackFlush = setTimeout(() => {
      this.ackFlush = null;
      this.turn.flush();
      this.store!.unqueue(this.acked.splice(0));
    }, ACK_FLUSH_MS);
  }

  /** Records when the agent was last heard from, at most once a second (acks arrive in bursts). */
  private touch(): void {
    const now = Date.now();
    if (now - this.lastSeenWrite < 1_000) return;
    this.lastSeenWrite = now;
    this.store!.setMeta("lastSeenAt", String(now));
  }

  /** Last sign of life: a frame, a ping (answered without waking us), or the hello. */
  private lastHeard(ws: WebSocket): number {
    const att = ws.deserializeAttachment() as Attachment | null;
    const pinged = this.ctx.getWebSocketAutoResponseTimestamp(ws)?.getTime() ?? 0;
    const framed = Math.max(this.lastSeenWrite, Number(this.store!.getMeta("lastSeenAt") ?? 0));
    return Math.max(pinged, framed, att?.helloAt ?? 0);
  }

  private onSocketGone(ws: WebSocket): void {
    if (this.partialHello?.ws === ws) this.partialHello = null;
    const att = ws.deserializeAttachment() as Attachment | null;
    // A replaced socket closing later must not mark the newer session disconnected. The socket
    // that is going may still be listed while its close or error is handled (an agent killed
    // without a close frame): it does not count as the session.
    if (att?.helloAt != null && this.agentSocket(ws) === null) this.apply({ type: "disconnect" });
  }

  private apply(event: ClusterEvent): { seqs?: number[] } {
    const st = this.load();
    const now = Date.now();
    const { effects, seqs } = transition(st, event, now);
    if (event.type !== "enqueue") this.turn.flush();
    this.perform(effects, event.type === "ack", event.type === "enqueue");
    this.armAlarm(now);
    return { seqs };
  }

  /** One alarm for the earliest of: the next redelivery, the next liveness check, the next image
   * collection recheck or periodic pass. */
  private armAlarm(now: number): void {
    const st = this.state!;
    const redeliver = nextRedelivery(st, REDELIVER_MS);
    const live = st.connected ? now + LIVENESS_MS : null;
    const due = Math.min(redeliver ?? Infinity, live ?? Infinity, this.imageGcAt() ?? Infinity, this.sweepDueAt() ?? Infinity);
    if (due === Infinity || (this.alarmAt !== null && this.alarmAt <= due)) return;
    this.alarmAt = due;
    void this.ctx.storage.setAlarm(due);
  }

  private perform(effects: ClusterEffect[], fromAck = false, deferWrites = false): void {
    const store = this.store!;
    // An enqueue's writes join the turn's batch (one statement for all its intents' rows); any
    // other event's run now, one by one, as they come.
    const write = deferWrites ? (w: IntentWrite) => this.turn.deferRow(this.writeIntents, w) : (w: IntentWrite) => store.writeIntents([w]);
    // Intents queued by this event, so sending them does not read them back from SQLite, each
    // with the JSON its desired row got (the frame that sends it carries the same text).
    const texts = new Map<Intent, string>();
    const fresh = new Map<number, { intent: Intent; text: string | undefined }>();
    // Observations for sandbox owners leave in one call per sandbox group, not one per sandbox.
    const toGroups = new Map<string, Observation[]>();
    for (const e of effects) {
      switch (e.type) {
        case "save-desired": {
          const text = JSON.stringify(e.intent);
          texts.set(e.intent, text);
          write({ op: "save", intent: e.intent, text });
          break;
        }
        case "drop-desired":
          write({ op: "drop", sandboxId: e.sandboxId });
          this.pruneProfiles();
          this.collectSoon();
          break;
        case "queue":
          write({ op: "queue", seq: e.seq, sandboxId: e.sandboxId, generation: e.generation });
          if (e.intent) fresh.set(e.seq, { intent: e.intent, text: texts.get(e.intent) });
          break;
        case "unqueue":
          for (const seq of e.seqs) this.traces.delete(seq);
          if (fromAck) this.deferUnqueue(e.seqs);
          else write({ op: "unqueue", seqs: e.seqs });
          break;
        case "send":
          this.sendIntents(e.seqs, fresh);
          break;
        case "welcome":
          this.send({
            type: "welcome",
            protocol: PROTOCOL_VERSION,
            cluster: store.getMeta("cluster") ?? "local",
            sessionId: this.sessionId || (store.getMeta("sessionId") ?? ""),
            heartbeatIntervalMs: HEARTBEAT_MS,
            resync: e.resync,
            features: [...CRD_SYNC_FEATURES, BUILD_FEATURE, ACK_OBSERVATIONS_FEATURE],
          });
          break;
        case "route":
          if (e.owner.kind !== "sandbox") this.route(e.owner, e.observations);
          else for (const o of this.observations.route(e.observations)) pushTo(toGroups, sandboxGroupOf(o.sandboxId), o);
          break;
        case "acked":
          for (const a of e.items) {
            this.waiters.get(a.seq)?.(a);
            this.waiters.delete(a.seq);
          }
          break;
        default:
          e satisfies never;
      }
    }
    for (const observations of toGroups.values()) this.route({ kind: "sandbox" }, observations);
  }

  /** Remembers an intent's trace context until it is unqueued; bounded (the oldest are forgotten first). */
  private traceIntent(seq: number, traceparent: string): void {
    this.traces.set(seq, traceparent);
    if (this.traces.size > MAX_TRACED_INTENTS) this.traces.delete(this.traces.keys().next().value!);
  }

  private sendIntents(seqs: number[], fresh: Map<number, { intent: Intent; text: string | undefined }>): void {
    const missing = seqs.filter((s) => !fresh.has(s));
    if (missing.length) this.turn.flush();
    const loaded = new Map(this.store!.outboxIntents(missing).map((r) => [r.seq, r]));
    const items: Unsent[] = [];
    for (const seq of seqs) {
      const known = fresh.get(seq) ?? loaded.get(seq);
      if (known) items.push({ seq, intent: known.intent, text: known.text });
    }
    if (!items.length) return;
    this.unsent.push(...items);
    this.unsentFlush ??= setTimeout(() => this.flushIntents(), 0);
  }

  /**
   * Intents of concurrent enqueues (one per claim under load) leave in one frame: the agent then
   * acks and observes them in one frame each too, and every incoming frame is a WebSocket event
   * with its own parse and dispatch.
   */
  private flushIntents(): void {
    this.unsentFlush = null;
    this.turn.flush();
    const items = this.unsent.splice(0);
    // The trace context of an enqueue rides with its intent, the first time and on every
    // redelivery (a reconnect), until the intent is acked or superseded.
    if (this.traces.size) {
      for (const item of items) {
        const traceparent = this.traces.get(item.seq);
        if (traceparent) item.traceparent = traceparent;
      }
    }
    const go = () => {
      // At most FRAME_BATCH intents and FRAME_MAX_BYTES of them (secret values, long rules) per
      // frame; one larger than that still leaves alone (the edge bounds each intent far below).
      // Each is encoded once (its intent's JSON is its desired row's), measured and sent as that
      // text: the frame is byte for byte JSON.stringify({ type: "intents", items: frame }).
      const encoded = items.map(encodeUnsent);
      // UTF-8 takes at most 3 bytes per UTF-16 unit: a burst well under the cap (the usual case)
      // is one frame without encoding each item to count its bytes.
      let units = 0;
      for (const e of encoded) units += e.length;
      const frames = encoded.length <= FRAME_BATCH && units * 3 <= FRAME_MAX_BYTES ? [encoded] : batches(encoded, FRAME_BATCH, FRAME_MAX_BYTES, utf8Bytes);
      for (const frame of frames) this.sendText(`{"type":"intents","items":[${frame.join(",")}]}`);
    };
    const needs = items.filter((i) => i.intent.desired.state !== "deleted" && i.intent.team && transformSecrets(i.intent.networkRules).length);
    // A team this session's profile or policy set left out (a first sandbox here): its profiles
    // and policies go first (a sandbox must not start without its team's restrictions).
    const missing = (held: HeldTeams, wanted: boolean) =>
      new Set(wanted ? items.flatMap((i) => (i.intent.desired.state !== "deleted" && i.intent.team && !held.present(i.intent.team) ? [i.intent.team] : [])) : []);
    const newTeams = missing(this.profileTeams, this.appliesProfiles());
    const newPolicyTeams = missing(this.policyTeams, true);
    if (!needs.length && !newTeams.size && !newPolicyTeams.size && !this.secretsChain) return go();
    const chain: Promise<void> = (this.secretsChain ?? Promise.resolve())
      .then(async () => {
        // Independent sends (each keeps its own order): the intent waits for the slower, not both.
        const [policies, profiles] = await Promise.all([newPolicyTeams.size ? this.sendTrafficPolicies(newPolicyTeams) : null, newTeams.size ? this.sendSecurityProfiles(newTeams) : null]);
        if (policies && !policies.sent) throw new Error("the agent did not get the traffic policies");
        if (profiles && !profiles.sent) throw new Error("the agent did not get the security profiles");
      })
      .then(() => this.attachSecrets(needs).catch((err: unknown) => LOG.error("secrets for intents", { error: err })))
      .then(go, (err: unknown) => this.holdIntents(items, err))
      .finally(() => {
        if (this.secretsChain === chain) this.secretsChain = null;
      });
    this.secretsChain = chain;
  }

  /** A new team's intents wait for its profiles and policies (a sandbox must not start without
   * them): while the agent stays connected they are retried; otherwise its next session
   * redelivers them. */
  private holdIntents(items: typeof this.unsent, err: unknown): void {
    LOG.warn("intents held until their teams' security profiles and traffic policies reach the agent", { error: err });
    if (!this.agentSocket()) return;
    this.unsent.unshift(...items);
    this.unsentFlush ??= setTimeout(() => this.flushIntents(), PROFILES_RETRY_MS);
  }

  /** Per team of `teams`, the values of the secrets that its own profiles'
   * `tokenTransformation`s name, read now; undefined when there are none to send, no SECRETS_KEY,
   * or the agent did not say it enforces `network.rules` (it would not hold them apart). */
  private async profileSecrets(profiles: SecurityProfileEntry[], teams: Set<string>): Promise<Record<string, Record<string, string>> | undefined> {
    const key = this.env.SECRETS_KEY;
    if (!key) return undefined;
    // Only a team's own profiles name its secrets (a global one may not: globalProfileRefusal).
    const named = (team: string) => profiles.filter((p) => p.team === team).flatMap((p) => tokenSecretNames(p.spec));
    const out: Record<string, Record<string, string>> = {};
    for (const team of teams) {
      const names = [...new Set(named(team))];
      const values = await teamSecretValues(getDb(this.env), key, team, names);
      if (values.size) out[team] = Object.fromEntries(values);
    }
    return Object.keys(out).length ? out : undefined;
  }

  /** Each item gets the values of the secrets its own rules name (only those), read now: the
   * frame carries them, the outbox never does. Without a SECRETS_KEY none are sent, and the
   * proxy leaves the placeholders as they are. */
  private async attachSecrets(items: { intent: Intent; secrets?: Record<string, string> }[]): Promise<void> {
    const key = this.env.SECRETS_KEY;
    if (!key || !items.length) return;
    const db = getDb(this.env);
    for (const item of items) {
      const values = await teamSecretValues(db, key, item.intent.team!, transformSecrets(item.intent.networkRules).map((n) => n.toLowerCase()));
      item.secrets = Object.fromEntries(values);
    }
  }

  private send(msg: EdgeMessage): void {
    this.sendText(JSON.stringify(msg));
  }

  /** Sends a frame already encoded (an EdgeMessage as JSON). */
  private sendText(frame: string): void {
    const ws = this.agentSocket();
    if (!ws) return;
    try {
      ws.send(frame);
    } catch (err) {
      // The socket died under us: webSocketClose follows and marks the session disconnected.
      LOG.warn("send failed", { error: err });
    }
  }

  /** Delivers observations to their owner DO, in order per owner, without blocking the socket. */
  private route(owner: Owner, observations: Observation[]): void {
    const key = owner.kind === "pool" ? `pool:${owner.id}` : `sandbox-group:${sandboxGroupOf(observations[0]?.sandboxId ?? "")}`;
    const prev = this.routes.get(key) ?? Promise.resolve();
    const next = prev.then(() => this.deliver(owner, observations));
    this.routes.set(key, next);
    void next.finally(() => {
      if (this.routes.get(key) === next) this.routes.delete(key);
    });
  }

  /**
   * A failed call is retried a bounded number of times (later observations of the owner wait
   * behind it, keeping their order); then the batch is dropped: the agent repeats state on change
   * and in every hello, so it heals then.
   */
  private async deliver(owner: Owner, observations: Observation[]): Promise<void> {
    for (let attempt = 0; ; attempt++) {
      try {
        if (owner.kind === "pool") {
          await stubOf(this.env.POOL, owner.id).observeBatch(observations);
        } else if (owner.kind === "sandbox") {
          await this.group(observations[0]!.sandboxId).observeBatch(observations);
        }
        return;
      } catch (err) {
        if (attempt >= ROUTE_RETRY_MS.length) {
          LOG.warn("routing observations failed; dropped", { observations: observations.length, owner: owner.kind, attempts: attempt + 1, error: err });
          return;
        }
        await new Promise((r) => setTimeout(r, ROUTE_RETRY_MS[attempt]));
      }
    }
  }

  /** A sandbox's group (one method, so tests can make the call fail). */
  private group(sandboxId: string): Pick<ReturnType<typeof sandboxGroupStub>, "observeBatch"> {
    return sandboxGroupStub(this.env, sandboxId);
  }

  private awaitAcks(seqs: number[], ms: number, onAck: (a: AckItem) => void): Promise<{ acks: AckItem[]; timedOut: boolean }> {
    if (!seqs.length) return Promise.resolve({ acks: [], timedOut: false });
    return new Promise((resolve) => {
      const acks: AckItem[] = [];
      const cancel = this.timers.after(ms, () => {
        for (const s of seqs) this.waiters.delete(s);
        resolve({ acks, timedOut: true });
      });
      for (const s of seqs) {
        this.waiters.set(s, (a) => {
          onAck(a);
          acks.push(a);
          if (acks.length === seqs.length) {
            cancel();
            resolve({ acks, timedOut: false });
          }
        });
      }
    });
  }

  /** The socket of the current agent session (hello done), if any, other than `going`. */
  private agentSocket(going?: WebSocket): WebSocket | null {
    for (const ws of this.ctx.getWebSockets()) {
      if (ws === going) continue;
      const att = ws.deserializeAttachment() as Attachment | null;
      if (att?.helloAt != null) return ws;
    }
    return null;
  }

  private protocolError(
    ws: WebSocket,
    code: "bad_frame" | "hello_required" | "protocol_version" | "heartbeat_timeout",
    message: string,
    closeCode: number = CloseCode.protocolError,
  ): void {
    try {
      ws.send(JSON.stringify({ type: "error", code, message } satisfies EdgeMessage));
    } catch {
      // already closed
    }
    const att = ws.deserializeAttachment() as Attachment | null;
    if (att?.helloAt != null) {
      ws.serializeAttachment({ ...att, helloAt: null } satisfies Attachment);
      this.apply({ type: "disconnect" });
    }
    this.closeSocket(ws, closeCode, message);
  }

  private closeSocket(ws: WebSocket, code: number, reason: string): void {
    try {
      ws.close(code, closeReason(reason));
    } catch {
      // already closed
    }
  }

  private load(): ClusterState {
    if (this.state) return this.state;
    this.store = openClusterStore(this.ctx.storage.sql);
    const st = this.store.load();
    // After hibernation the socket survives while memory does not: recover the session from it.
    st.connected = this.agentSocket() !== null;
    // What an earlier instance sent is unknown: count it as sent now, so unacked intents are
    // redelivered after the usual delay rather than never (or all at once).
    if (st.connected) for (const e of st.outbox.values()) e.sentAt = Date.now();
    this.state = st;
    return st;
  }
}

/** An intent on its way to the agent: `text` is its JSON when known (else it is encoded here). */
interface Unsent {
  seq: number;
  intent: Intent;
  text?: string;
  traceparent?: string;
  secrets?: Record<string, string>;
}

/** An item of an `intents` frame: JSON.stringify({ seq, intent, traceparent, secrets }), with the
 * intent's own JSON as it was already encoded. */
function encodeUnsent(i: Unsent): string {
  let s = `{"seq":${i.seq},"intent":${i.text ?? JSON.stringify(i.intent)}`;
  if (i.traceparent !== undefined) s += `,"traceparent":${JSON.stringify(i.traceparent)}`;
  if (i.secrets !== undefined) s += `,"secrets":${JSON.stringify(i.secrets)}`;
  return s + "}";
}

function pushTo<K, V>(map: Map<K, V[]>, key: K, value: V): void {
  const list = map.get(key);
  if (list) list.push(value);
  else map.set(key, [value]);
}

/** A close frame's reason is at most 123 bytes of UTF-8 (RFC 6455 5.5): past it `close()` throws
 * and the socket stays open. zod's messages carry "✖" and "→" (3 bytes each): cut at 120
 * characters, a refused frame's reason was over the limit and its session was never closed. */
function closeReason(text: string): string {
  let bytes = 0;
  let out = "";
  for (const ch of text) {
    const cp = ch.codePointAt(0)!;
    bytes += cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    if (bytes > 123) break;
    out += ch;
  }
  return out;
}
