// L7 judgement a sandbox cannot write its way around, through the real TrafficProxy's redirected
// path and the real L7 handler, against loopback stand-ins for "the internet": a sandbox whose
// rules admit mcp.test, api.test and other.test by name only (all served at 127.0.0.1), with a
// block rule and MCP tool ACLs for mcp.test and a credential for api.test. A ClientHello split over
// TLS records is read whole; TLS without SNI, or plain HTTP without a Host, to an address an
// inspected name was answered for is refused; every plain-HTTP request on a connection is judged
// by its own Host; a request must name the host its SNI chose the credential for; the MCP screen
// reads keys as a case-insensitive (Go) server would and refuses a denied notification; an
// unfinished SSE event is held only so long. A request's path is judged, and sent on, in its
// normal form (RFC 3986), or refused when it has none; bytes that are neither TLS nor HTTP to an
// inspected address are closed; an SNI with a trailing dot is the name without it; the MCP bodies
// a sandbox holds at once are bounded.
import https from "node:https";
import http from "node:http";
import { mkdtempSync, rmSync } from "node:fs";
import net, { connect, type AddressInfo, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Duplex } from "node:stream";
import tls from "node:tls";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SandboxCa } from "../../../controllers/traffic/l7/ca.ts";
import { L7Handler, type AuditRecord } from "../../../controllers/traffic/l7/handler.ts";
import type { L7Policy } from "../../../controllers/traffic/l7/policy.ts";
import { compilePolicy } from "../../../controllers/traffic/policy.ts";
import { TrafficProxy } from "../../../controllers/traffic/proxy.ts";
import { sniff } from "../../../controllers/traffic/sniff.ts";

const SECRET = "ghp_secret-value-for-api-test";
const NAMES = ["mcp.test", "api.test", "other.test"];
const SSE_EVENT = 256 * 1024;
const MAX_MCP_BODY = 64 * 1024;
/** What the stand-ins were asked: protocol, Host, SNI, Authorization, X-Role, path, body. */
const seen: { proto: string; host?: string; sni?: string | false | null; auth?: string; role?: string; url?: string; body: string }[] = [];
const audit: AuditRecord[] = [];
let issuer: SandboxCa;
let ca: SandboxCa;
let tlsPort = 0;
let plainPort = 0;
let servers: { close(): void; closeAllConnections(): void }[] = [];
let proxy: TrafficProxy;
let handler: L7Handler;
const MAX_MCP_HELD = 100 * 1024;
let dir = "";
/** Connections the plain-HTTP stand-in accepted. */
let plainConnections = 0;

const policy: L7Policy = {
  http: [
    { name: "gh", host: "api.test", action: "allow", setHeaders: { Authorization: "Bearer ${e2b.secrets.gh}" } },
    { name: "no-admin", host: "mcp.test", paths: ["/admin*"], action: "block" },
  ],
  mcp: [{ name: "only-safe", server: "mcp.test", tool: "safe", action: "allow" }],
};

/** "prof": a SecurityProfile screens the MCP endpoint it names by path (/mcp) on mcp.test, and
 * blocks one Exact path (451) and a Prefix (/secret); one Exact path (/role) has its headers
 * rewritten (X-Role set, Authorization removed). */
const profPolicy: L7Policy = {
  http: [],
  mcp: [],
  profiles: [
    {
      name: "mcp-acl",
      priority: 1,
      rules: [
        { name: "no-danger", match: [{ domains: ["mcp.test"], paths: [{ type: "Prefix", value: "/mcp" }] }], actions: { mcpToolPolicy: { rules: [{ toolNames: ["danger"], action: "deny" }], defaultAction: "allow" } } },
        { name: "exact", match: [{ domains: ["mcp.test"], paths: [{ type: "Exact", value: "/exact" }] }], actions: { block: { statusCode: 451 } } },
        { name: "no-secret", match: [{ domains: ["mcp.test"], paths: [{ type: "Prefix", value: "/secret" }] }], actions: { block: {} } },
        { name: "read-only", match: [{ domains: ["mcp.test"], paths: [{ type: "Exact", value: "/role" }] }], actions: { headerManipulation: { set: [{ name: "X-Role", value: "readonly" }], remove: ["authorization"] } } },
      ],
    },
  ],
};

