// Plumbing for the L7 handler: the sandbox's side of a connection as a stream that starts with the
// bytes the proxy already read, and an upstream agent that uses the one connection the proxy
// allowed (to the original ip:port) for every request of that client connection.
import http from "node:http";
import https from "node:https";
import type { Socket } from "node:net";
import { Duplex } from "node:stream";
import tls from "node:tls";

/** `client` (paused) as a Duplex whose first bytes are `head`. Node's TLS and HTTP servers read
 * a socket's handle directly, past anything unshifted, so the head is fed through a plain stream. */
export function withHead(client: Socket, head: Buffer): Duplex {
  const d = new Duplex({
    read() {
      client.resume();
    },
    write(chunk: Buffer, _enc, cb) {
      client.write(chunk, cb);
    },
    final(cb) {
      client.end();
      cb();
    },
    destroy(err, cb) {
      client.destroy();
      cb(err);
    },
  });
  // What http.Server asks of a socket.
  Object.assign(d, { setTimeout: () => d, setNoDelay: () => d, setKeepAlive: () => d, remoteAddress: "sandbox" });
  if (head.length) d.push(head);
  client.on("data", (c: Buffer) => {
    if (!d.push(c)) client.pause();
  });
  client.on("end", () => d.push(null));
  client.on("close", () => d.destroy());
  return d;
}

/** An agent with at most one connection: `connect()` (the proxy's allowed upstream), wrapped in
 * TLS toward `servername` when `tlsOptions` is given. */
export function oneConnectionAgent(connect: () => Promise<Socket>, tlsOptions?: tls.ConnectionOptions & { servername?: string }): http.Agent {
  const Base = tlsOptions ? https.Agent : http.Agent;
  const agent = new Base({ keepAlive: true, maxSockets: 1 });
  (agent as unknown as { createConnection: unknown }).createConnection = (_opts: unknown, cb: (err: Error | null, s?: Duplex) => void) => {
    connect().then(
      (raw) => {
        if (!tlsOptions) return cb(null, raw);
        const s = tls.connect({ ...tlsOptions, socket: raw, ALPNProtocols: ["http/1.1"] });
        s.once("secureConnect", () => cb(null, s));
        s.once("error", (e) => cb(e));
      },
      (e: Error) => cb(e),
    );
    return undefined;
  };
  return agent;
}
