// The ClusterDO's RPC surface (what PoolDO and SandboxGroupDO call). Every method resolves to a typed
// result; none throws across the RPC boundary.
import type { Refusal } from "../../schema/errors.ts";
import type { IndexOp } from "../store/sandbox-index.ts";
import type { AckItem, Endpoint } from "../../schema/protocol/index.ts";
import type { SandboxLogEntry } from "../../schema/api/sandbox-logs.ts";

export interface EnqueueOptions {
  /**
   * Wait up to this long for the agent's acks of these intents (the create route's bounded wait
   * for a claimed member's runtime re-init). 0 or absent: return once durably queued.
   */
  awaitAckMs?: number;
  /**
   * With `awaitAckMs`: the endpoint the owner knows for the sandbox. The observation that follows
   * an `applied` ack of a running intent says nothing more when it reports Running, ready, at this
   * endpoint, so it is not routed back to the owner (one SandboxGroupDO call less per claim).
   */
  knownEndpoint?: Endpoint | null;
  /**
   * Index ops to commit with the intents (a create's or a kill's row): queued for SandboxIndexDO with other
   * enqueues' ops in one call, tried once before the answer, which says how it went (`indexed`).
   * Never retried here: the owner keeps the op until it is committed and rewrites it in its own
   * ordered queue, behind the sandbox's later writes.
   */
  index?: IndexOp[];
  /** The W3C trace context of the request behind these intents, carried in their frame to the
   * agent (first delivery only; a redelivery is not part of the request). */
  traceparent?: string;
}

export type EnqueueResult =
  | {
      ok: true;
      /** Outbox sequence number per intent, in order; 0 for an intent dropped as stale/duplicate. */
      seqs: number[];
      /** Whether an agent session is open right now (intents wait in the outbox otherwise). */
      connected: boolean;
      /** With `awaitAckMs`: the acks that arrived in time (all of them unless `timedOut`). */
      acks: AckItem[];
      timedOut: boolean;
      /** With `index`: whether those ops were committed (false: the owner writes them again). */
      indexed?: boolean;
    }
  | { ok: false; error: Refusal };

export interface ClusterStatus {
  cluster: string | null;
  connected: boolean;
  agentId: string | null;
  driver: string | null;
  isolation: string | null;
  /** Base URL of the agent's ingress, where the gateway sends data-plane requests. */
  ingressUrl: string | null;
  sessionId: string | null;
  /** ms since the epoch of the last frame or ping from the agent. */
  lastSeenAt: number | null;
  /** Intents not yet acked, and sandboxes with a desired state on this cluster. */
  pending: number;
  sandboxes: number;
}

export type LogsResult = { ok: true; entries: SandboxLogEntry[] } | { ok: false; error: Refusal };
