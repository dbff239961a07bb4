// Plumbing for the L7 handler: the sandbox's side of a connection as a stream that starts with the
// bytes the proxy already read (upstream sockets: pool.ts).
import type { Socket } from "node:net";
import { Duplex } from "node:stream";

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
