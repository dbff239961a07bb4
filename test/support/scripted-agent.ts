// A scripted agent that speaks the real edge↔agent protocol (schema/protocol/) over a real
// WebSocket: inside workerd tests through the Worker's agent-link route (`fetchTransport`), and
// from Node over TCP against the edge running on workerd (`tcpTransport`). It pretends to run
// sandboxes: it acks every intent and reports them Running + ready with an endpoint (after a
// configurable delay), Paused, or Deleted, as the intent asks. No runtime is started.
import {
  ACK_OBSERVATIONS_FEATURE,
  type TrafficPolicies,
  EdgeMessageSchema,
  helloFrames,
  parseFrame,
  PING_FRAME,
  PONG_FRAME,
  PROTOCOL_VERSION,
  type AckItem,
  type BuildFrame,
  type AgentMessageInput,
  type Endpoint,
  type Intent,
  type LogsRequest,
  type ObservationInput,
  type Welcome,
} from "../../schema/protocol/index.ts";
import { clusterTokenFor } from "../../schema/protocol/cluster-token.ts";
import { SandboxLogs } from "../../controllers/agent/sandbox-logs.ts";
import type { SecurityProfileEntry } from "../../schema/api/security-profile.ts";
import { MAX_FRAME_SANDBOXES } from "../../schema/api/limits.ts";

/** The part of a WebSocket the agent uses (the DOM/undici one in Node, workerd's in tests). */
export interface SocketLike {
  send(data: string): void;
  close(code?: number, reason?: string): void;
  addEventListener(type: "message", listener: (ev: { data: unknown }) => void): void;
  addEventListener(type: "close", listener: (ev: { code: number; reason?: string }) => void): void;
}
export interface AcceptableSocket extends SocketLike {
  accept(): void;
}
export type Transport = () => Promise<SocketLike>;

export const AGENT_LINK_PATH = "/agent/v1/connect";

/** Connects through a Worker's fetch (e.g. `exports.default.fetch` in a workerd test). `root` is the
 * edge's CLUSTER_TOKEN: the transport plays the operator too, handing the agent its cluster's own
 * token (schema/protocol/cluster-token.ts). */
export function fetchTransport(
  fetcher: (url: string, init: { headers: Record<string, string> }) => Promise<{ status: number; webSocket: AcceptableSocket | null }>,
  root: string,
  cluster = "local",
): Transport {
  return async () => {
    const res = await fetcher(`http://edge.test${AGENT_LINK_PATH}?cluster=${cluster}`, {
      headers: { Upgrade: "websocket", Authorization: `Bearer ${await clusterTokenFor(root, cluster)}` },
    });
    if (res.status !== 101 || !res.webSocket) throw new Error(`agent link refused: HTTP ${res.status}`);
    res.webSocket.accept();
    return res.webSocket;
  };
}

/** Connects over real TCP from Node, as the real agent does (the `ws` client, no permessage-deflate).
 * `root` is the edge's CLUSTER_TOKEN, as for fetchTransport. */
export function tcpTransport(baseUrl: string, root: string, cluster = "local"): Transport {
  return async () => {
    // Loaded here: workerd tests import this module but never this transport.
    const { default: WebSocket } = await import("ws");
    const url = `${baseUrl.replace(/^http/, "ws")}${AGENT_LINK_PATH}?cluster=${cluster}`;
    const ws = new WebSocket(url, { headers: { Authorization: `Bearer ${await clusterTokenFor(root, cluster)}` }, perMessageDeflate: false });
    return new Promise<SocketLike>((resolve, reject) => {
      ws.addEventListener("open", () => resolve(ws));
      ws.addEventListener("error", () => reject(new Error(`agent link: cannot connect to ${url}`)));
    });
  };
}

