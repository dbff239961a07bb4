// The agent's session with its ClusterDO: one outbound WebSocket (no inbound port needed), hello
// with the full inventory on every connect, intents in, acks and observations out, heartbeats,
// and reconnect with capped, jittered backoff. Frames are parsed with the shared protocol schemas.
import type { TrafficPolicyEntry } from "../../schema/api/traffic-policy.ts";
import type { SecurityProfileEntry } from "../../schema/api/security-profile.ts";
import type { SecurityProfileItemInput, TrafficPolicyItemInput } from "../../schema/protocol/crd-sync.ts";
import WebSocket from "ws";
import type { z } from "zod";
import {
  ACK_OBSERVATIONS_FEATURE,
  AckItemSchema,
  AgentMessageSchema,
  boundedObservation,
  EdgeMessageSchema,
  helloFrames,
  itemBytes,
  PING_FRAME,
  PROTOCOL_VERSION,
  parseFrame,
  type AgentMessageInput,
  type ClaimItemInput,
  type CrdSyncFeature,
  type HelloInput,
  type Intent,
  type LogsRequest,
  type ObservationInput,
  type ReplyItem,
  type SandboxRequestItem,
  type SandboxSetItemInput,
  type TeamQuotaItem,
  type PoolAutoscalerItemInput,
  type UpdateOpsItemInput,
  type Welcome,
} from "../../schema/protocol/index.ts";
import { BUILD_ACKS_FEATURE, BUILD_FEATURE, type BuildEvents, type BuildFrame } from "../../schema/protocol/build.ts";
import { clipText, MAX_FRAME_SANDBOXES, MAX_MESSAGE_LENGTH } from "../../schema/api/limits.ts";
import { batches, FRAME_MAX_BYTES } from "../../schema/protocol/batches.ts";
import type { SandboxLogEntry } from "../../schema/api/sandbox-logs.ts";
import { backoffMs, type Backoff } from "../lib/work-queue.ts";
import { logger } from "../lib/log.ts";

const LOG = logger("link");

export interface LinkOptions {
  /** Edge base URL, e.g. http://127.0.0.1:8787 (ws/wss is derived). */
  edgeUrl: string;
  clusterId: string;
  token: string;
  /** Builds the hello (its inventory must be current at the time of each connect). */
  hello(): Promise<Omit<HelloInput, "type" | "protocol">>;
  /** Called for each delivered intent; returns the ack result or null to ack later via ack(). */
  onIntent(seq: number, intent: Intent, traceparent?: string, secrets?: Record<string, string>): "stale" | "pending";
  onWelcome?(w: Welcome): void;
  /** A template build the edge hands over (schema/protocol/build.ts). */
  onBuild?(build: BuildFrame): void;
  /** Builds whose results the edge stored (`buildAcks`, to frames sent with `ack`). */
  onBuildAcks?(buildIds: string[]): void;
  /** A sandbox's logs for the edge (E2B's logs routes); absent: answered empty. */
  onLogsRequest?(req: LogsRequest): SandboxLogEntry[];
  /** Snapshots the edge no longer has (a deleted E2B snapshot): free them. */
  onSnapshotDeletes?(ids: string[]): void;
  /** The TrafficPolicies in force, whole (replaces the previous set). */
  onTrafficPolicies?(policies: TrafficPolicyEntry[]): void;
  /** The SecurityProfiles in force, whole (replaces the previous set), and per team the values
   * of the secrets their `tokenTransformation`s name (memory only). */
  onSecurityProfiles?(profiles: SecurityProfileEntry[], secrets: Record<string, Record<string, string>>): void;
  /** A deleted template's built root filesystems (`b-<buildID>`), to free once unused. */
  onRootfsDeletes?(names: string[]): void;
  log?: (msg: string) => void;
}

/** Reconnecting: 200 ms doubling to 10 s, then jittered (many agents must not redial in step). */
const RECONNECT_BACKOFF: Backoff = { baseMs: 200, maxMs: 10_000 };
/** An item the edge has not answered in this long is failed (the caller retries, level-based). */
const REPLY_TIMEOUT_MS = 60_000;

