// A WebSocket echo server "inside a sandbox" (on the loopback address its pod's runtime-url names):
// the handshake by hand and short text frames echoed back, enough to prove that an upgrade passes
// the gateway and the ingress both ways.
import { createHash } from "node:crypto";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";

const GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

export async function startWsEcho(): Promise<{ port: number; server: Server }> {
  const server = createServer((_req, res) => res.writeHead(426).end("upgrade required"));
  server.on("upgrade", (req, socket) => {
    const accept = createHash("sha1").update(`${req.headers["sec-websocket-key"]}${GUID}`).digest("base64");
    socket.write(`HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${accept}\r\n\r\n`);
    socket.on("data", (frame: Buffer) => {
      // Client frames are masked: FIN+opcode, 0x80|len (< 126), 4-byte mask, payload.
      const len = frame[1]! & 0x7f;
      const mask = frame.subarray(2, 6);
      const payload = Buffer.from(frame.subarray(6, 6 + len)).map((b, i) => b ^ mask[i % 4]!);
      if ((frame[0]! & 0x0f) === 0x8) return socket.end();
      socket.write(Buffer.concat([Buffer.from([0x81, payload.length]), payload]));
    });
  });
  await new Promise<void>((ok) => server.listen(0, "127.0.0.1", ok));
  return { port: (server.address() as AddressInfo).port, server };
}
