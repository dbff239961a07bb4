import { MAX_TRAFFIC_POLICIES, TrafficPolicyEntry } from "../api/traffic-policy.ts";
import { MAX_SECURITY_PROFILES, SecurityProfileEntry } from "../api/security-profile.ts";
import { z } from "zod";
import { SandboxIdSchema, SnapshotIdSchema } from "./ids.ts";
import { IntentSchema, PauseStrategySchema } from "./intent.ts";
import { ObservationSchema } from "./observation.ts";
import { AutoscalersSchema, UpdateOpsItemsSchema, TrafficPolicyObjectsSchema, SecurityProfileObjectsSchema, ClaimsSchema, QuotasSchema, RepliesSchema, RequestsSchema, SandboxSetsSchema } from "./crd-sync.ts";
import { BuildAcksSchema, BuildEventsSchema, BuildFrameSchema } from "./build.ts";
import { MAX_LOGS_LIMIT, SandboxLogEntrySchema, SandboxLogsQuerySchema } from "../api/sandbox-logs.ts";
import { MAX_FRAME_SANDBOXES, MAX_MESSAGE_LENGTH, MAX_NAME_LENGTH, MAX_PATH_LENGTH } from "../api/limits.ts";
import { batches, FRAME_MAX_BYTES, jsonBytes } from "./batches.ts";

/*
 * The session, over one WebSocket (`GET /agent/v1/connect?cluster=<id>`,
 * `Authorization: Bearer <the cluster's token>`, cluster-token.ts), JSON text frames:
 *
 *   agent → edge  hello          first frame: protocol version, who it is, its FULL inventory
 *   agent → edge  inventory      right after a hello with `more: true`: the rest of its inventory
 *                                (an agent with more than MAX_FRAME_SANDBOXES sandboxes)
 *   edge  → agent welcome        after the edge diffed the inventory: orphans get delete intents,
 *                                missing or outdated sandboxes get their latest intent again,
 *                                and every unacked intent is redelivered (in seq order)
 *   edge  → agent intents        batches of {seq, intent}; seq increases per cluster
 *   agent → edge  ack            per seq, once the intent is accepted (see AckResult); unacked
 *                                intents are redelivered on reconnect and after a timeout; to an
 *                                edge whose welcome lists `ackObservations`, it also carries the
 *                                observations made with the acks (one frame, not two)
 *   agent → edge  observations   whenever a sandbox's phase/readiness/endpoint changes, and after
 *                                applying each intent (with the intent's generation)
 *   agent → edge  heartbeat      now and then with counts (wakes the edge object)
 *   agent → edge  `{"type":"ping"}` exact text, every `heartbeatIntervalMs`; answered
 *                                `{"type":"pong"}` by the runtime without waking the edge object
 *                                (hibernation auto-response). Silence (no frame, no ping) for 3
 *                                intervals: the edge closes the socket (4408) and the agent redials
 *   edge  → agent error          before the edge closes the socket for a protocol error
 *   edge  → agent snapshotDeletes  snapshots to free (best effort: sent while connected)
 *   edge  → agent trafficPolicies  every TrafficPolicy and GlobalTrafficPolicy in force, whole
 *                                (after each welcome and on every change; an older agent ignores it)
 *   edge  → agent securityProfiles  every GlobalSecurityProfile and the served teams' SecurityProfiles, whole
 *                                (likewise)
 *   edge  → agent rootfsDeletes    a deleted template's built root filesystems (best effort)
 *   agent → edge  sandboxsets, requests, claims, quotas, autoscalers, updateops, trafficpolicyobjects, securityprofileobjects; edge → agent replies: the cluster's
 *                                custom resources (kubernetes driver), see crd-sync.ts
 *   edge  → agent build, buildAcks; agent → edge buildEvents: template builds, see build.ts
 *   edge  → agent logsRequest    a sandbox's logs (E2B's logs routes); the agent answers `logs`
 *                                with the same id (an older agent ignores it: the edge times out)
 *
 * What the agent sends is bounded (schema/api/limits.ts): names, lists of sandboxes (a cluster's
 * fleet at most) and messages, so a broken agent cannot send an unbounded frame (bad_frame).
 *
 * Delivery is at-least-once and the agent is level-based, so duplicates are harmless.
 */