function answer(proto: string) {
  return (req: http.IncomingMessage, res: http.ServerResponse) => {
    let body = "";
    req.on("data", (c: Buffer) => (body += c.toString()));
    req.on("end", () => {
      const sni = proto === "https" ? (req.socket as tls.TLSSocket).servername : undefined;
      const role = req.headers["x-role"] as string | undefined;
      seen.push({ proto, host: req.headers.host, ...(sni !== undefined ? { sni } : {}), auth: req.headers.authorization, ...(role !== undefined ? { role } : {}), url: req.url, body });
      if (req.url === "/sse") {
        // One event that does not end until SSE_EVENT bytes have gone.
        res.writeHead(200, { "content-type": "text/event-stream" }).write("data: ");
        let sent = 0;
        const more = () => {
          while (sent < SSE_EVENT) {
            sent += 16 * 1024;
            if (!res.write("a".repeat(16 * 1024))) return void res.once("drain", more);
          }
          res.end("\n\n");
        };
        return more();
      }
      // /big: an answer of 60 000 bytes.
      const result = req.url === "/big" ? { upstream: "reached", pad: "x".repeat(60_000 - 58) } : { upstream: "reached" };
      res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ jsonrpc: "2.0", id: 1, result }));
    });
  };
}

beforeAll(async () => {
  issuer = await SandboxCa.create("internet-stand-in");
  // Like a real server's default vhost: a certificate for mcp.test to a ClientHello without SNI.
  const byDefault = await issuer.leaf("mcp.test");
  const contexts = new Map(await Promise.all(NAMES.map(async (n) => [n, await issuer.leaf(n)] as const)));
  const up = https.createServer({ key: byDefault.key, cert: byDefault.cert, SNICallback: (n, cb) => cb(null, tls.createSecureContext(contexts.get(n) ?? byDefault)) }, answer("https"));
  const plain = http.createServer(answer("http")).on("connection", () => plainConnections++);
  servers = [up, plain];
  await Promise.all(servers.map((s) => new Promise<void>((r) => (s as http.Server).listen(0, "127.0.0.1", r))));
  tlsPort = (up.address() as AddressInfo).port;
  plainPort = (plain.address() as AddressInfo).port;
  ca = await SandboxCa.create("sbx");
  handler = new L7Handler({ policyFor: (s) => (s === "open" ? { http: [], mcp: [] } : s === "all" ? { http: [], mcp: [], requestsPerMinute: 100, rateLimitAll: true } : s === "prof" ? profPolicy : policy), secretsFor: () => new Map([["gh", SECRET]]), caFor: async () => ca, audit: (r) => audit.push(r), upstreamTls: { ca: issuer.certPem }, maxMcpBody: MAX_MCP_BODY, maxMcpHeldPerSandbox: MAX_MCP_HELD, webPorts: [plainPort, tlsPort] });
  proxy = new TrafficProxy({
    refuse: () => undefined,
    resolve: async (host) => {
      if (NAMES.includes(host)) return ["127.0.0.1"];
      throw Object.assign(new Error(`${host}: not found`), { code: "ENOTFOUND" });
    },
    // "open" and "all" may reach 127.0.0.1 by its address; "sbx" only by the names.
    policyFor: (s) => compilePolicy(s === "open" || s === "all" ? { allowOut: ["127.0.0.1"], denyOut: [] } : { allowOut: NAMES, denyOut: ["0.0.0.0/0"] }),
    l7: handler,
    firstRequestTimeoutMs: 1000,
  });
  dir = mkdtempSync(join(tmpdir(), "l7-bypass-"));
  await proxy.listenTagged(join(dir, "p.sock"));
  // The sandbox looked mcp.test up through its DNS (the proxy's), as a client connecting by name does.
  await dnsQuery("sbx", "mcp.test");
});

