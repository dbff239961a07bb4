// Connections the redirect in a sandbox's namespace brings to the proxy (the relay's line
// "<sandbox> <ip> <port>"): no proxy protocol, judged by the address they were going to, or by
// the name their first bytes ask for (TLS SNI, HTTP Host) when that name resolves to that address.
// Loopback servers stand in for "outside", so the proxy under test refuses nothing by itself.
import { mkdtempSync, rmSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { connect, createServer as createNetServer, type AddressInfo, type Server as NetServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connect as tlsConnect } from "node:tls";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { compilePolicy } from "../../../controllers/traffic/policy.ts";
import { TrafficProxy } from "../../../controllers/traffic/proxy.ts";
import { sniff } from "../../../controllers/traffic/sniff.ts";

let origin: Server;
let port = 0;
let echo: NetServer;
let echoPort = 0;
let proxy: TrafficProxy;
let dir = "";
let sock = "";
const logged: string[] = [];

const policies: Record<string, ReturnType<typeof compilePolicy>> = {
  strict: compilePolicy({ allowOut: ["127.0.0.1"], denyOut: ["0.0.0.0/0"] }),
  byName: compilePolicy({ allowOut: ["allowed.test"], denyOut: ["0.0.0.0/0"] }),
};

/** The ClientHello a real TLS client sends for `servername` (undefined: none, as for an address). */
async function clientHello(servername?: string): Promise<Buffer> {
  const capture = createNetServer();
  await new Promise<void>((r) => capture.listen(0, "127.0.0.1", r));
  const first = new Promise<Buffer>((resolve) => capture.once("connection", (s) => s.once("data", (d: Buffer) => (resolve(d), s.destroy()))));
  const c = tlsConnect({ host: "127.0.0.1", port: (capture.address() as AddressInfo).port, ...(servername ? { servername } : {}) });
  c.on("error", () => {});
  const hello = await first;
  c.destroy();
  capture.close();
  return hello;
}

/** The relay's line for a redirected connection, then `payload`; everything until the proxy closes. */
function redirected(tag: string, ip: string, p: number, payload: Buffer | string): Promise<Buffer> {
  return new Promise((resolve) => {
    const s = connect(sock);
    const got: Buffer[] = [];
    s.on("data", (c: Buffer) => got.push(c));
    s.on("close", () => resolve(Buffer.concat(got))).on("error", () => {});
    s.write(`${tag} ${ip} ${p}\n`);
    s.end(payload);
  });
}

beforeAll(async () => {
  origin = createServer((req, res) => res.end(`hello ${req.headers.host}`));
  await new Promise<void>((r) => origin.listen(0, "0.0.0.0", r));
  port = (origin.address() as AddressInfo).port;
  echo = createNetServer({ allowHalfOpen: true }, (s) => s.on("error", () => {}).pipe(s));
  await new Promise<void>((r) => echo.listen(0, "0.0.0.0", r));
  echoPort = (echo.address() as AddressInfo).port;
  proxy = new TrafficProxy({
    firstRequestTimeoutMs: 300,
    refuse: () => undefined,
    policyFor: (tag) => policies[tag] ?? `no egress rules for sandbox ${JSON.stringify(tag)}`,
    resolve: async (host) => {
      if (host === "allowed.test") return ["127.0.0.1"];
      throw Object.assign(new Error("not found"), { code: "ENOTFOUND" });
    },
    log: (line) => logged.push(line),
  });
  dir = mkdtempSync(join(tmpdir(), "transparent-test-"));
  sock = join(dir, "proxy.sock");
  await proxy.listenTagged(sock);
});

afterAll(async () => {
  await proxy.close();
  origin.close();
  echo.close();
  rmSync(dir, { recursive: true, force: true });
});

describe("sniff: the name a connection's first bytes ask for", () => {
  it("reads SNI from a real ClientHello, and none when the client sends none", async () => {
    expect(sniff(await clientHello("Allowed.Test"))).toEqual({ kind: "tls", name: "allowed.test" });
    expect(sniff(await clientHello())).toEqual({ kind: "tls" });
    // As the rules match names: a fully qualified name's trailing dot dropped; an empty label is no name.
    expect(sniff(await clientHello("Allowed.Test."))).toEqual({ kind: "tls", name: "allowed.test" });
    expect(sniff(await clientHello("allowed..test"))).toEqual({ kind: "tls" });
    const hello = await clientHello("allowed.test");
    expect(sniff(hello.subarray(0, 40))).toBeUndefined();
  });

  it("reads Host from a request head, waits for the whole head, and gives up on other bytes at once", () => {
    expect(sniff(Buffer.from("GET / HTTP/1.1\r\nHost: Example.test:8080\r\n\r\n"))).toEqual({ kind: "http", name: "example.test" });
    expect(sniff(Buffer.from("GET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n"))).toEqual({ kind: "http", name: "::1" });
    expect(sniff(Buffer.from("GET / HTTP/1.1\r\nHost: a"))).toBeUndefined();
    expect(sniff(Buffer.from("GE"))).toBeUndefined();
    expect(sniff(Buffer.from("SSH-2.0-OpenSSH_9.2\r\n"))).toEqual({ kind: "other" });
    expect(sniff(Buffer.from([0x16, 0x01, 0x00]))).toEqual({ kind: "other" });
    expect(sniff(Buffer.from("hello\r\n"))).toEqual({ kind: "other" });
  });
});

describe("traffic-proxy: redirected connections", () => {
  it("an allowed address gets the bytes as they are, both ways, whatever the protocol", async () => {
    expect(String(await redirected("strict", "127.0.0.1", echoPort, "raw bytes\n"))).toBe("raw bytes\n");
  });

  it("a denied address is closed without a byte; plain HTTP gets a 403 naming the rule; both are logged", async () => {
    expect((await redirected("strict", "127.0.0.2", echoPort, "raw bytes\n")).length).toBe(0);
    const reply = String(await redirected("strict", "127.0.0.2", port, "GET / HTTP/1.1\r\nHost: 127.0.0.2\r\n\r\n"));
    expect(reply).toMatch(/^HTTP\/1.1 403/);
    expect(reply).toContain('127.0.0.2 is denied by denyOut "0.0.0.0/0"');
    expect(logged.at(-1)).toBe(`traffic-proxy: strict: denied 127.0.0.2:${port}: 127.0.0.2 is denied by denyOut "0.0.0.0/0"`);
  });

  it("a name allowed by the rules admits the connection only at an address that name resolves to", async () => {
    expect(String(await redirected("byName", "127.0.0.1", port, "GET / HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n"))).toContain("hello allowed.test");
    const borrowed = String(await redirected("byName", "127.0.0.2", port, "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n"));
    expect(borrowed).toContain("egress denied: allowed.test does not resolve to 127.0.0.2");
    const other = String(await redirected("byName", "127.0.0.1", port, "GET / HTTP/1.1\r\nHost: other.test\r\n\r\n"));
    expect(other).toMatch(/^HTTP\/1.1 403/);
  });

  it("TLS is judged by its SNI: an allowed name passes (the ClientHello forwarded first), another name or none is closed", async () => {
    const hello = await clientHello("allowed.test");
    expect(Buffer.compare(await redirected("byName", "127.0.0.1", echoPort, hello), hello)).toBe(0);
    expect((await redirected("byName", "127.0.0.1", echoPort, await clientHello("other.test"))).length).toBe(0);
    expect((await redirected("byName", "127.0.0.1", echoPort, await clientHello())).length).toBe(0);
  });

  it("a server-first protocol to an address the rules deny is closed when no name came in time", async () => {
    const s = connect(sock);
    s.write(`strict 127.0.0.2 ${echoPort}\n`);
    const closed = await new Promise<boolean>((resolve) => s.on("close", () => resolve(true)).on("error", () => {}));
    expect(closed).toBe(true);
  });
});