/** A list about sandboxes in one frame: at most a cluster's fleet. */
const sandboxes = <T extends z.ZodType>(item: T) => z.array(item).max(MAX_FRAME_SANDBOXES, `at most ${MAX_FRAME_SANDBOXES} sandboxes per frame`);

export const CapacitySchema = z.object({
  sandboxes: z.number().int().nonnegative().optional(),
  cpuCount: z.number().nonnegative().optional(),
  memoryMB: z.number().int().nonnegative().optional(),
});

export const HelloSchema = z.object({
  type: z.literal("hello"),
  protocol: z.number().int(),
  /** Stable per agent installation (survives restarts); used in logs and status. */
  agentId: z.string().min(1).max(MAX_NAME_LENGTH),
  agentVersion: z.string().max(MAX_NAME_LENGTH).default("0.0.0"),
  /** Which driver applies intents (`local`, `kubernetes`) and the isolation it achieved. */
  driver: z.string().min(1).max(MAX_NAME_LENGTH),
  isolation: z.string().max(MAX_NAME_LENGTH).default("unknown"),
  /** Where the edge sends data-plane requests for this cluster's sandboxes (the agent's ingress). */
  ingress: z.object({ url: z.string().min(1).max(MAX_PATH_LENGTH) }),
  capabilities: z
    .object({
      pauseStrategies: z.array(PauseStrategySchema).max(8).default(["Freeze"]),
      /** Whether this agent builds templates (build.ts); a cluster without a builder answers 501. */
      builder: z.boolean().default(false),
      /** Whether this agent's driver enforces E2B `network.rules` (credential injection in its
       * proxy); absent: an agent that does not say (the edge accepts rules for it). */
      networkRules: z.boolean().optional(),
    })
    .prefault({}),
    /** What the cluster can still take (for placement across clusters); omitted = unknown. */
  capacity: CapacitySchema.optional(),
  /** Every sandbox the agent manages right now, as observations. Full, not incremental: with
   * more than MAX_FRAME_SANDBOXES, the first of them, and the rest in `inventory` frames (`more`). */
  inventory: sandboxes(ObservationSchema),
  /** The inventory goes on in `inventory` frames sent right after this one; the edge answers the
   * hello (welcome) once their last (`more: false`) has come. */
  more: z.boolean().optional(),
});
export type Hello = z.infer<typeof HelloSchema>;
export type HelloInput = z.input<typeof HelloSchema>;

/**
 * `applied`: desired state reached or its immediate step done (e.g. a running member re-initialised
 * with the new token and env vars); `accepted`: recorded and converging (e.g. still creating);
 * `stale`: the agent already has this or a newer generation; `rejected`: permanently invalid here
 * (message says why) — the owner sees it as a failure instead of waiting for a timeout.
 */
export const AckResultSchema = z.enum(["applied", "accepted", "stale", "rejected"]);
export type AckResult = z.infer<typeof AckResultSchema>;

export const AckItemSchema = z.object({
  seq: z.number().int().nonnegative(),
  sandboxId: SandboxIdSchema,
  generation: z.number().int().nonnegative(),
  result: AckResultSchema,
  message: z.string().max(MAX_MESSAGE_LENGTH).optional(),
  /** The snapshot this generation asked for was not taken (the sandbox is as the intent says):
   * a CamelCase reason (`Unsupported`: the driver cannot take snapshots) and the error. */
  snapshotError: z.object({ reason: z.string().max(MAX_NAME_LENGTH), message: z.string().max(MAX_MESSAGE_LENGTH) }).optional(),
});
export type AckItem = z.infer<typeof AckItemSchema>;

/**
 * Welcome feature: this edge reads `observations` inside an `ack` frame. An agent sends the
 * observations made with its acks in that one frame only when the edge lists it (an older edge's
 * schema would drop the field unread); each frame is an invocation of the edge's ClusterDO, and an
 * ack is nearly always made beside its sandbox's observation (the reconcile pass that settled it).
 */
export const ACK_OBSERVATIONS_FEATURE = "ackObservations";

/** Acks, and (to an edge with ACK_OBSERVATIONS_FEATURE) the observations made with them: the edge
 * applies the acks first, then the observations, as if they came as an `ack` and an `observations`
 * frame in that order. */
export const AckSchema = z.object({
  type: z.literal("ack"),
  items: sandboxes(AckItemSchema).min(1),
  observations: sandboxes(ObservationSchema).optional(),
});

