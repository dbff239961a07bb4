// What the agent's ingress does with a user port's connection, which it dials for each request
// (controllers/agent/ingress.ts): the caller's hop-by-hop headers stay with the caller's own
// connection, and the dialled one is closed after the answer (it served that one request); after
// a port answered early, the rest of the client's body is drained only so far before the client's
// connection is closed (review findings 9 and 10).
import { once } from "node:events";
import { createServer as createHttpServer, request, type IncomingHttpHeaders, type Server } from "node:http";
import { connect, createServer as createNetServer, type AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createIngress, type UserPortTarget } from "../../controllers/agent/ingress.ts";
import type { Runtime } from "../../controllers/runtime/runtime.ts";
import { ingressKey, SIGNATURE_HEADER, signIngress } from "../../schema/ingress/signature.ts";
import { waitFor } from "../support/wait-for.ts";

const TOKEN = "user-port-connection-cluster-token";
const SANDBOX = "userportconn000000001";
let ingress: Server;
let ingressPort: number;
let target: UserPortTarget | undefined;

beforeAll(async () => {
  const runtime = new Proxy({}, { get: () => { throw new Error("the runtime serves no user port"); } }) as Runtime;
  ingress = await createIngress({ clusterToken: TOKEN, runtime, userPortTarget: () => target });
  ingress.listen(0, "127.0.0.1");
  await once(ingress, "listening");
  ingressPort = (ingress.address() as AddressInfo).port;
});

afterAll(() => {
  ingress?.closeAllConnections();
  ingress?.close();
});

const sign = async (port: number, method: string, path: string) => signIngress(await ingressKey(TOKEN), { sandboxId: SANDBOX, port, method, pathAndQuery: path }, Date.now());

describe("the ingress and a user port's connection", () => {
  it("keeps the caller's hop-by-hop headers from the port, and closes the port's connection after the answer", async () => {
    let seen: IncomingHttpHeaders = {};
    const port = createHttpServer((req, res) => {
      seen = req.headers;
      res.end("ok");
    });
    // A server with no idle timeout of its own (many are): only the ingress can close it.
    port.keepAliveTimeout = 0;
    port.listen(0, "127.0.0.1");
    await once(port, "listening");
    target = { host: "127.0.0.1", port: (port.address() as AddressInfo).port };
    try {
      for (let i = 0; i < 3; i++) {
        const headers = { "e2b-sandbox-id": SANDBOX, "e2b-sandbox-port": "8000", [SIGNATURE_HEADER]: await sign(8000, "GET", "/"), connection: "keep-alive, x-hop", "keep-alive": "timeout=600", "x-hop": "mine", "x-end": "theirs" };
        const status = await new Promise<number>((done, fail) => {
          request({ host: "127.0.0.1", port: ingressPort, path: "/", headers, agent: false }, (res) => {
            res.resume();
            res.once("end", () => done(res.statusCode ?? 0));
          }).on("error", fail).end();
        });
        expect(status).toBe(200);
      }
      expect(seen["x-end"]).toBe("theirs");
      expect(seen["x-hop"]).toBeUndefined();
      expect(seen["keep-alive"]).toBeUndefined();
      expect(seen.connection).toBe("close");
      // No connection from the ingress is left open at the port.
      await waitFor(async () => (await new Promise<number>((r) => port.getConnections((_e, n) => r(n)))) === 0, { what: "the port's connections to close" });
    } finally {
      port.closeAllConnections();
      port.close();
    }
  });

  it("after an early answer, drains only so much of the client's body, then closes the client's connection", async () => {
    // A port that answers 413 to the first bytes and closes without reading the rest.
    const port = createNetServer((s) => {
      s.on("error", () => {});
      s.once("data", () => s.end("HTTP/1.1 413 Content Too Large\r\ncontent-length: 9\r\nconnection: close\r\n\r\ntoo large", () => s.destroy()));
    });
    port.listen(0, "127.0.0.1");
    await once(port, "listening");
    target = { host: "127.0.0.1", port: (port.address() as AddressInfo).port };
    const TOTAL = 256 * 1024 * 1024;
    const head = ["POST /upload HTTP/1.1", "host: ingress", `e2b-sandbox-id: ${SANDBOX}`, "e2b-sandbox-port: 8001", `${SIGNATURE_HEADER}: ${await sign(8001, "POST", "/upload")}`, `content-length: ${TOTAL}`];
    const s = connect(ingressPort, "127.0.0.1");
    s.on("error", () => {});
    await once(s, "connect");
    let answer = "";
    s.on("data", (c: Buffer) => (answer += c.toString("latin1")));
    const closed = new Promise<void>((r) => s.once("close", () => r()));
    let written = 0;
    s.write(`${head.join("\r\n")}\r\n\r\n`);
    const chunk = Buffer.alloc(1024 * 1024);
    try {
      while (written < TOTAL && !s.destroyed) {
        written += chunk.length;
        if (!s.write(chunk)) await Promise.race([new Promise((r) => s.once("drain", r)), closed]);
      }
      await closed;
      expect(answer).toMatch(/^HTTP\/1\.1 413 /);
      // The connection was closed well before the client's body was all sent.
      expect(written, `${written} bytes written`).toBeLessThan(TOTAL);
    } finally {
      s.destroy();
      port.close();
    }
  });
});
