// What the proxy's paths share: connecting to checked addresses, a raw HTTP reply for a client
// that spoke HTTP, and the decision counters.
import { connect, type Socket } from "node:net";
import { egressDecisions, egressDenials } from "../lib/metrics.ts";

// Counted per verdict (a connection, a plain-HTTP request or a DNS name), never per sandbox or host.
export const ALLOWED = egressDecisions.labels({ decision: "allow" });
export const DENIED = egressDecisions.labels({ decision: "deny" });

/** Counts a refusal under both counters; `source` is a bounded kind (metrics.ts egressDenials). */
export function denied(source: string): void {
  DENIED.inc();
  egressDenials.labels({ source }).inc();
}

/** A connection to the first of `addresses` (all checked) that accepts one, tried in turn, as a
 * client would for a name with several records (`localhost` is often ::1 first). */
export function connectAny(addresses: string[], port: number, timeoutMs: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const attempt = (i: number, last?: Error) => {
      if (i >= addresses.length) return reject(last ?? new Error("no address"));
      const socket = connect({ host: addresses[i]!, port, allowHalfOpen: true });
      const timer = setTimeout(() => socket.destroy(new Error("timed out")), timeoutMs);
      socket.once("connect", () => {
        clearTimeout(timer);
        resolve(socket.off("error", next));
      });
      const next = (err: Error) => {
        clearTimeout(timer);
        attempt(i + 1, err);
      };
      socket.once("error", next);
    };
    attempt(0);
  });
}

export function rawReply(status: string, body: string): string {
  return `HTTP/1.1 ${status}\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`;
}