afterAll(async () => {
  await proxy?.close();
  for (const s of servers) (s.close(), s.closeAllConnections());
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** One DNS query over the sandbox's redirected TCP port 53. */
function dnsQuery(sandbox: string, name: string): Promise<Buffer> {
  const labels = name.split(".").map((l) => Buffer.concat([Buffer.from([l.length]), Buffer.from(l)]));
  const head = Buffer.from([0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
  const msg = Buffer.concat([head, ...labels, Buffer.from([0, 0, 1, 0, 1])]);
  return new Promise((resolve, reject) => {
    const s = connect(join(dir, "p.sock"), () => s.write(Buffer.concat([Buffer.from(`${sandbox} 10.0.0.53 53\n`), Buffer.from([msg.length >> 8, msg.length & 255]), msg])));
    s.once("data", (c: Buffer) => (s.destroy(), resolve(c))).on("error", reject);
  });
}

/** A redirected connection of `sandbox` to 127.0.0.1:`port`, its raw socket. */
function redirected(sandbox: string, port: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const s = connect(join(dir, "p.sock"), () => (s.write(`${sandbox} 127.0.0.1 ${port}\n`), resolve(s)));
    s.on("error", reject);
  });
}

/** Plain HTTP bytes on one redirected connection; what came back until it closed. */
async function plainHttp(payload: string, sandbox = "sbx"): Promise<string> {
  const s = await redirected(sandbox, plainPort);
  return new Promise((resolve) => {
    let got = "";
    const t = setTimeout(() => s.destroy(), 3000);
    s.on("data", (c: Buffer) => (got += c.toString())).on("close", () => (clearTimeout(t), resolve(got)));
    s.write(payload);
  });
}

/** A duplex over `sock` that sends the first TLS record (the ClientHello) as two records. */
function splitting(sock: Socket): Duplex {
  let first = true;
  const d = new Duplex({
    write(chunk: Buffer, _e, cb) {
      if (!first || chunk[0] !== 0x16) return void sock.write(chunk, cb);
      first = false;
      const body = chunk.subarray(5, 5 + chunk.readUInt16BE(3));
      const rec = (p: Buffer) => Buffer.concat([Buffer.from([0x16, chunk[1]!, chunk[2]!, p.length >> 8, p.length & 255]), p]);
      sock.write(Buffer.concat([rec(body.subarray(0, 40)), rec(body.subarray(40)), chunk.subarray(5 + body.length)]), cb);
    },
    read() {},
    final(cb) {
      sock.end();
      cb();
    },
  });
  sock.on("data", (c: Buffer) => d.push(c)).on("end", () => d.push(null)).on("close", () => d.destroy());
  return d;
}

/** HTTPS bytes on one redirected connection; the answer, or "error: ..." when TLS failed. */
async function overTls(payload: string, o: { servername?: string; split?: boolean; sandbox?: string } = {}): Promise<string> {
  const raw = await redirected(o.sandbox ?? "sbx", tlsPort);
  return new Promise((resolve) => {
    let got = "";
    const opts: tls.ConnectionOptions = { socket: (o.split ? splitting(raw) : raw) as Socket, ...(o.servername ? { servername: o.servername, ca: ca.certPem } : { rejectUnauthorized: false }) };
    const s = tls.connect(opts, () => s.write(payload));
    const t = setTimeout(() => s.destroy(), 3000);
    s.on("data", (c: Buffer) => (got += c.toString()));
    s.on("error", (e) => (got ||= `error: ${e.message}`));
    s.on("close", () => (clearTimeout(t), resolve(got)));
  });
}

const call = (tool: string, extra: Record<string, unknown> = {}) => JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: tool, arguments: {} }, ...extra });
const post = (host: string, body: string, close = true) => `POST /mcp HTTP/1.1\r\nHost: ${host}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n${close ? "connection: close\r\n" : ""}\r\n${body}`;
/** Each answer's status line (an answer may follow a body without a line break). */
const statusLines = (s: string) => s.match(/HTTP\/1\.[01] \d{3} [^\r\n]*/g) ?? [];

describe("TLS: the ClientHello's name, or none", () => {
  it("reads a ClientHello split over two TLS records whole: its SNI's rules apply", async () => {
    const n = seen.length;
    const got = await overTls("GET /admin HTTP/1.1\r\nHost: mcp.test\r\nconnection: close\r\n\r\n", { servername: "mcp.test", split: true });
    expect(statusLines(got)).toEqual(["HTTP/1.1 403 Forbidden"]);
    expect(got).toContain('blocked by rule "no-admin"');
    expect(seen.slice(n)).toEqual([]);
  });

  it("refuses TLS without SNI to an address an inspected name was answered for, and audits it", async () => {
    const n = seen.length;
    const got = await overTls(post("mcp.test", call("danger")));
    expect(got).not.toContain("HTTP/1.1");
    expect(seen.slice(n)).toEqual([]);
    expect(audit.at(-1)).toMatchObject({ sandbox: "sbx", host: "127.0.0.1", rule: expect.stringContaining("SNI"), refused: true });
  });

  it("passes TLS without SNI through where no inspected name is served (a sandbox allowed the address)", async () => {
    // A body larger than any stream's buffer: a pass-through copies it all.
    const big = "x".repeat(1 << 20);
    const got = await overTls(`POST / HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-length: ${big.length}\r\nconnection: close\r\n\r\n${big}`, { sandbox: "open" });
    expect(statusLines(got)).toEqual(["HTTP/1.1 200 OK"]);
    expect(seen.at(-1)).toMatchObject({ proto: "https", sni: false });
    expect(seen.at(-1)!.body.length).toBe(big.length);
  });

  it("the sniffer gives up a ClientHello past its record bound as TLS without a name", () => {
    const rec = (p: Buffer) => Buffer.concat([Buffer.from([0x16, 3, 1, 0, p.length]), p]);
    const hello = Buffer.concat([Buffer.from([1, 0, 0, 200]), Buffer.alloc(30)]);
    const many = Buffer.concat(Array.from({ length: 20 }, (_, i) => rec(hello.subarray(i * 2, i * 2 + 2))));
    expect(sniff(many)).toEqual({ kind: "tls" });
  });
});

