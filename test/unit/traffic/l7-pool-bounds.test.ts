// The upstream pool's own machine (controllers/traffic/l7/pool.ts), on a loopback HTTP server:
// dropping a sandbox's pool closes its idle sockets but lets a request in flight finish.
import http from "node:http";
import { connect, type AddressInfo, type Socket } from "node:net";
import { afterAll, beforeAll, expect, it } from "vitest";
import { UpstreamPool, type PooledRequest } from "../../../controllers/traffic/l7/pool.ts";

let server: http.Server;
let port: number;
/** Responses the server holds open until released (a long stream's stand-in). */
const held: http.ServerResponse[] = [];

beforeAll(async () => {
  server = http.createServer((req, res) => {
    if (req.url === "/hold") {
      res.writeHead(200, { "content-type": "text/plain" });
      res.write("first;");
      held.push(res);
      return;
    }
    res.end("ok");
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  port = (server.address() as AddressInfo).port;
});

afterAll(() => {
  server.closeAllConnections();
  server.close();
});

const dial = (): Promise<Socket> =>
  new Promise((resolve, reject) => {
    const s = connect(port, "127.0.0.1", () => resolve(s)).once("error", reject);
  });

/** A GET through `pool` as `sandbox`, to destination `host` (a key; every one dials the server). */
function get(pool: UpstreamPool, sandbox: string, host: string, path = "/", onResponse?: () => void): Promise<string> {
  return new Promise((resolve, reject) => {
    const opts: http.RequestOptions & PooledRequest = { host, port, path, agent: pool.agentFor(sandbox), upstreamConnect: dial };
    http
      .request(opts, (res) => {
        onResponse?.();
        let body = "";
        res.on("data", (c: Buffer) => (body += c.toString()));
        res.on("end", () => resolve(body));
        res.on("error", reject);
      })
      .on("error", reject)
      .end();
  });
}

const total = (idle: Record<string, number>) => Object.values(idle).reduce((a, b) => a + b, 0);

it("a request in flight on a dropped sandbox's pool completes; its idle sockets close, and the busy one is not kept", async () => {
  const pool = new UpstreamPool({ maxSandboxes: 1 });
  await get(pool, "sbx-a", "idle.test");
  expect(total(pool.idle("sbx-a"))).toBe(1);
  const dropped = pool.agentFor("sbx-a");
  let responded!: () => void;
  const started = new Promise<void>((r) => (responded = r));
  const stream = get(pool, "sbx-a", "stream.test", "/hold", responded);
  await started;
  // Another sandbox past maxSandboxes evicts sbx-a's pool while its stream is open.
  await get(pool, "sbx-b", "idle.test");
  expect(pool.idle("sbx-a")).toEqual({});
  held.shift()!.end("last");
  expect(await stream).toBe("first;last");
  await new Promise((r) => setImmediate(r));
  expect(Object.values(dropped.freeSockets).flat()).toEqual([]);
});
