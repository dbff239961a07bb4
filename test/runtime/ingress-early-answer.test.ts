// The agent's ingress relays a user port's answer even when the port stopped reading the request
// body: a server that answers early and closes (python's http.server answers a POST it does not
// serve with 501 and closes unread) resets the connection, so writing the rest of the body fails.
// What the server sent before must still reach the client, as it would over TCP (and as nginx or
// Envoy relay it); only without any answer is it a 502.
//
// The order is made certain, not left to the scheduler: the user port (a TCP server in a worker
// thread) answers and resets as soon as it is dialled, while the ingress's event loop is held in
// the dial, so when the ingress first writes the request the reset is already there and the
// answer is still unread in the kernel.
import { once } from "node:events";
import { createServer as createHttpServer, type Server } from "node:http";
import { connect, type AddressInfo } from "node:net";
import { Worker } from "node:worker_threads";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createIngress, type UserPortTarget } from "../../controllers/agent/ingress.ts";
import type { Runtime } from "../../controllers/runtime/runtime.ts";
import { ingressKey, SIGNATURE_HEADER, signIngress } from "../../schema/ingress/signature.ts";

const TOKEN = "early-answer-cluster-token";
const SANDBOX = "earlyanswer0000000001";
const ANSWER = "this port does not take POST\n";

/** The user port: once the ingress has its connection (flag[1] raised), answers it with a complete
 * 501 and resets it (what a close with unread input does), then raises flag[0]. */
const UPSTREAM = `
const { parentPort, workerData } = require("node:worker_threads");
const net = require("node:net");
const flag = new Int32Array(workerData.flag);
const answer = ${JSON.stringify(ANSWER)};
const server = net.createServer((s) => {
  s.on("error", () => {});
  Atomics.wait(flag, 1, 0);
  s.write("HTTP/1.1 501 Not Implemented\\r\\ncontent-type: text/plain\\r\\ncontent-length: " + answer.length + "\\r\\nconnection: close\\r\\n\\r\\n" + answer, () => {
    s.once("close", () => { Atomics.store(flag, 0, 1); Atomics.notify(flag, 0); });
    s.resetAndDestroy();
  });
});
server.listen(0, "127.0.0.1", () => parentPort.postMessage(server.address().port));
`;

let worker: Worker;
let upstreamPort: number;
let flag: Int32Array;
let ingress: Server;
let ingressPort: number;
/** The user port as the driver hands it out (Driver.connectUserPort): connected, and returned
 * only once the port has answered and reset, the ingress's loop held meanwhile. */
const heldDial: UserPortTarget = {
  async connect() {
    Atomics.store(flag, 0, 0);
    const s = connect(upstreamPort, "127.0.0.1");
    await once(s, "connect");
    Atomics.store(flag, 1, 1);
    Atomics.notify(flag, 1);
    // A bound on a broken worker, not a timing: the wait ends when the worker raises the flag.
    if (Atomics.wait(flag, 0, 0, 20_000) === "timed-out") throw new Error("the user port never answered");
    return s;
  },
};
let target: UserPortTarget | undefined;

beforeAll(async () => {
  flag = new Int32Array(new SharedArrayBuffer(8));
  worker = new Worker(UPSTREAM, { eval: true, workerData: { flag: flag.buffer } });
  [upstreamPort] = (await once(worker, "message")) as [number];
  const runtime = new Proxy({}, { get: () => { throw new Error("the runtime serves no user port"); } }) as Runtime;
  ingress = await createIngress({ clusterToken: TOKEN, runtime, userPortTarget: () => target });
  ingress.listen(0, "127.0.0.1");
  await once(ingress, "listening");
  ingressPort = (ingress.address() as AddressInfo).port;
});

afterAll(async () => {
  ingress?.close();
  await worker?.terminate();
});

/** One signed POST with its body, head and body in one write (so the ingress holds the body when
 * it dials); the raw answer once the ingress closes. */
async function post(port: number, body: string): Promise<{ status: number; text: string }> {
  const sig = await signIngress(await ingressKey(TOKEN), { sandboxId: SANDBOX, port, method: "POST", pathAndQuery: "/upload" }, Date.now());
  const head = [
    "POST /upload HTTP/1.1",
    "host: ingress",
    `e2b-sandbox-id: ${SANDBOX}`,
    `e2b-sandbox-port: ${port}`,
    `${SIGNATURE_HEADER}: ${sig}`,
    "content-type: text/plain",
    `content-length: ${Buffer.byteLength(body)}`,
    "connection: close",
  ];
  const s = connect(ingressPort, "127.0.0.1");
  await once(s, "connect");
  const chunks: Buffer[] = [];
  s.on("data", (c: Buffer) => chunks.push(c));
  s.write(`${head.join("\r\n")}\r\n\r\n${body}`);
  await once(s, "close");
  const raw = Buffer.concat(chunks).toString();
  const [top = "", rest = ""] = raw.split("\r\n\r\n", 2);
  return { status: Number(/^HTTP\/1\.1 (\d{3})/.exec(top)?.[1] ?? 0), text: rest };
}

describe("the ingress and a user port that answers without reading the body", () => {
  it("relays the port's answer, not a 502", async () => {
    target = heldDial;
    const got = await post(8000, "x".repeat(1000));
    expect(got.status, got.text).toBe(501);
    expect(got.text).toContain(ANSWER);
  });

  it("answers 502 only when the port sent nothing", async () => {
    // A port that resets without a word: nothing to relay.
    const silent = createHttpServer();
    silent.on("connection", (s) => s.resetAndDestroy());
    silent.listen(0, "127.0.0.1");
    await once(silent, "listening");
    target = { host: "127.0.0.1", port: (silent.address() as AddressInfo).port };
    try {
      const got = await post(8001, "y".repeat(1000));
      expect(got.status).toBe(502);
      expect(got.text).toMatch(/port 8001 of sandbox/);
    } finally {
      silent.close();
    }
  });
});