describe("plain HTTP: each request by its own Host", () => {
  it("refuses a request without a Host, or naming an address, to an address an inspected name was answered for", async () => {
    const n = seen.length;
    expect(statusLines(await plainHttp("GET /admin HTTP/1.0\r\n\r\n"))).toEqual(["HTTP/1.1 400 Bad Request"]);
    expect(statusLines(await plainHttp("GET /admin HTTP/1.1\r\nHost: 127.0.0.1\r\nconnection: close\r\n\r\n"))).toEqual(["HTTP/1.1 400 Bad Request"]);
    // A target naming its own host (which a server takes over Host), and a Host that is no name.
    expect(statusLines(await plainHttp("GET http://mcp.test/admin HTTP/1.1\r\nHost: mcp.test\r\nconnection: close\r\n\r\n"))).toEqual(["HTTP/1.1 400 Bad Request"]);
    const two = await plainHttp("GET / HTTP/1.1\r\nHost: mcp.test\r\n\r\nGET /admin HTTP/1.1\r\nHost: x@mcp.test\r\nconnection: close\r\n\r\n");
    expect(statusLines(two)).toEqual(["HTTP/1.1 200 OK", "HTTP/1.1 400 Bad Request"]);
    // Blank lines before a request line are skipped by servers, and by the sniffer.
    expect(await plainHttp("\r\n\r\nGET /admin HTTP/1.1\r\nHost: mcp.test\r\nconnection: close\r\n\r\n")).toContain('blocked by rule "no-admin"');
    expect(seen.slice(n)).toEqual([expect.objectContaining({ host: "mcp.test", url: "/" })]);
  });

  it("passes HTTP/2 with prior knowledge (plaintext gRPC) through where no inspected name is served, refuses it where one is", async () => {
    const preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    // The stand-in is an HTTP/1 server: it refuses the preface itself, once the bytes reached it.
    const before = plainConnections;
    expect(await plainHttp(preface, "open")).toMatch(/^HTTP\/1\.1 400/);
    expect(plainConnections).toBe(before + 1);
    expect(await plainHttp(preface)).toBe("");
    expect(plainConnections).toBe(before + 1);
    expect(audit.at(-1)).toMatchObject({ sandbox: "sbx", method: "PRI", refused: true });
  });

  it("judges a later request on a kept-alive connection by its own Host, not the first one's", async () => {
    const n = seen.length;
    // The last: a name neither inspected nor asked for at this address, which could reach an
    // inspected server's default host unjudged.
    const got = await plainHttp(`GET / HTTP/1.1\r\nHost: other.test\r\n\r\n${post("mcp.test", call("danger"), false)}GET /admin HTTP/1.1\r\nHost: elsewhere.test\r\nconnection: close\r\n\r\n`);
    expect(statusLines(got)).toEqual(["HTTP/1.1 200 OK", "HTTP/1.1 200 OK", "HTTP/1.1 421 Misdirected Request"]);
    expect(got).toContain('tool \\"danger\\" is denied');
    expect(seen.slice(n)).toEqual([expect.objectContaining({ proto: "http", host: "other.test", url: "/" })]);
  });
});

describe("a credential goes only to the host its SNI named", () => {
  it("refuses a request whose Host is another name (421); the same name in another case or with its port gets the credential", async () => {
    const n = seen.length;
    const other = await overTls("GET /x HTTP/1.1\r\nHost: other.test\r\nconnection: close\r\n\r\n", { servername: "api.test" });
    expect(statusLines(other)).toEqual(["HTTP/1.1 421 Misdirected Request"]);
    expect(seen.slice(n)).toEqual([]);
    const same = await overTls("GET /x HTTP/1.1\r\nHost: API.test:443\r\nconnection: close\r\n\r\n", { servername: "api.test" });
    expect(statusLines(same)).toEqual(["HTTP/1.1 200 OK"]);
    expect(seen.at(-1)).toMatchObject({ sni: "api.test", auth: `Bearer ${SECRET}` });
    expect(JSON.stringify(audit)).not.toContain(SECRET);
  });
});

