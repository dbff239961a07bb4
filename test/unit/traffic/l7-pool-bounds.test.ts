// The upstream pool's own machine (controllers/traffic/l7/pool.ts), on loopback servers:
// dropping a sandbox's pool closes its idle sockets but lets a request in flight finish; the
// tenant-chosen keys (names, ports) cannot grow idle sockets, open sockets or TLS sessions past
// their bounds; a sandbox's TLS session is never offered on another sandbox's connection.
import http from "node:http";
import { connect, type AddressInfo, type Socket } from "node:net";
import { afterAll, beforeAll, expect, it } from "vitest";
import { UpstreamPool, type PooledRequest } from "../../../controllers/traffic/l7/pool.ts";
import { startHttpsEcho, type EchoServer } from "../../support/l7-stand-ins.ts";

let server: http.Server;
let echo: EchoServer;
let port: number;
/** Responses the server holds open until released (a long stream's stand-in). */
const held: http.ServerResponse[] = [];
/** Connections the server accepted. */
let accepted = 0;

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
  server.on("connection", () => accepted++);
  echo = await startHttpsEcho(["n0.test", "n1.test", "n2.test"]);
});

afterAll(() => {
  echo?.close();
  server.closeAllConnections();
  server.close();
});

const dial = (to = port): Promise<Socket> =>
  new Promise((resolve, reject) => {
    const s = connect(to, "127.0.0.1", () => resolve(s)).once("error", reject);
  });

/** A GET through `pool` as `sandbox`, to destination `host` (a key; every one dials the server). */
function get(pool: UpstreamPool, sandbox: string, host: string, path = "/", onResponse?: () => void): Promise<string> {
  return new Promise((resolve, reject) => {
    const opts: http.RequestOptions & PooledRequest = { host, port, path, agent: pool.agentFor(sandbox), upstreamConnect: () => dial() };
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

it("idle sockets stay within the per-sandbox and the global bound, however many keys a sandbox uses", async () => {
  const pool = new UpstreamPool({ maxFreePerSandbox: 3, maxIdle: 5 });
  for (let i = 0; i < 8; i++) await get(pool, "sbx-a", `h${i}.test`);
  expect(total(pool.idle("sbx-a"))).toBe(3);
  for (let i = 0; i < 8; i++) await get(pool, "sbx-b", `h${i}.test`);
  expect(total(pool.idle("sbx-b"))).toBe(2);
  expect(pool.idleTotal).toBe(5);
  // A kept socket is still reused (its key's next request takes it, then it is idle again).
  await get(pool, "sbx-a", "h0.test");
  expect(total(pool.idle("sbx-a"))).toBe(3);
  // Dropping a sandbox frees its share of the global bound.
  pool.forget("sbx-a");
  await new Promise((r) => setImmediate(r));
  expect(pool.idleTotal).toBe(2);
  for (let i = 0; i < 8; i++) await get(pool, "sbx-b", `h${i}.test`);
  expect(total(pool.idle("sbx-b"))).toBe(3);
});

it("a sandbox has at most maxSocketsPerSandbox upstream sockets open; a request past it waits for one", async () => {
  const pool = new UpstreamPool({ maxSocketsPerSandbox: 2 });
  const before = accepted;
  const opened: Promise<void>[] = [];
  const streams = ["s0.test", "s1.test", "s2.test"].map((h) => {
    let responded!: () => void;
    opened.push(new Promise<void>((r) => (responded = r)));
    return get(pool, "sbx-a", h, "/hold", responded);
  });
  await Promise.all(opened.slice(0, 2));
  // Two connections reached the server; the third request has none yet.
  await new Promise((r) => setImmediate(r));
  expect(accepted - before).toBe(2);
  expect(held.length).toBe(2);
  // As one ends, the waiting one gets a socket.
  held.shift()!.end("last");
  await opened[2];
  while (held.length) held.shift()!.end("last");
  expect(await Promise.all(streams)).toEqual(["first;last", "first;last", "first;last"]);
});

/** A GET over TLS to the echo server, named `name`, as `sandbox`: whether the session was resumed. */
function tlsGet(pool: UpstreamPool, sandbox: string, name: string, path = "/"): Promise<boolean> {
  return new Promise((resolve, reject) => {
    const opts: http.RequestOptions & PooledRequest = {
      host: "127.0.0.1",
      port: echo.port,
      path,
      headers: { host: name },
      agent: pool.agentFor(sandbox),
      upstreamConnect: () => dial(echo.port),
      upstreamName: name,
    };
    http
      .request(opts, (res) => {
        let body = "";
        res.on("data", (c: Buffer) => (body += c.toString()));
        res.on("end", () => resolve((JSON.parse(body) as { resumed: boolean }).resumed));
      })
      .on("error", reject)
      .end();
  });
}

it("keeps at most maxSessions TLS sessions per sandbox, and never offers one sandbox's session on another's connection", async () => {
  const pool = new UpstreamPool({ tls: { ca: echo.ca }, maxSessions: 2 });
  for (const n of ["n0.test", "n1.test", "n2.test"]) await tlsGet(pool, "sbx-a", n, "/close");
  await new Promise((r) => setImmediate(r));
  expect(pool.sessions("sbx-a")).toBe(2);
  // sbx-a's next connection to n2 resumes its session; sbx-b's first one to n2 does not.
  expect(await tlsGet(pool, "sbx-a", "n2.test", "/close")).toBe(true);
  expect(await tlsGet(pool, "sbx-b", "n2.test", "/close")).toBe(false);
  expect(await tlsGet(pool, "sbx-b", "n2.test", "/close")).toBe(true);
});