export interface ScriptedAgentOptions {
  agentId?: string;
  /** The driver its hello names (default `scripted`). */
  driver?: string;
  /** Says it has a template builder (hello capabilities.builder); builds land in `builds`. */
  builder?: boolean;
  /** Its hello's capabilities.networkRules (absent: says nothing, as an older agent). */
  networkRules?: boolean;
  ingressUrl?: string;
  /** Sandboxes the agent claims to run in its next hello (default: what it runs now). */
  inventory?: ObservationInput[];
  /** Sandboxes of its hello's inventory per frame (the rest in `inventory` frames); default
   * MAX_FRAME_SANDBOXES, as the agent's link. */
  inventoryPart?: number;
  /** Delay before acking an intent, and before reporting a created sandbox Running + ready. */
  ackDelayMs?: number;
  readyDelayMs?: number;
  /** Report observations at all (off: the agent only acks). */
  observe?: boolean;
  protocol?: number;
  endpoint?: (sandboxId: string) => Endpoint;
  /** Send the raw ping every `heartbeatIntervalMs` the edge asks for (default on). */
  ping?: boolean;
  /** Return a message to refuse an intent (acked `rejected`, nothing applied). */
  reject?: (intent: Intent) => string | undefined;
  /** Intents to hold: acked `accepted`, not acted on until `release(sandboxId)` (a slow upgrade). */
  hold?: (intent: Intent) => boolean;
  /** A held intent is acked on its release too, not at once: as the real agent acks a create
   * only after the pass that makes it (bench/kube.ts holds refills so). */
  holdAcks?: boolean;
  /** Why the snapshot an intent asks for is not taken (carried by its ack); default: taken. */
  failSnapshot?: (intent: Intent) => { reason: string; message: string } | undefined;
  /** The reason its observations of a sandbox carry (e.g. RestorePending); default none. */
  reason?: (intent: Intent) => string | undefined;
  /** Send the observations made with acks inside the ack frame when the edge's welcome lists
   * `ackObservations`, as the real agent does (default); false: two frames, as an older agent. */
  ackObservations?: boolean;
  /** Drop the next frame that carries an ack and close the socket instead of sending it, as a
   * link that dies with the frame in flight (a test of redelivery). */
  loseNextAck?: boolean;
}

/** What the scripted agent pretends runs on its cluster. */
export interface FakeSandbox {
  generation: number;
  phase: "Pending" | "Running" | "Paused" | "Deleted";
  intent: Intent;
}

export class ScriptedAgent {
  readonly sandboxes = new Map<string, FakeSandbox>();
  /** The secret values that came with each sandbox's latest intent (the frame item's `secrets`). */
  readonly secrets = new Map<string, Record<string, string> | undefined>();
  /** Every build frame received. */
  readonly builds: BuildFrame[] = [];
  /** The build ids of every buildAcks frame received, in order. */
  readonly buildAcks: string[] = [];
  /** Every intent received, in arrival order (including duplicates and stale ones). */
  readonly received: { seq: number; intent: Intent }[] = [];
  readonly errors: string[] = [];
  /** What it answers logs requests from, and the requests it got. */
  readonly logs = new SandboxLogs();
  /** What it answers network audit requests (`stream: "audit"`) from. */
  readonly audit = new SandboxLogs();
  readonly logsRequests: LogsRequest[] = [];
  /** The last TrafficPolicies the edge sent (null: none yet). */
  trafficPolicies: TrafficPolicies["policies"] | null = null;
  securityProfiles: SecurityProfileEntry[] | null = null;
  /** The profile secrets of the last securityProfiles frame, per team (absent: none sent). */
  profileSecrets: Record<string, Record<string, string>> | undefined;
  /** Snapshot ids the edge asked it to free (snapshotDeletes frames). */
  readonly snapshotDeletes: string[] = [];
  /** Built root filesystems the edge asked it to free (rootfsDeletes frames). */
  readonly rootfsDeletes: string[] = [];
  welcome: Welcome | null = null;
  closed: { code: number; reason?: string } | null = null;
  private ws: SocketLike | null = null;
  private readonly opts: Required<Omit<ScriptedAgentOptions, "inventory" | "networkRules" | "reason" | "loseNextAck">> & Pick<ScriptedAgentOptions, "networkRules" | "reason">;
  /** See ScriptedAgentOptions.loseNextAck. */
  loseNextAck: boolean;
  /** The types of the frames it sent, in order (hellos excluded). */
  readonly sent: string[] = [];
  private inventory: ObservationInput[] | undefined;
  private acks: AckItem[] = [];
  private observations: ObservationInput[] = [];
  private flushScheduled = false;
  private waiters: (() => void)[] = [];
  private pinger: ReturnType<typeof setInterval> | null = null;
  /** Held intents' completions by sandbox id (see `hold`). */
  readonly held = new Map<string, () => void>();

  constructor(opts: ScriptedAgentOptions = {}) {
    this.opts = {
      agentId: opts.agentId ?? "scripted-agent",
      driver: opts.driver ?? "scripted",
      ingressUrl: opts.ingressUrl ?? "http://127.0.0.1:0",
      ackDelayMs: opts.ackDelayMs ?? 0,
      readyDelayMs: opts.readyDelayMs ?? 0,
      observe: opts.observe ?? true,
      protocol: opts.protocol ?? PROTOCOL_VERSION,
      endpoint: opts.endpoint ?? ((id) => ({ runtime: `http://${id}.scripted.invalid:49983` })),
      ping: opts.ping ?? true,
      reject: opts.reject ?? (() => undefined),
      hold: opts.hold ?? (() => false),
      holdAcks: opts.holdAcks ?? false,
      builder: opts.builder ?? false,
      networkRules: opts.networkRules,
      failSnapshot: opts.failSnapshot ?? (() => undefined),
      reason: opts.reason,
      ackObservations: opts.ackObservations ?? true,
      inventoryPart: opts.inventoryPart ?? MAX_FRAME_SANDBOXES,
    };
    this.loseNextAck = opts.loseNextAck ?? false;
    this.inventory = opts.inventory;
  }