describe("the MCP screen", () => {
  it("refuses keys a case-insensitive server would read as the screened ones (400), and a denied call sent as a notification (202, not sent)", async () => {
    const n = seen.length;
    const bodies = [
      JSON.stringify({ jsonrpc: "2.0", id: 1, METHOD: "tools/call", params: { name: "danger" } }),
      JSON.stringify({ jsonrpc: "2.0", id: 1, method: "ping", Method: "tools/call", params: { name: "danger" } }),
      JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "safe", NAME: "danger" } }),
      JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "safe" }, "paramſ": { name: "danger" } }),
    ];
    for (const b of bodies) expect(statusLines(await overTls(post("mcp.test", b), { servername: "mcp.test" }))).toEqual(["HTTP/1.1 400 Bad Request"]);
    const notification = JSON.stringify({ jsonrpc: "2.0", method: "tools/call", params: { name: "danger", arguments: {} } });
    expect(statusLines(await overTls(post("mcp.test", notification), { servername: "mcp.test" }))).toEqual(["HTTP/1.1 202 Accepted"]);
    expect(audit.at(-1)).toMatchObject({ tool: "danger", status: 202, refused: true });
    expect(seen.slice(n)).toEqual([]);
    // The allowed call still goes.
    expect(statusLines(await overTls(post("mcp.test", call("safe")), { servername: "mcp.test" }))).toEqual(["HTTP/1.1 200 OK"]);
  });

  it("refuses an upgrade (WebSocket) to a server MCP rules govern: its frames would not be screened", async () => {
    const n = seen.length;
    const got = await plainHttp("GET /mcp HTTP/1.1\r\nHost: mcp.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n");
    expect(statusLines(got)).toEqual(["HTTP/1.1 403 Forbidden"]);
    expect(seen.slice(n)).toEqual([]);
    expect(audit.at(-1)).toMatchObject({ host: "mcp.test", rule: "mcp", status: 403, refused: true });
  });

  it("ends an SSE answer whose event outgrows the MCP body bound unfinished, rather than holding it", async () => {
    const s = await redirected("sbx", plainPort);
    const out = await new Promise<{ bytes: number; ended: boolean }>((resolve) => {
      const req = http.request({ createConnection: () => s, path: "/sse", headers: { host: "mcp.test" } }, (res) => {
        let bytes = 0;
        res.on("data", (c: Buffer) => (bytes += c.length));
        res.on("end", () => resolve({ bytes, ended: true }));
        res.on("error", () => resolve({ bytes, ended: false }));
        res.on("aborted", () => resolve({ bytes, ended: false }));
      });
      req.on("error", () => resolve({ bytes: 0, ended: false }));
      req.end();
    });
    expect(out.ended).toBe(false);
    expect(out.bytes).toBeLessThan(MAX_MCP_BODY);
  });
});