/** What the agent may ask of the edge (crd-sync.ts), without the `id` the link assigns. */
export type EdgeCall =
  | { type: "sandboxsets"; item: DistributiveOmit<SandboxSetItemInput, "id"> }
  | { type: "requests"; item: Omit<SandboxRequestItem, "id"> }
  | { type: "claims"; item: Omit<ClaimItemInput, "id"> }
  | { type: "quotas"; item: Omit<TeamQuotaItem, "id"> }
  | { type: "autoscalers"; item: DistributiveOmit<PoolAutoscalerItemInput, "id"> }
  | { type: "updateops"; item: DistributiveOmit<UpdateOpsItemInput, "id"> }
  | { type: "trafficpolicyobjects"; item: DistributiveOmit<TrafficPolicyItemInput, "id"> }
  | { type: "securityprofileobjects"; item: DistributiveOmit<SecurityProfileItemInput, "id"> };
type DistributiveOmit<T, K extends keyof T> = T extends unknown ? Omit<T, K> : never;

interface Waiting {
  resolve(reply: ReplyItem): void;
  reject(err: Error): void;
  timer: NodeJS.Timeout;
}

type AckInput = z.input<typeof AckItemSchema>;

export class Link {
  readonly #o: LinkOptions;
  #ws: WebSocket | undefined;
  #welcomed = false;
  #closed = false;
  #attempt = 0;
  #heartbeat: NodeJS.Timeout | undefined;
  #retry: NodeJS.Timeout | undefined;
  /** Observations made while disconnected: only the newest per sandbox matters (level-based). */
  readonly #pendingObs = new Map<string, ObservationInput>();
  #pendingAcks: AckInput[] = [];
  #flushScheduled = false;
  #connectedWaiters: (() => void)[] = [];
  #features = new Set<string>();
  #nextItem = 0;
  readonly #replies = new Map<string, Waiting>();
  heartbeatStats: () => { sandboxes: number; pending: number } = () => ({ sandboxes: 0, pending: 0 });

  constructor(opts: LinkOptions) {
    this.#o = opts;
  }

  get connected(): boolean {
    return this.#welcomed;
  }

  start(): void {
    this.#connect();
  }

  /**
   * Sends build events now if the session is up: "ack" to an edge that acks their results
   * (BUILD_ACKS_FEATURE: the frame asks it to; `onBuildAcks` hears it), true to one that does not;
   * false when the session is down (the builder keeps them and tries again with its next batch).
   * Nothing is queued here: the builder keeps what is not acked and sends it again.
   */
  sendBuildEvents(items: BuildEvents["items"]): boolean | "ack" {
    const ws = this.#ws;
    if (!ws || !this.#welcomed || ws.readyState !== WebSocket.OPEN || !this.#features.has(BUILD_FEATURE)) return false;
    const ack = this.#features.has(BUILD_ACKS_FEATURE);
    this.#send(ws, { type: "buildEvents", items, ...(ack ? { ack } : {}) });
    return ack ? "ack" : true;
  }

  /** Resolves at the next welcome (or at once if connected). */
  whenConnected(): Promise<void> {
    if (this.#welcomed) return Promise.resolve();
    return new Promise((ok) => this.#connectedWaiters.push(ok));
  }

  /** Whether the connected edge understands this optional message type (welcome.features). */
  supports(feature: CrdSyncFeature): boolean {
    return this.#welcomed && this.#features.has(feature);
  }

  /**
   * Sends one item and resolves with the edge's reply. Rejects when not connected, when the edge
   * does not support the message type, when the session drops before the reply, or after a
   * timeout: the callers are level-based and simply try again.
   */
  call(c: EdgeCall): Promise<ReplyItem> {
    const ws = this.#ws;
    if (!ws || !this.#welcomed) return Promise.reject(new Error("not connected to the edge"));
    if (!this.#features.has(c.type)) return Promise.reject(new Error(`the edge does not support ${c.type}`));
    const id = `${c.type[0]}${(this.#nextItem++).toString(36)}`;
    return new Promise<ReplyItem>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#replies.delete(id);
        reject(new Error(`no reply from the edge to ${c.type} ${id} in ${REPLY_TIMEOUT_MS} ms`));
      }, REPLY_TIMEOUT_MS);
      timer.unref();
      this.#replies.set(id, { resolve, reject, timer });
      try {
        this.#send(ws, { type: c.type, items: [{ ...c.item, id }] } as AgentMessageInput);
      } catch (err) {
        // The item does not parse (e.g. a spec the edge's schema refuses): fail it now.
        clearTimeout(timer);
        this.#replies.delete(id);
        reject(err);
      }
    });
  }

  #failReplies(reason: string): void {
    for (const [id, w] of this.#replies) {
      clearTimeout(w.timer);
      w.reject(new Error(`${reason} before the edge answered ${id}`));
    }
    this.#replies.clear();
  }