  /** Opens a session: hello with the full inventory, then waits for `welcome` (or a close). */
  async connect(transport: Transport, timeoutMs = 5_000): Promise<Welcome> {
    this.welcome = null;
    this.closed = null;
    const ws = await transport();
    this.ws = ws;
    ws.addEventListener("message", (ev) => this.onFrame(String(ev.data)));
    ws.addEventListener("close", (ev) => {
      if (this.ws === ws) {
        this.closed = { code: ev.code, reason: ev.reason };
        this.stopPinging();
      }
      this.notify();
    });
    const inventory = this.inventory ?? [...this.sandboxes].map(([id, s]) => this.observation(id, s));
    this.inventory = undefined;
    const hello = {
      type: "hello" as const,
      protocol: this.opts.protocol,
      agentId: this.opts.agentId,
      driver: this.opts.driver,
      isolation: "none",
      ingress: { url: this.opts.ingressUrl },
      capabilities: { builder: this.opts.builder, ...(this.opts.networkRules === undefined ? {} : { networkRules: this.opts.networkRules }) },
      inventory,
    };
    for (const frame of helloFrames(hello, this.opts.inventoryPart)) this.sendFrame(frame);
    await this.waitUntil(() => this.welcome !== null || this.closed !== null, timeoutMs);
    // Re-read through a method: the callbacks set these fields while this function awaited.
    const welcome = this.welcomed();
    if (this.opts.ping) {
      // Liveness as the real agent does it: the raw ping the edge answers without waking up.
      this.pinger = setInterval(() => this.sendRaw(PING_FRAME), welcome.heartbeatIntervalMs);
      (this.pinger as { unref?: () => void }).unref?.();
    }
    return welcome;
  }

  private stopPinging(): void {
    if (this.pinger) clearInterval(this.pinger);
    this.pinger = null;
  }

  private welcomed(): Welcome {
    if (!this.welcome) throw new Error(`no welcome: socket closed with ${this.closed?.code}; ${this.errors.join("; ")}`);
    return this.welcome;
  }

  /** Drops the connection as a crashed agent would (no goodbye frame). */
  disconnect(): void {
    const ws = this.ws;
    this.ws = null;
    this.stopPinging();
    ws?.close(1000, "bye");
  }

  /** Sends an observation (for scenarios the automatic behaviour does not cover). */
  report(obs: ObservationInput): void {
    this.observations.push(obs);
    this.scheduleFlush();
  }

  /** Sends any text frame, e.g. a malformed one in protocol tests. */
  sendRaw(text: string): void {
    try {
      this.ws?.send(text);
    } catch (err) {
      this.errors.push(`send: ${String(err)}`);
    }
  }