describe("request paths: every reading judged, the least-rewritten safe form sent on", () => {
  it("blocks /admin however its path is spelt, over TLS and plain HTTP, upgrades too", async () => {
    const n = seen.length;
    for (const path of ["//admin", "/./admin", "/x/../admin", "/%61dmin", "/%2e%2E/admin", "/admin/."]) {
      const got = await overTls(`GET ${path} HTTP/1.1\r\nHost: mcp.test\r\nconnection: close\r\n\r\n`, { servername: "mcp.test" });
      expect([path, statusLines(got)]).toEqual([path, ["HTTP/1.1 403 Forbidden"]]);
      expect(got).toContain('blocked by rule "no-admin"');
    }
    for (const path of ["//admin", "/%61dmin"]) expect(await plainHttp(`GET ${path} HTTP/1.1\r\nHost: mcp.test\r\nconnection: close\r\n\r\n`)).toContain('blocked by rule "no-admin"');
    // An upgrade is judged by the same path (else refused for another reason: MCP rules govern the host).
    expect(statusLines(await plainHttp("GET //admin HTTP/1.1\r\nHost: mcp.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"))).toEqual(["HTTP/1.1 403 Forbidden"]);
    expect(audit.at(-1)).toMatchObject({ host: "mcp.test", path: "/admin", rule: "no-admin", refused: true });
    expect(seen.slice(n)).toEqual([]);
  });

  it("blocks every way a server may read the path: ;parameters dropped, // merged, a trailing / dropped, decoded twice", async () => {
    const n = seen.length;
    // Tomcat and Spring serve /admin;x/secret as /admin/secret; a server decoding twice reads
    // %2561 as a; one that merges slashes reads /;x//admin as /admin.
    for (const path of ["/admin;x/secret", "/;x/admin", "/%2561dmin", "/x/%2561/../../admin"]) {
      const got = await overTls(`GET ${path} HTTP/1.1\r\nHost: mcp.test\r\nconnection: close\r\n\r\n`, { servername: "mcp.test" });
      expect([path, statusLines(got)]).toEqual([path, ["HTTP/1.1 403 Forbidden"]]);
      expect(got).toContain('blocked by rule "no-admin"');
    }
    // An Exact rule (a profile's) holds against /exact/ and /exact;x.
    for (const path of ["/exact/", "/exact;x", "/exact//"]) {
      const got = await overTls(`GET ${path} HTTP/1.1\r\nHost: mcp.test\r\nconnection: close\r\n\r\n`, { servername: "mcp.test", sandbox: "prof" });
      expect([path, statusLines(got)]).toEqual([path, ["HTTP/1.1 451 Unavailable For Legal Reasons"]]);
    }
    expect(seen.slice(n)).toEqual([]);
    expect(audit.at(-1)).toMatchObject({ host: "mcp.test", path: "/exact//", rule: "exact", status: 451, refused: true });
  });

  it("sends the upstream the path it judged, the query as it came; a case-sensitive rule keeps case", async () => {
    const n = seen.length;
    const got = await overTls("GET /x/./y/..//z%7e%3b?q=/../admin%2F HTTP/1.1\r\nHost: mcp.test\r\nconnection: close\r\n\r\n", { servername: "mcp.test" });
    expect(statusLines(got)).toEqual(["HTTP/1.1 200 OK"]);
    expect(await plainHttp("GET /ADMIN HTTP/1.1\r\nHost: mcp.test\r\nconnection: close\r\n\r\n")).toMatch(/^HTTP\/1\.1 200/);
    // An S3-style key with // and a signed query reaches the server as it was written; dot
    // segments go as RFC 3986 says (/x//..//admin is /x//admin, which no reading makes /admin).
    const key = "/bucket//photos//2026/a;b.jpg?X-Amz-Signature=ab%2Fcd";
    expect(statusLines(await overTls(`GET ${key} HTTP/1.1\r\nHost: mcp.test\r\nconnection: close\r\n\r\n`, { servername: "mcp.test" }))).toEqual(["HTTP/1.1 200 OK"]);
    expect(statusLines(await overTls("GET /x//..//admin HTTP/1.1\r\nHost: mcp.test\r\nconnection: close\r\n\r\n", { servername: "mcp.test" }))).toEqual(["HTTP/1.1 200 OK"]);
    expect(seen.slice(n)).toEqual([
      expect.objectContaining({ proto: "https", url: "/x//z~%3B?q=/../admin%2F" }),
      expect.objectContaining({ proto: "http", url: "/ADMIN" }),
      expect.objectContaining({ proto: "https", url: key }),
      expect.objectContaining({ proto: "https", url: "/x//admin" }),
    ]);
    expect(audit).toContainEqual(expect.objectContaining({ host: "mcp.test", path: "/ADMIN", refused: false }));
    expect(audit.at(-1)).toMatchObject({ host: "mcp.test", path: "/x//admin", refused: false });
  });

  it("sends nothing a URI parser reads as host + path: a leading // goes as one /", async () => {
    const n = seen.length;
    // Python's urlsplit, java.net.URI and WHATWG URL read //x/secret as host x, path /secret,
    // which a Prefix /secret block must not let through: the server is sent /x/secret.
    for (const path of ["//x/secret", "///x/secret", "/..//x/secret"]) {
      const got = await overTls(`GET ${path} HTTP/1.1\r\nHost: mcp.test\r\nconnection: close\r\n\r\n`, { servername: "mcp.test", sandbox: "prof" });
      expect([path, statusLines(got)]).toEqual([path, ["HTTP/1.1 200 OK"]]);
    }
    expect(seen.slice(n).map((s) => [s.url, new URL(s.url!, "http://stand-in.test").pathname])).toEqual(Array(3).fill(["/x/secret", "/x/secret"]));
    expect(statusLines(await overTls("GET //secret HTTP/1.1\r\nHost: mcp.test\r\nconnection: close\r\n\r\n", { servername: "mcp.test", sandbox: "prof" }))).toEqual(["HTTP/1.1 403 Forbidden"]);
    expect(audit.at(-1)).toMatchObject({ host: "mcp.test", path: "/secret", rule: "no-secret", refused: true });
  });

  it("refuses (400, audited) a path whose readings have their headers rewritten differently: no reading's rewrite is skipped", async () => {
    const n = seen.length;
    const get = (path: string) => `GET ${path} HTTP/1.1\r\nHost: mcp.test\r\nAuthorization: Bearer mine\r\nX-Role: admin\r\nconnection: close\r\n\r\n`;
    // An Exact /role rule sets X-Role and removes Authorization; Express, Tomcat or nginx serve
    // /role/, /role;x and /role// as /role, and a server decoding twice reads /%2572ole as /role.
    for (const path of ["/role/", "/role;x", "/role//", "/%2572ole"]) {
      const before = audit.length;
      const got = await overTls(get(path), { servername: "mcp.test", sandbox: "prof" });
      expect([path, statusLines(got)]).toEqual([path, ["HTTP/1.1 400 Bad Request"]]);
      expect(got).toContain("rules that rewrite headers treat it differently from /role");
      expect(audit.slice(before)).toEqual([expect.objectContaining({ host: "mcp.test", path, rule: "path", status: 400, refused: true })]);
    }
    expect(seen.slice(n)).toEqual([]);
    // /role itself (and //role, sent as /role) gets the rewrite; /roles, read alike every way, goes as it came.
    for (const path of ["/role", "//role", "/roles/"]) expect([path, statusLines(await overTls(get(path), { servername: "mcp.test", sandbox: "prof" }))]).toEqual([path, ["HTTP/1.1 200 OK"]]);
    expect(seen.slice(n)).toEqual([
      expect.objectContaining({ url: "/role", role: "readonly", auth: undefined }),
      expect.objectContaining({ url: "/role", role: "readonly", auth: undefined }),
      expect.objectContaining({ url: "/roles/", role: "admin", auth: "Bearer mine" }),
    ]);
  });

  it("refuses (400, audited) a path servers read in more than one way", async () => {
    const n = seen.length;
    // A second decode (an app decoding what its framework decoded) that would make a separator,
    // NUL or a dot segment, escaped bytes that are not UTF-8 (an overlong / or .), escapes three deep.
    const twice = ["/x/%252e%252e/admin", "/x%252Fadmin", "/x%255cadmin", "/x%2500", "/x/%252e;y/admin", "/x%2525252e"];
    for (const path of ["/x%2Fadmin", "/x%5cadmin", "/x\\..\\admin", "/admin%00", "/%zzadmin", "/x%", "/..;/admin", "/x/..;/admin", ...twice, "/x%C0%AF..%C0%AFadmin", "/x/%C0%AE%C0%AE/admin", "/x/%25C0%25AF"]) {
      const before = audit.length;
      const got = await overTls(`GET ${path} HTTP/1.1\r\nHost: mcp.test\r\nconnection: close\r\n\r\n`, { servername: "mcp.test" });
      expect([path, statusLines(got)]).toEqual([path, ["HTTP/1.1 400 Bad Request"]]);
      expect(audit.slice(before)).toEqual([expect.objectContaining({ host: "mcp.test", rule: "path", status: 400, refused: true })]);
    }
    expect(statusLines(await plainHttp("GET /x%2F..%2Fadmin HTTP/1.1\r\nHost: mcp.test\r\nconnection: close\r\n\r\n"))).toEqual(["HTTP/1.1 400 Bad Request"]);
    expect(seen.slice(n)).toEqual([]);
  });

  it("sends a request to a host no rule inspects with its target as it came", async () => {
    const n = seen.length;
    expect(await plainHttp("GET //x/%2F/../y HTTP/1.1\r\nHost: other.test\r\nconnection: close\r\n\r\n")).toMatch(/^HTTP\/1\.1 200/);
    expect(seen.slice(n)).toEqual([expect.objectContaining({ host: "other.test", url: "//x/%2F/../y" })]);
  });

  it("screens an MCP endpoint a profile names by its path however the path is spelt", async () => {
    const n = seen.length;
    // /;x/mcp is /mcp to a server that drops parameters and merges slashes.
    for (const path of ["//mcp", "/%6dcp", "/x/../mcp", "/;x/mcp", "/%256dcp"]) {
      const got = await overTls(post("mcp.test", call("danger")).replace("POST /mcp", `POST ${path}`), { servername: "mcp.test", sandbox: "prof" });
      expect([path, statusLines(got)]).toEqual([path, ["HTTP/1.1 200 OK"]]);
      expect(got).toContain('tool \\"danger\\" is denied');
    }
    expect(seen.slice(n)).toEqual([]);
  });
});