export const ObservationsSchema = z.object({
  type: z.literal("observations"),
  items: sandboxes(ObservationSchema).min(1),
});

/** The rest of a hello's inventory (a hello with `more: true`), in order; the last says `more: false`. */
export const InventorySchema = z.object({
  type: z.literal("inventory"),
  items: sandboxes(ObservationSchema),
  more: z.boolean(),
});

export type Inventory = z.infer<typeof InventorySchema>;

/** A hello as the frames that carry it: the hello with the first sandboxes of its inventory, then
 * the rest in `inventory` frames (`more` on all but the last), each at most `part` sandboxes and
 * about `bytes` of JSON (observations with long condition messages reach the edge's 32 MiB message
 * limit well before MAX_FRAME_SANDBOXES). One frame, as before, when the inventory fits. */
export function helloFrames(hello: HelloInput, part = MAX_FRAME_SANDBOXES, bytes = FRAME_MAX_BYTES): (HelloInput | z.input<typeof InventorySchema>)[] {
  const all = hello.inventory;
  // UTF-8 takes at most 3 bytes per UTF-16 unit: a hello well under the cap (the usual case) is not
  // measured item by item.
  if (all.length <= part && JSON.stringify(hello).length * 3 <= bytes) return [hello];
  // The hello's own fields ride in the first frame; a few KiB at most (ingress URL, names).
  const parts = batches(all, part, bytes - jsonBytes({ ...hello, inventory: [], more: true }), itemBytes);
  if (parts.length <= 1) return [hello];
  const frames: (HelloInput | z.input<typeof InventorySchema>)[] = [{ ...hello, inventory: parts[0]!, more: true }];
  for (let k = 1; k < parts.length; k++) frames.push({ type: "inventory", items: parts[k]!, more: k < parts.length - 1 });
  return frames;
}

/** An item's share of a frame's JSON: its own and the comma after it. */
export const itemBytes = (item: unknown): number => jsonBytes(item) + 1;

export const HeartbeatSchema = z.object({
  type: z.literal("heartbeat"),
  /** Agent clock, ms since the epoch. */
  at: z.number().int().nonnegative(),
  sandboxes: z.number().int().nonnegative(),
  /** Intents received but not yet converged (a backlog the edge can show). */
  pending: z.number().int().nonnegative().default(0),
  capacity: CapacitySchema.optional(),
});

/** The agent's answer to a logsRequest: at most a page of entries (schema/api/sandbox-logs.ts). */
export const LogsSchema = z.object({
  type: z.literal("logs"),
  id: z.string().min(1).max(64),
  entries: z.array(SandboxLogEntrySchema).max(MAX_LOGS_LIMIT),
});

/** Every frame the agent may send (except the raw ping, which the edge runtime answers itself). */
export const AgentMessageSchema = z.discriminatedUnion("type", [
  HelloSchema,
  InventorySchema,
  AckSchema,
  ObservationsSchema,
  HeartbeatSchema,
  SandboxSetsSchema,
  RequestsSchema,
  ClaimsSchema,
  QuotasSchema,
  AutoscalersSchema,
  UpdateOpsItemsSchema,
  TrafficPolicyObjectsSchema,
  SecurityProfileObjectsSchema,
  BuildEventsSchema,
  LogsSchema,
]);
export type AgentMessage = z.infer<typeof AgentMessageSchema>;
export type AgentMessageInput = z.input<typeof AgentMessageSchema>;

export const WelcomeSchema = z.object({
  type: z.literal("welcome"),
  protocol: z.number().int(),
  cluster: z.string(),
  /** Changes on every accepted hello; an agent seeing a new one knows the edge resynced it. */
  sessionId: z.string(),
  heartbeatIntervalMs: z.number().int().positive(),
  resync: z.object({
    orphans: z.number().int().nonnegative(),
    recreated: z.number().int().nonnegative(),
    redelivered: z.number().int().nonnegative(),
  }),
  /** Optional message types this edge understands beyond the core session (crd-sync.ts);
   * an older edge omits it, so the agent sends none of them. */
  features: z.array(z.string()).default([]),
});
export type Welcome = z.infer<typeof WelcomeSchema>;

/** A W3C traceparent header value (version 00). */
export const TraceparentSchema = z.string().regex(/^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$/, "a W3C traceparent");

