/**
 * The edge↔agent protocol version. The agent sends it in `hello`; the edge answers `welcome` with
 * its own and closes the socket (code 4400) when they differ. Bump it for any incompatible change
 * to a message in this folder; additive optional fields do not need a bump.
 */
export const PROTOCOL_VERSION = 1;

/** WebSocket close codes the edge uses, so the agent can tell "retry" from "fix your config". */
export const CloseCode = {
  /** Normal close (edge shutting the session, e.g. a newer connection replaced this one). */
  replaced: 4000,
  /** Frame did not parse or violated the session order (e.g. intent ack before hello). */
  protocolError: 4400,
  /** Nothing (frame or ping) heard for three heartbeat intervals: the agent should reconnect. */
  heartbeatTimeout: 4408,
  /** Bad or missing CLUSTER_TOKEN (never sent: the upgrade is refused with 401 instead). */
  unauthorized: 4401,
} as const;