describe("bytes neither TLS nor HTTP", () => {
  it("are closed (audited) to an address an inspected name was answered for: ssh, a lower-case method, silence", async () => {
    const before = plainConnections;
    for (const bytes of ["SSH-2.0-OpenSSH_9.6\r\n", "get /admin HTTP/1.1\r\nHost: mcp.test\r\n\r\n"]) {
      const n = audit.length;
      expect(await plainHttp(bytes)).toBe("");
      expect(audit.slice(n)).toEqual([expect.objectContaining({ sandbox: "sbx", host: "127.0.0.1", rule: "neither TLS nor HTTP to an inspected address", status: 403, refused: true })]);
    }
    // Nothing within the first-request timeout (a client waiting to send TLS or HTTP later).
    const n = audit.length;
    const s = await redirected("sbx", plainPort);
    const closed = await new Promise<boolean>((resolve) => {
      const t = setTimeout(() => resolve(false), 3000);
      s.on("close", () => (clearTimeout(t), resolve(true))).on("data", () => {});
    });
    s.destroy();
    expect(closed).toBe(true);
    expect(audit.slice(n)).toEqual([expect.objectContaining({ rule: "neither TLS nor HTTP to an inspected address" })]);
    expect(plainConnections).toBe(before);
  });

  it("pass through to a port that is not a web port (ssh, git@) of an inspected address", async () => {
    const seen: string[] = [];
    const sshLike = net.createServer((c) => c.on("data", (d) => (seen.push(d.toString()), c.end("SSH-2.0-stand-in\r\n"))));
    await new Promise<void>((r) => sshLike.listen(0, "127.0.0.1", r));
    try {
      const s = await redirected("sbx", (sshLike.address() as AddressInfo).port);
      const got = await new Promise<string>((resolve) => {
        let out = "";
        const t = setTimeout(() => s.destroy(), 3000);
        s.on("data", (c: Buffer) => (out += c.toString())).on("close", () => (clearTimeout(t), resolve(out)));
        s.write("SSH-2.0-OpenSSH_9.6\r\n");
      });
      expect(got).toBe("SSH-2.0-stand-in\r\n");
      expect(seen).toEqual(["SSH-2.0-OpenSSH_9.6\r\n"]);
    } finally {
      sshLike.close();
    }
  });

  it("pass through where no inspected name is served, a rate limit over every request (which names no host) too", async () => {
    const before = plainConnections;
    // The stand-in is an HTTP server: it refuses the bytes itself once they reached it.
    expect(await plainHttp("SSH-2.0-OpenSSH_9.6\r\n\r\n", "open")).toMatch(/^HTTP\/1\.1 400/);
    expect(await plainHttp("SSH-2.0-OpenSSH_9.6\r\n\r\n", "all")).toMatch(/^HTTP\/1\.1 400/);
    expect(plainConnections).toBe(before + 2);
  });
});