  observe(obs: ObservationInput): void {
    this.#pendingObs.set(obs.sandboxId, boundedObservation(obs));
    this.#scheduleFlush();
  }

  ack(item: AckInput): void {
    // The frame bounds a message (schema/protocol/messages.ts); an error's text may be longer.
    this.#pendingAcks.push(item.message ? { ...item, message: clipText(item.message, MAX_MESSAGE_LENGTH) } : item);
    this.#scheduleFlush();
  }

  close(): void {
    this.#closed = true;
    clearInterval(this.#heartbeat);
    clearTimeout(this.#retry);
    this.#ws?.close(1000, "agent stopping");
    this.#failReplies("agent stopping");
  }

  #log(msg: string): void {
    if (this.#o.log) this.#o.log(msg);
    else LOG.warn(msg, { cluster: this.#o.clusterId });
  }

  #connect(): void {
    if (this.#closed) return;
    const url = new URL("/agent/v1/connect", this.#o.edgeUrl);
    url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
    url.searchParams.set("cluster", this.#o.clusterId);
    // No permessage-deflate: frames are small JSON and zlib costs more than it saves
    // (docs/decisions/no-websocket-compression.md).
    const ws = new WebSocket(url, { headers: { authorization: `Bearer ${this.#o.token}` }, perMessageDeflate: false });
    this.#ws = ws;
    ws.onopen = () => void this.#sendHello(ws);
    ws.onmessage = (ev) => this.#onMessage(ws, typeof ev.data === "string" ? ev.data : String(ev.data));
    ws.onerror = () => {}; // onclose follows and decides
    ws.onclose = (ev) => {
      if (this.#ws !== ws) return;
      this.#welcomed = false;
      clearInterval(this.#heartbeat);
      this.#failReplies("session closed");
      if (this.#closed) return;
      if (ev.code === 4400 || ev.code === 4401) this.#log(`edge closed the link: ${ev.code} ${ev.reason}`);
      const delay = backoffMs(++this.#attempt, RECONNECT_BACKOFF) * (0.5 + Math.random() / 2);
      this.#retry = setTimeout(() => this.#connect(), delay);
    };
  }

  async #sendHello(ws: WebSocket): Promise<void> {
    try {
      const hello = await this.#o.hello();
      // The inventory is the truth at this moment; buffered observations it covers are redundant.
      this.#pendingObs.clear();
      // Past MAX_FRAME_SANDBOXES sandboxes the inventory goes on in `inventory` frames.
      for (const frame of helloFrames({ type: "hello", protocol: PROTOCOL_VERSION, ...hello, inventory: hello.inventory.map(boundedObservation) })) this.#send(ws, frame);
    } catch (err) {
      this.#log(`hello failed: ${(err as Error).message}`);
      ws.close(1011, "hello failed");
    }
  }

  #onMessage(ws: WebSocket, text: string): void {
    if (text === '{"type":"pong"}') return;
    const parsed = parseFrame(EdgeMessageSchema, text);
    if (!parsed.ok) {
      this.#log(`unparseable frame from edge: ${parsed.error}`);
      return;
    }
    const msg = parsed.value;
    switch (msg.type) {
      case "welcome": {
        this.#welcomed = true;
        this.#attempt = 0;
        this.#features = new Set(msg.features);
        clearInterval(this.#heartbeat);
        this.#heartbeat = setInterval(() => this.#beat(ws), msg.heartbeatIntervalMs);
        this.#heartbeat.unref();
        this.#o.onWelcome?.(msg);
        this.#flush();
        for (const w of this.#connectedWaiters.splice(0)) w();
        return;
      }
      case "intents": {
        for (const { seq, intent, traceparent, secrets } of msg.items) {
          if (this.#o.onIntent(seq, intent, traceparent, secrets) === "stale") {
            this.ack({ seq, sandboxId: intent.sandboxId, generation: intent.generation, result: "stale" });
          }
        }
        return;
      }
      case "replies": {
        for (const r of msg.items) {
          const w = this.#replies.get(r.id);
          if (!w) continue; // timed out meanwhile
          this.#replies.delete(r.id);
          clearTimeout(w.timer);
          w.resolve(r);
        }
        return;
      }
      case "build":
        this.#o.onBuild?.(msg);
        return;
      case "buildAcks":
        this.#o.onBuildAcks?.(msg.buildIds);
        return;
      case "logsRequest":
        this.#send(ws, { type: "logs", id: msg.id, entries: this.#o.onLogsRequest?.(msg) ?? [] });
        return;
      case "error":
        this.#log(`edge error: ${msg.code}: ${msg.message}`);
        return;
      case "rootfsDeletes":
        this.#o.onRootfsDeletes?.(msg.names);
        return;
      case "snapshotDeletes":
        this.#o.onSnapshotDeletes?.(msg.ids);
        return;
      case "trafficPolicies":
        this.#o.onTrafficPolicies?.(msg.policies);
        return;
      case "securityProfiles":
        this.#o.onSecurityProfiles?.(msg.profiles, msg.secrets ?? {});
        return;
      default: {
        const never: never = msg;
        return never;
      }
    }
  }

  #beat(ws: WebSocket): void {
    const stats = this.heartbeatStats();
    this.#send(ws, PING_FRAME);
    this.#send(ws, { type: "heartbeat", at: Date.now(), sandboxes: stats.sandboxes, pending: stats.pending });
  }

  /** Coalesces acks and observations produced in the same tick into one frame (an edge that
   * reads observations in an ack frame) or one frame each (an older edge). */
  #scheduleFlush(): void {
    if (this.#flushScheduled) return;
    this.#flushScheduled = true;
    queueMicrotask(() => {
      this.#flushScheduled = false;
      this.#flush();
    });
  }

  #flush(): void {
    const ws = this.#ws;
    if (!ws || !this.#welcomed || ws.readyState !== WebSocket.OPEN) return;
    const acks = this.#pendingAcks;
    const obs = [...this.#pendingObs.values()];
    this.#pendingAcks = [];
    this.#pendingObs.clear();
    if (acks.length && obs.length && acks.length <= MAX_FRAME_SANDBOXES && obs.length <= MAX_FRAME_SANDBOXES && this.#features.has(ACK_OBSERVATIONS_FEATURE)) {
      // One frame, not two: each is an invocation of the edge's ClusterDO, and a pass that
      // settles a generation reports its sandbox in the same tick.
      const frame: AgentMessageInput = { type: "ack", items: acks, observations: obs };
      const text = fitting(frame);
      if (text !== undefined) return this.#send(ws, frame, text);
    }
    // Otherwise (an older edge, one kind only, or more than a frame holds: acks buffered while
    // disconnected, a storm of failures with long messages) frames of each kind, all the acks
    // before the observations.
    this.#sendParts(ws, "ack", acks);
    this.#sendParts(ws, "observations", obs);
  }

  /** `items` as `type` frames of at most MAX_FRAME_SANDBOXES items (the edge's schema, and our own
   * check in #send, refuse more) and FRAME_MAX_BYTES (the edge's runtime closes the socket on a
   * message past 32 MiB, and the agent would send the same again after each reconnect), in order. */
  #sendParts(ws: WebSocket, type: "ack" | "observations", items: AckInput[] | ObservationInput[]): void {
    if (!items.length) return;
    if (items.length <= MAX_FRAME_SANDBOXES) {
      const frame = { type, items } as AgentMessageInput;
      const text = fitting(frame);
      if (text !== undefined) return this.#send(ws, frame, text);
    }
    for (const part of batches<AckInput | ObservationInput>(items, MAX_FRAME_SANDBOXES, FRAME_MAX_BYTES - 64, itemBytes)) this.#send(ws, { type, items: part } as AgentMessageInput);
  }

  #send(ws: WebSocket, msg: AgentMessageInput | string, text = typeof msg === "string" ? msg : JSON.stringify(msg)): void {
    if (ws.readyState !== WebSocket.OPEN) return;
    if (typeof msg !== "string") {
      // Parse our own frames too: a malformed frame is a bug here, not something the edge should see.
      const checked = AgentMessageSchema.safeParse(msg);
      if (!checked.success) throw new Error(`agent frame invalid: ${checked.error.message}`);
    }
    ws.send(text);
  }
}

/** `msg` as JSON if it is within FRAME_MAX_BYTES (counted only when it might not be). */
function fitting(msg: AgentMessageInput): string | undefined {
  const text = JSON.stringify(msg);
  return text.length * 3 <= FRAME_MAX_BYTES || Buffer.byteLength(text) <= FRAME_MAX_BYTES ? text : undefined;
}