  /** Resolves once `predicate()` holds, re-checked after every frame; rejects after the timeout. */
  waitUntil(predicate: () => boolean, timeoutMs = 5_000): Promise<void> {
    if (predicate()) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const check = () => {
        if (!predicate()) return;
        clearTimeout(timer);
        this.waiters = this.waiters.filter((w) => w !== check);
        resolve();
      };
      const timer = setTimeout(() => {
        this.waiters = this.waiters.filter((w) => w !== check);
        reject(new Error(`scripted agent: condition not met in ${timeoutMs} ms`));
      }, timeoutMs);
      this.waiters.push(check);
    });
  }

  /** Acts on a held intent of `id` (see `hold`). */
  release(id: string): void {
    this.held.get(id)?.();
  }

  /** Ids of the sandboxes it currently runs (phase Running). */
  running(): string[] {
    return [...this.sandboxes].filter(([, s]) => s.phase === "Running").map(([id]) => id);
  }

  private onFrame(text: string): void {
    if (text === PONG_FRAME) return;
    const parsed = parseFrame(EdgeMessageSchema, text);
    if (!parsed.ok) {
      this.errors.push(parsed.error);
      return this.notify();
    }
    const msg = parsed.value;
    switch (msg.type) {
      case "welcome":
        this.welcome = msg;
        break;
      case "error":
        this.errors.push(`${msg.code}: ${msg.message}`);
        break;
      case "intents":
        for (const item of msg.items) {
          this.secrets.set(item.intent.sandboxId, item.secrets);
          this.apply(item.seq, item.intent);
        }
        break;
      case "build":
        this.builds.push(msg);
        break;
      case "buildAcks":
        this.buildAcks.push(...msg.buildIds);
        break;
      case "replies":
        break; // CRD sync answers: test/support/crd-link.ts taps them off the socket
      case "logsRequest":
        // Answered from the agent's own store, filled by the test (`logs.append`).
        this.logsRequests.push(msg);
        this.sendFrame({ type: "logs", id: msg.id, entries: (msg.query.stream === "audit" ? this.audit : this.logs).query(msg.sandboxId, msg.query) });
        break;
      case "snapshotDeletes":
        this.snapshotDeletes.push(...msg.ids);
        break;
      case "trafficPolicies":
        this.trafficPolicies = msg.policies;
        break;
      case "securityProfiles":
        this.securityProfiles = msg.profiles;
        this.profileSecrets = msg.secrets;
        break;
      case "rootfsDeletes":
        this.rootfsDeletes.push(...msg.names);
        break;
      default:
        msg satisfies never;
    }
    this.notify();
  }

  /** Level-based, like the real agent: only a newer generation changes anything. */
  private apply(seq: number, intent: Intent): void {
    this.received.push({ seq, intent });
    const id = intent.sandboxId;
    const current = this.sandboxes.get(id);
    if (current && intent.generation <= current.generation) {
      return this.ack({ seq, sandboxId: id, generation: intent.generation, result: "stale" });
    }
    const refusal = this.opts.reject(intent);
    if (refusal) return this.ack({ seq, sandboxId: id, generation: intent.generation, result: "rejected", message: refusal });
    const snapshotError = intent.snapshot ? this.opts.failSnapshot(intent) : undefined;
    const s: FakeSandbox = { generation: intent.generation, phase: current?.phase ?? "Pending", intent };
    this.sandboxes.set(id, s);
    const settle = () => {
      if (this.sandboxes.get(id) !== s) return; // superseded meanwhile
      const want = intent.desired.state;
      s.phase = want === "running" ? "Running" : want === "paused" ? "Paused" : "Deleted";
      if (s.phase === "Deleted") this.sandboxes.delete(id);
      if (this.opts.observe) this.report(this.observation(id, s));
      this.notify();
    };
    if (this.opts.hold(intent)) {
      const accepted = () => this.ack({ seq, sandboxId: id, generation: intent.generation, result: "accepted" });
      this.held.set(id, () => {
        this.held.delete(id);
        if (this.opts.holdAcks) accepted();
        settle();
      });
      if (!this.opts.holdAcks) accepted();
      return;
    }
    const creating = s.phase === "Pending" && intent.desired.state === "running";
    // Re-init, pause and delete are done before the ack, as the real agent does; a create is
    // acked as accepted and reported Running once "started".
    if (!creating) settle();
    this.after(this.opts.ackDelayMs, () =>
      this.ack({ seq, sandboxId: id, generation: intent.generation, result: creating ? "accepted" : "applied", ...(snapshotError ? { snapshotError } : {}) }),
    );
    if (creating) this.after(this.opts.readyDelayMs, settle);
  }

  private observation(id: string, s: FakeSandbox): ObservationInput {
    return {
      sandboxId: id,
      generation: s.generation,
      phase: s.phase,
      ready: s.phase === "Running",
      endpoint: s.phase === "Running" || s.phase === "Paused" ? this.opts.endpoint(id) : null,
      revision: s.intent.template?.revision,
      observedAt: Date.now(),
      ...(this.opts.reason?.(s.intent) ? { reason: this.opts.reason(s.intent) } : {}),
    };
  }

  private ack(item: AckItem): void {
    this.acks.push(item);
    this.scheduleFlush();
  }

  private after(ms: number, fn: () => void): void {
    if (ms <= 0) fn();
    else setTimeout(fn, ms);
  }

  // Acks and observations of one burst of intents leave in one frame (an edge that reads
  // observations in an ack frame), or one frame each.
  private scheduleFlush(): void {
    if (this.flushScheduled) return;
    this.flushScheduled = true;
    queueMicrotask(() => {
      this.flushScheduled = false;
      const merge = this.opts.ackObservations && this.welcome?.features.includes(ACK_OBSERVATIONS_FEATURE);
      if (merge && this.acks.length && this.observations.length) {
        this.sendFrame({ type: "ack", items: this.acks.splice(0), observations: this.observations.splice(0) });
        return;
      }
      if (this.acks.length) this.sendFrame({ type: "ack", items: this.acks.splice(0) });
      if (this.observations.length) this.sendFrame({ type: "observations", items: this.observations.splice(0) });
    });
  }

  sendFrame(msg: AgentMessageInput): void {
    if (msg.type === "ack" && this.loseNextAck) {
      this.loseNextAck = false;
      this.disconnect();
      return;
    }
    if (msg.type !== "hello" && this.ws) this.sent.push(msg.type);
    try {
      this.ws?.send(JSON.stringify(msg));
    } catch (err) {
      this.errors.push(`send: ${String(err)}`);
    }
  }

  private notify(): void {
    for (const w of [...this.waiters]) w();
  }
}