describe("a name with a trailing dot is the name without it", () => {
  it("an SNI of api.test. is api.test: allowed by its rule, Host api.test is its Host, the credential goes", async () => {
    const n = seen.length;
    const got = await overTls("GET /x HTTP/1.1\r\nHost: api.test\r\nconnection: close\r\n\r\n", { servername: "api.test." });
    expect(statusLines(got)).toEqual(["HTTP/1.1 200 OK"]);
    expect(seen.slice(n)).toEqual([expect.objectContaining({ sni: "api.test", host: "api.test", auth: `Bearer ${SECRET}` })]);
    expect(await overTls("GET /admin HTTP/1.1\r\nHost: MCP.test.\r\nconnection: close\r\n\r\n", { servername: "mcp.test." })).toContain('blocked by rule "no-admin"');
  });
});

describe("MCP bodies a sandbox holds at once", () => {
  /** A tools/call of "safe" whose JSON is `size` bytes. */
  const padded = (size: number) => {
    const body = (pad: string) => JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "safe", arguments: { pad } } });
    return body("x".repeat(size - body("").length));
  };
  const until = async (what: () => boolean) => {
    for (let i = 0; i < 300 && !what(); i++) await new Promise((r) => setTimeout(r, 10));
    return what();
  };

  it("are bounded per sandbox: past the budget a request is refused 429 before it is sent, an answer 502; the budget comes back", async () => {
    const n = seen.length;
    // A: 50 000 of its 60 000 bytes sent, held while the proxy waits for the rest.
    const a = padded(60_000);
    const raw = await redirected("sbx", tlsPort);
    const sa = tls.connect({ socket: raw, servername: "mcp.test", ca: ca.certPem });
    let gotA = "";
    const closedA = new Promise<void>((resolve) => sa.on("data", (c: Buffer) => (gotA += c.toString())).on("close", resolve).on("error", () => {}));
    sa.write(post("mcp.test", a).slice(0, -10_000));
    expect(await until(() => handler.mcpHeld("sbx") >= 50_000)).toBe(true);
    // B: 60 000 more would pass 100 KiB held at once.
    const b = await overTls(post("mcp.test", padded(60_000)), { servername: "mcp.test" });
    expect(statusLines(b)).toEqual(["HTTP/1.1 429 Too Many Requests"]);
    expect(b.toLowerCase()).toContain("retry-after: 1");
    expect(audit.at(-1)).toMatchObject({ sandbox: "sbx", host: "mcp.test", rule: "mcp", status: 429, refused: true });
    // An answer that would pass it: the call was sent, so the client is told (502), not asked to retry.
    const big = await overTls(post("mcp.test", call("safe")).replace("POST /mcp", "POST /big"), { servername: "mcp.test" });
    expect(statusLines(big)).toEqual(["HTTP/1.1 502 Bad Gateway"]);
    expect(big).toContain("MCP bodies held at once passed");
    // A's end: screened and sent; then nothing is held, and a body as large as B's goes.
    sa.write(post("mcp.test", a).slice(-10_000));
    await closedA;
    expect(statusLines(gotA)).toEqual(["HTTP/1.1 200 OK"]);
    expect(await until(() => handler.mcpHeld("sbx") === 0)).toBe(true);
    expect(statusLines(await overTls(post("mcp.test", padded(60_000)), { servername: "mcp.test" }))).toEqual(["HTTP/1.1 200 OK"]);
    expect(handler.mcpHeld("sbx")).toBe(0);
    expect(seen.slice(n).map((x) => [x.url, x.body.length])).toEqual([["/big", call("safe").length], ["/mcp", 60_000], ["/mcp", 60_000]]);
  });
});
