// Stand-ins for L7 tests on loopback: an HTTPS server that echoes the request's headers (its
// certificate from a CA of its own, as a public server's would be), and a front that plays the
// redirected path's part: it takes a "sandbox" connection, reads its first bytes, and hands it to
// the L7 handler as the proxy does once L4 allowed it (upstream: the one fixed destination).
import https from "node:https";
import { createSecureContext } from "node:tls";
import { connect, createServer, type AddressInfo, type Server, type Socket } from "node:net";
import { SandboxCa } from "../../controllers/traffic/l7/ca.ts";
import type { L7Connection, L7Handler } from "../../controllers/traffic/l7/handler.ts";
import { sniff } from "../../controllers/traffic/sniff.ts";

export interface EchoServer {
  port: number;
  /** The CA the echo server's certificate chains to (what a sandbox would trust as a public root). */
  ca: string;
  close(): void;
}

export async function startHttpsEcho(names: string[]): Promise<EchoServer> {
  const issuer = await SandboxCa.create("internet-stand-in");
  const server = https.createServer({ SNICallback: (name, cb) => void issuer.leaf(name).then((l) => cb(null, tlsContext(l)), (e: Error) => cb(e)) }, (req, res) => {
    let n = 0;
    req.on("data", (c: Buffer) => (n += c.length));
    // `conn` tells the proxy's upstream connections apart, `resumed` whether its TLS session was;
    // /close answers `Connection: close`.
    const socket = req.socket as import("node:tls").TLSSocket;
    const seen = { method: req.method, url: req.url, headers: req.headers, bodyBytes: 0, conn: socket.remotePort, resumed: socket.isSessionReused() };
    req.on("end", () => res.writeHead(200, { "content-type": "application/json", ...(req.url === "/close" ? { connection: "close" } : {}) }).end(JSON.stringify({ ...seen, bodyBytes: n })));
  });
  // An upgrade is answered 101 with the Authorization it carried, then echoes bytes back.
  server.on("upgrade", (req, socket: import("node:stream").Duplex) => {
    socket.write(`HTTP/1.1 101 Switching Protocols\r\nupgrade: echo\r\nconnection: Upgrade\r\nx-saw-authorization: ${req.headers.authorization ?? ""}\r\n\r\n`);
    socket.pipe(socket);
  });
  await Promise.all(names.map((n) => issuer.leaf(n)));
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return { port: (server.address() as AddressInfo).port, ca: issuer.certPem, close: () => (server.close(), server.closeAllConnections()) };
}

function tlsContext(l: { cert: string; key: string }) {
  return createSecureContext({ cert: l.cert, key: l.key });
}

export interface Front {
  port: number;
  /** Every connection handed over, as the handler got it. */
  handed: L7Connection[];
  close(): void;
}

/** Connections to the front go to `handler` as sandbox `sandbox`'s, bound for 127.0.0.1:`upstreamPort`. */
export async function startFront(handler: L7Handler, sandbox: string, upstreamPort: number): Promise<Front> {
  const handed: L7Connection[] = [];
  const sockets = new Set<Socket>();
  const upstreams = new Set<Socket>();
  const server: Server = createServer((client) => {
    sockets.add(client);
    client.on("close", () => sockets.delete(client)).on("error", () => {});
    client.once("data", (head: Buffer) => {
      client.pause();
      const seen = sniff(head);
      const conn: L7Connection = {
        sandbox,
        ip: "127.0.0.1",
        port: upstreamPort,
        sniffed: seen && "name" in seen ? seen : seen ? { kind: seen.kind } : undefined,
        head,
        client,
        allowedBy: "allowOut \"127.0.0.1\"",
        connectUpstream: (opts) =>
          new Promise((resolve, reject) => {
            const up = connect(upstreamPort, "127.0.0.1", () => resolve(up)).once("error", reject);
            upstreams.add(up);
            up.on("close", () => upstreams.delete(up));
            // A shared socket outlives this client (the handler's pool keeps it), as redirected.ts does.
            if (opts?.shared) return void up.on("error", () => up.destroy());
            up.on("close", () => client.destroy());
            client.on("close", () => up.destroy());
          }),
      };
      handed.push(conn);
      handler.handle(conn);
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return {
    port: (server.address() as AddressInfo).port,
    handed,
    close: () => {
      for (const s of [...sockets, ...upstreams]) s.destroy();
      server.close();
    },
  };
}