export const IntentsSchema = z.object({
  type: z.literal("intents"),
  /** `traceparent`: the W3C trace context of the request that caused the intent (when traced),
   * so the agent's reconcile of it joins the request's trace. */
  /** `secrets`: the values of the secrets the intent's `networkRules` name (and only those), for
   * the agent's memory: never persisted, logged or given to the sandbox. */
  items: z
    .array(z.object({ seq: z.number().int().nonnegative(), intent: IntentSchema, traceparent: TraceparentSchema.optional(), secrets: z.record(z.string(), z.string()).optional() }))
    .min(1),
});
export type Intents = z.infer<typeof IntentsSchema>;

export const ProtocolErrorSchema = z.object({
  type: z.literal("error"),
  code: z.enum(["protocol_version", "bad_frame", "hello_required", "replaced", "heartbeat_timeout"]),
  message: z.string(),
});

export const LogsRequestSchema = z.object({
  type: z.literal("logsRequest"),
  id: z.string().min(1).max(64),
  sandboxId: SandboxIdSchema,
  query: SandboxLogsQuerySchema,
});
export type LogsRequest = z.infer<typeof LogsRequestSchema>;

/** Snapshots to free on the agent (a deleted E2B snapshot). Unknown ids are fine. */
export const SnapshotDeletesSchema = z.object({
  type: z.literal("snapshotDeletes"),
  ids: z.array(SnapshotIdSchema).min(1).max(1000),
});

/** The TrafficPolicies (team) and GlobalTrafficPolicies in force for this cluster
 * (schema/api/traffic-policy.ts): every global one and those of the teams the cluster serves
 * (ClusterDO.sendTrafficPolicies), replacing what the agent had. */
export const TrafficPoliciesSchema = z.object({
  type: z.literal("trafficPolicies"),
  policies: z.array(TrafficPolicyEntry).max(MAX_TRAFFIC_POLICIES),
});
export type TrafficPolicies = z.infer<typeof TrafficPoliciesSchema>;
/** The SecurityProfiles (team) and GlobalSecurityProfiles in force for this cluster
 * (schema/api/security-profile.ts): every global one and those of the teams the cluster serves
 * (ClusterDO.sendSecurityProfiles), replacing what the agent had. */
export const SecurityProfilesSchema = z.object({
  type: z.literal("securityProfiles"),
  profiles: z.array(SecurityProfileEntry).max(MAX_SECURITY_PROFILES),
  /** Per team (of those the set holds), the values of the secrets its own profiles'
   * `tokenTransformation`s name (only those): sent only to an agent that said it enforces
   * `network.rules` (it keeps them in memory, never persisted, logged or given to a sandbox). */
  secrets: z.record(z.string(), z.record(z.string(), z.string())).optional(),
});
/** Built templates' root filesystems (`b-<buildID>`) to free on the agent (a deleted template):
 * best effort, like snapshotDeletes. Unknown names are fine. */
export const RootfsDeletesSchema = z.object({
  type: z.literal("rootfsDeletes"),
  names: z.array(z.string().regex(/^b-[a-z0-9-]{1,64}$/)).min(1).max(1000),
});

/** Every frame the edge may send (except the raw pong). */
export const EdgeMessageSchema = z.discriminatedUnion("type", [
  WelcomeSchema,
  IntentsSchema,
  ProtocolErrorSchema,
  RepliesSchema,
  BuildFrameSchema,
  BuildAcksSchema,
  LogsRequestSchema,
  SnapshotDeletesSchema,
  TrafficPoliciesSchema,
  SecurityProfilesSchema,
  RootfsDeletesSchema,
]);
export type EdgeMessage = z.infer<typeof EdgeMessageSchema>;

/** Liveness frames, compared byte for byte by the hibernation auto-response. */
export const PING_FRAME = '{"type":"ping"}';
export const PONG_FRAME = '{"type":"pong"}';

/** Parses one text frame; never throws. */
export function parseFrame<T extends z.ZodType>(
  schema: T,
  text: string,
): { ok: true; value: z.infer<T> } | { ok: false; error: string } {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    return { ok: false, error: "frame is not JSON" };
  }
  const parsed = schema.safeParse(json);
  return parsed.success ? { ok: true, value: parsed.data } : { ok: false, error: z.prettifyError(parsed.error) };
}
