// The traffic-proxy's L7 handler (the redirected path's `L7Hook`): for a sandbox with an L7
// policy, connections to hosts the policy names are read as HTTP (HTTPS through the sandbox's own
// CA, ca.ts), each request decided (policy.ts) on every reading servers make of its path
// (path.ts), its least-rewritten safe form sent on, given its headers (secrets resolved here, in the
// proxy, never in the sandbox), screened for MCP tool calls (mcp.ts), rate limited, audited, and
// sent to the one destination the L4 decision allowed. Plain HTTP is always read, each request
// judged by its own Host; TLS without SNI, or bytes neither TLS nor HTTP, to an address an
// inspected name is served from are refused; other connections pass through untouched.
import http from "node:http";
import type { Socket } from "node:net";
import type { Duplex } from "node:stream";
import tls from "node:tls";
import { RateLimiter } from "./rate.ts";
import { inspects, namedForInspection, type L7Policy } from "./policy.ts";
import { readTarget } from "./path.ts";
import { parseIp } from "../../../schema/egress/address.ts";
import { bareHost } from "../sniff.ts";
import { SseFilter, filterAnswer, rpcText, screenRequest } from "./mcp.ts";
import { HOP_HEADERS as HOP, prepareRequest, type Prepared } from "./request.ts";
import { withHead } from "./streams.ts";
import { HeldBytes, type Hold } from "./held-bytes.ts";
import { UpstreamPool, type PoolOptions, type PooledRequest } from "./pool.ts";
import type { LeafPem, SandboxCa } from "./ca.ts";
import type { NetworkAuditRecord } from "../../../schema/api/network-audit.ts";

/** What the redirected path hands over (structurally its `RedirectedConnection`). */
export interface L7Connection {
  sandbox: string;
  ip: string;
  port: number;
  sniffed?: { kind: string; name?: string } | undefined | null;
  head: Buffer;
  client: Socket;
  allowedBy: string;
  /** The names the sandbox's DNS was answered `ip` for (what the address may serve, whatever its
   * bytes say); absent: none known. */
  names?: readonly string[];
  /** `shared`: a socket the handler's pool may keep for the sandbox's later connections to the same ip:port. */
  connectUpstream(opts?: { shared?: boolean }): Promise<Socket>;
}

/** One audit record: who, where, which rule, status and bytes; never bodies, headers or secrets. */
export type AuditRecord = NetworkAuditRecord;

export interface L7Options {
  policyFor(sandbox: string): L7Policy | undefined;
  /** The sandbox's secret values its rules name (sent by the edge for this sandbox only). */
  secretsFor(sandbox: string): ReadonlyMap<string, string>;
  caFor(sandbox: string): Promise<SandboxCa>;
  audit(rec: AuditRecord): void;
  /** TLS options toward upstreams (tests: a stand-in's CA). Default: the system's roots. */
  upstreamTls?: tls.ConnectionOptions;
  log?(line: string): void;
  /** The upstream pool's bounds (pool.ts). */
  upstreamPool?: Omit<PoolOptions, "tls">;
  /** Largest JSON-RPC body screened or filtered; larger MCP bodies are refused (413/502). */
  maxMcpBody?: number;
  /** MCP body bytes held at once for one sandbox (held-bytes.ts); past it a request is refused
   * 429 before it is sent, an answer cut (502, or its SSE stream ended). Default 16 MiB. */
  maxMcpHeldPerSandbox?: number;
  /** Destination ports a web server listens on, where bytes neither TLS nor HTTP to an inspected
   * address are refused (a server there may read them as a request). Elsewhere (ssh on 22, a
   * database) they pass as any other protocol does. Default 80, 443, 8080, 8443. */
  webPorts?: readonly number[];
}

const WEB_PORTS = [80, 443, 8080, 8443];
interface Ctx {
  conn: L7Connection;
  /** TLS: the SNI, which chose the leaf and the rules; plain HTTP: "" (each request names its own). */
  host: string;
  tls: boolean;
  /** Whether the address itself needs L7 judgement (it or a name answered for it is inspected):
   * a plain-HTTP request there must name its host. */
  judged: boolean;
  /** The names this connection is known to be for: the one its first bytes asked for (judged at
   * L4) and those the sandbox's DNS was answered its address for. */
  known: ReadonlySet<string>;
}

/** The first line of HTTP/2's connection preface (RFC 9113 3.4). */
const H2_PREFACE = "PRI * HTTP/2.0\r\n";

/** Methods whose request may be sent again when a kept-alive upstream closed as it was reused. */
const IDEMPOTENT = new Set(["GET", "HEAD", "OPTIONS", "DELETE", "PUT"]);


export class L7Handler {
  readonly #o: L7Options;
  readonly #server: http.Server;
  readonly #ctx = new WeakMap<object, Ctx>();
  readonly #rate = new RateLimiter();
  readonly #pool: UpstreamPool;
  /** A leaf's TLS context, made once (parsing its PEM key per connection costs a handshake's worth). */
  readonly #contexts = new WeakMap<LeafPem, tls.SecureContext>();

  /** Bytes of an MCP request or response body, and characters of one SSE event, held at most. */
  readonly #maxMcpBody: number;
  readonly #held: HeldBytes;
  readonly #maxMcpHeld: number;
  readonly #webPorts: ReadonlySet<number>;

  constructor(o: L7Options) {
    this.#o = o;
    this.#webPorts = new Set(o.webPorts ?? WEB_PORTS);
    this.#maxMcpBody = o.maxMcpBody ?? 4 << 20;
    this.#maxMcpHeld = o.maxMcpHeldPerSandbox ?? 16 << 20;
    this.#held = new HeldBytes(this.#maxMcpHeld);
    this.#pool = new UpstreamPool({ ...o.upstreamPool, ...(o.upstreamTls ? { tls: o.upstreamTls } : {}) });
    // Node's defaults would cut a request body longer than 5 minutes (requestTimeout) and drop an idle
    // client connection after 5 s: a proxy carries long uploads and keeps connections as the proxy
    // port does (30 s). A slow header is still bounded (headersTimeout, 60 s).
    this.#server = http.createServer({ keepAlive: true, requestTimeout: 0, keepAliveTimeout: 30_000 }, (req, res) => void this.#request(req, res).catch((e: Error) => {
      this.#o.log?.(`traffic-proxy: l7: ${e.message}`);
      res.destroy();
    }));
    this.#server.on("upgrade", (req: http.IncomingMessage, socket: Duplex, head: Buffer) => void this.#upgrade(req, socket, head).catch(() => socket.destroy()));
  }

  /** MCP body bytes held for `sandbox` now. */
  mcpHeld(sandbox: string): number {
    return this.#held.held(sandbox);
  }

  wants(sandbox: string): boolean {
    return this.#o.policyFor(sandbox) !== undefined;
  }

  /** Drops what is kept for a sandbox (its upstream pool), when it is gone. */
  forget(sandbox: string): void {
    this.#pool.forget(sandbox);
  }

  handle(conn: L7Connection): void {
    void this.#handle(conn).catch(() => conn.client.destroy());
  }

  async #handle(conn: L7Connection): Promise<void> {
    const policy = this.#o.policyFor(conn.sandbox);
    if (!policy) return this.#passThrough(conn);
    const kind = conn.sniffed?.kind;
    const name = conn.sniffed?.name?.toLowerCase();
    // What the address may serve, whatever the bytes say: the ClientHello's SNI and a request's
    // Host are the sandbox's to write (or leave out), and the server may serve an inspected name anyway.
    const judged = [conn.ip, ...(conn.names ?? [])].some((n) => inspects(policy, n));
    // The names a request on it may give as Host (made only for a served connection).
    const known = () => new Set([...(name ? [name] : []), ...(conn.names ?? [])]);
    // HTTP/2 with prior knowledge (plaintext gRPC) cannot be read here: passed through where no
    // inspected name is served, refused where one is.
    if (kind === "http" && conn.head.subarray(0, H2_PREFACE.length).toString("latin1") === H2_PREFACE) {
      if (!judged) return this.#passThrough(conn);
      this.#o.audit({ sandbox: conn.sandbox, host: name || conn.ip, method: "PRI", path: "", rule: "HTTP/2 without TLS to an inspected address", status: 403, bytesOut: 0, bytesIn: 0, refused: true });
      return void conn.client.destroy();
    }
    // Plain HTTP stays with the L7 server whatever its first request names: each request on the
    // connection is judged by its own Host.
    // (The head-fed stream takes the client's bytes from when it is made: only for a served connection.)
    if (kind === "http") return this.#serve(withHead(conn.client, conn.head), { conn, host: "", tls: false, judged, known: known() });
    if (kind === "tls" && !name) {
      if (!judged) return this.#passThrough(conn);
      // Nothing to choose rules (or a leaf) by, to an address an inspected name is served from.
      this.#o.audit({ sandbox: conn.sandbox, host: conn.ip, method: "CONNECT", path: "", rule: "TLS without a server name (SNI) to an inspected address", status: 403, bytesOut: 0, bytesIn: 0, refused: true });
      return void conn.client.destroy();
    }
    if (kind === "tls" && inspects(policy, name!)) {
      const leaf = await (await this.#o.caFor(conn.sandbox)).leaf(name!);
      let secureContext = this.#contexts.get(leaf);
      if (!secureContext) this.#contexts.set(leaf, (secureContext = tls.createSecureContext({ key: leaf.key, cert: leaf.cert })));
      const socket = new tls.TLSSocket(withHead(conn.client, conn.head) as unknown as Socket, { isServer: true, secureContext, ALPNProtocols: ["http/1.1"] });
      socket.on("error", () => conn.client.destroy());
      return this.#serve(socket, { conn, host: name!, tls: true, judged, known: known() });
    }
    // Neither TLS nor HTTP (a lower-case method, nothing at all within the first-request
    // timeout) to a web port of an address a rule names a host of: the server there may still
    // read the bytes as a request to that host, unjudged. Other ports (ssh, git@, a database)
    // carry other protocols. (`rateLimitAll` alone names no host: counted below.)
    if (kind !== "tls" && this.#webPorts.has(conn.port) && [conn.ip, ...(conn.names ?? [])].some((n) => namedForInspection(policy, n))) {
      this.#o.audit({ sandbox: conn.sandbox, host: conn.ip, method: "CONNECT", path: "", rule: "neither TLS nor HTTP to an inspected address", status: 403, bytesOut: 0, bytesIn: 0, refused: true });
      return void conn.client.destroy();
    }
    if (kind !== "tls" && policy.rateLimitAll && !this.#rate.take(conn.sandbox, policy.requestsPerMinute)) {
      // Another protocol: the connection is the request.
      this.#o.audit({ sandbox: conn.sandbox, host: conn.ip, method: "CONNECT", path: "", rule: "requestsPerMinute", status: 429, bytesOut: 0, bytesIn: 0, refused: true });
      return void conn.client.destroy();
    }
    return this.#passThrough(conn);
  }

  #serve(socket: object, ctx: Ctx): void {
    this.#ctx.set(socket, ctx);
    this.#server.emit("connection", socket);
  }

  /** The host a request is judged by, or why it is refused. Over TLS the SNI chose the rules and
   * any credential, so the request must name that host (a front routing by Host would otherwise
   * take the credential to another); over plain HTTP each request's own Host, which a request to
   * an inspected address must carry as a name: an inspected one, or one known to be served there
   * (else a server's default host could be reached under a name no rule names). */
  #hostFor(ctx: Ctx, policy: L7Policy, req: http.IncomingMessage): { host: string; inspected: boolean } | { status: number; text: string } {
    // An absolute-form target names its own host, which a server takes over Host (RFC 9112 3.2.2).
    const target = req.url ?? "";
    if (!target.startsWith("/") && !(req.method === "OPTIONS" && target === "*")) return { status: 400, text: "the request target must be a path (origin form)" };
    const named = bareHost(req.headers.host);
    // A Host that is no name or address could be read as one by a lenient server.
    if (named && !/^[a-z0-9_.-]{1,253}$/.test(named) && !parseIp(named)) return { status: 400, text: "the Host header must be a host name or an address" };
    if (ctx.tls) {
      if (named === ctx.host) return { host: ctx.host, inspected: true };
      return named ? { status: 421, text: `this connection is to ${ctx.host} (SNI), the request names ${named}` } : { status: 400, text: `a request to ${ctx.host} must carry its Host` };
    }
    const inspected = named !== "" && inspects(policy, named);
    if (ctx.judged && !inspected) {
      if (!named || parseIp(named)) return { status: 400, text: `a request to ${ctx.conn.ip} must name its host (Host), not ${named ? "an address" : "nothing"}` };
      if (!ctx.known.has(named)) return { status: 421, text: `${named} was not asked for at ${ctx.conn.ip}` };
    }
    return { host: named || ctx.conn.ip, inspected };
  }

  /** A request to `r.host` judged, for the request and the upgrade paths alike. To an inspected
   * host: every reading servers make of its target (path.ts; one no reading can judge: 400) is
   * judged by the rules (request.ts), after the request is counted against the sandbox's rate,
   * and `path` (what is sent, and audited) becomes the target's safe form. To a host no rule
   * inspects: the target as it came, neither read nor counted. */
  #judge(ctx: Ctx, policy: L7Policy, req: http.IncomingMessage, r: { host: string; inspected: boolean; method: string; path: string }): Prepared & { path: string } {
    const { conn } = ctx;
    let { path } = r;
    let readings: string[] = [];
    if (r.inspected) {
      const n = readTarget(path);
      if ("invalid" in n) return { path, refuse: { status: 400, rule: "path", text: pathRefusal(n.invalid) } };
      ({ target: path, readings } = n);
      if (!this.#rate.take(conn.sandbox, policy.requestsPerMinute)) return { path, refuse: { status: 429, rule: "requestsPerMinute", text: `rate limit of ${policy.requestsPerMinute} requests per minute` } };
    }
    return { path, ...prepareRequest(policy, { host: r.host, tls: ctx.tls, allowedBy: conn.allowedBy, method: r.method, path, readings, headers: req.headers }, this.#o.secretsFor(conn.sandbox)) };
  }

  async #passThrough(conn: L7Connection): Promise<void> {
    const up = await conn.connectUpstream();
    if (conn.head.length) up.write(conn.head);
    conn.client.pipe(up);
    up.pipe(conn.client);
    conn.client.resume();
  }

  /** WebSocket and other upgrades to an inspected host: decided and given their headers like any
   * request, then the two connections are piped (frames are not read); refused to a host MCP
   * rules govern. */
  async #upgrade(req: http.IncomingMessage, socket: Duplex, head: Buffer): Promise<void> {
    const ctx = this.#ctx.get(req.socket);
    const policy = ctx && this.#o.policyFor(ctx.conn.sandbox);
    if (!ctx || !policy) return void socket.destroy();
    const { conn } = ctx;
    const method = req.method ?? "GET";
    let path = req.url ?? "/";
    const at = this.#hostFor(ctx, policy, req);
    const host = "host" in at ? at.host : ctx.host || conn.ip;
    const inspected = "host" in at && at.inspected;
    const record = (rule: string, status: number, refused = false) => this.#o.audit({ sandbox: conn.sandbox, host, method, path: path.split("?")[0]!, rule, status, bytesOut: 0, bytesIn: 0, refused });
    const refuse = (status: number, rule: string, text: string) => {
      record(rule, status, true);
      socket.end(`HTTP/1.1 ${status} ${http.STATUS_CODES[status] ?? ""}\r\ncontent-type: text/plain\r\nconnection: close\r\n\r\ntraffic-proxy: ${text}\n`);
    };
    if ("status" in at) return refuse(at.status, "host", at.text);
    const p = this.#judge(ctx, policy, req, { host, inspected, method, path });
    path = p.path;
    if ("refuse" in p) return refuse(p.refuse.status, p.refuse.rule, p.refuse.text);
    // Frames are piped unread, so a tools/call over a WebSocket transport would pass the ACL.
    if (p.mcp) return refuse(403, "mcp", `upgrades to ${host} are refused: MCP rules govern it, and frames are not screened`);
    const block = headerBlock({ ...p.headers, connection: "Upgrade", upgrade: String(req.headers.upgrade ?? "") });
    if (block === undefined) return refuse(502, p.rule, "a header the rules set is not a valid HTTP header");
    const raw = await conn.connectUpstream();
    const up: Duplex = ctx.tls ? tls.connect({ ...this.#o.upstreamTls, socket: raw, servername: host, ALPNProtocols: ["http/1.1"] }) : raw;
    up.on("error", () => socket.destroy());
    socket.on("error", () => up.destroy());
    up.once("data", (first: Buffer) => inspected && record(p.rule, Number(/^HTTP\/1\.[01] (\d{3})/.exec(first.toString("latin1"))?.[1] ?? 0)));
    up.write(`${method} ${path} HTTP/1.1\r\n${block}\r\n`);
    if (head.length) up.write(head);
    socket.pipe(up);
    up.pipe(socket);
  }

  async #request(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const ctx = this.#ctx.get(req.socket);
    if (!ctx) return void res.destroy();
    const { conn } = ctx;
    const policy = this.#o.policyFor(conn.sandbox);
    const method = req.method ?? "GET";
    let path = req.url ?? "/";
    const at = policy && this.#hostFor(ctx, policy, req);
    const host = at && "host" in at ? at.host : ctx.host || conn.ip;
    // A plain-HTTP request to a host no rule inspects is sent on as it is, neither counted nor audited.
    const inspected = !at || !("host" in at) || at.inspected;
    const record = (rule: string, status: number, bytesIn = 0, tool?: string, refused = false) =>
      inspected && this.#o.audit({ sandbox: conn.sandbox, host, method, path: path.split("?")[0]!, rule, status, bytesOut: Number(req.headers["content-length"] ?? 0), bytesIn, ...(tool ? { tool } : {}), refused });
    const refuse = (status: number, rule: string, text: string) => {
      record(rule, status, 0, undefined, true);
      res.writeHead(status, { "content-type": "text/plain" }).end(`traffic-proxy: ${text}\n`);
    };
    if (!policy) return refuse(403, "no L7 policy", "egress denied: the sandbox's policy changed");
    if ("status" in at!) return refuse(at.status, "host", at.text);
    const prepared = this.#judge(ctx, policy, req, { host, inspected, method, path });
    path = prepared.path;
    if ("refuse" in prepared) return refuse(prepared.refuse.status, prepared.refuse.rule, prepared.refuse.text);
    const { headers, mcp: decide } = prepared;
    let rule = prepared.rule;
    const mcp = decide !== undefined;
    let body: Buffer | undefined;
    let bodyHold: Hold | undefined;
    let tool: string | undefined;
    if (mcp && method === "POST") {
      // An encoded body would pass the screen unread and could be decoded by the server.
      const encoding = String(req.headers["content-encoding"] ?? "").trim().toLowerCase();
      if (encoding !== "" && encoding !== "identity") return refuse(415, "mcp", "MCP request bodies are screened, so they must be sent without a Content-Encoding");
      // Held until it is sent on, or the exchange ends without that.
      const hold = (bodyHold = this.#held.hold(conn.sandbox));
      res.once("close", hold.release);
      const raw = await readBounded(req, this.#maxMcpBody, hold);
      if (raw === "budget") {
        res.setHeader("retry-after", "1");
        return refuse(429, "mcp", `this sandbox's MCP bodies being screened hold ${this.#held.held(conn.sandbox)} bytes, ${this.#maxMcpHeld} at most: try again`);
      }
      if (typeof raw === "string") return refuse(413, "mcp", "MCP request body too large to screen");
      const text = rpcText(raw) ?? "";
      const s = screenRequest(decide!, text);
      if (s.invalid) return refuse(400, "mcp", s.invalid);
      body = Buffer.from(text, "utf8");
      tool = s.calls.map((c) => c.tool).join(",") || undefined;
      if (s.calls[0]) rule = s.calls.map((c) => c.rule).join(",");
      const denied = s.calls.find((c) => !c.allowed);
      if (s.answer !== undefined) {
        record(denied?.rule ?? "mcp", s.answer ? 200 : 202, Buffer.byteLength(s.answer), tool, true);
        if (!s.answer) return void res.writeHead(202).end();
        return void res.writeHead(200, { "content-type": "application/json" }).end(s.answer);
      }
      headers["content-length"] = String(Buffer.byteLength(text));
      delete headers["transfer-encoding"];
    }

    // Upstream sockets come from the sandbox's pool (pool.ts), made by this connection's own connect.
    const pooled: http.RequestOptions & PooledRequest = {
      host: conn.ip,
      port: conn.port,
      method,
      path,
      headers,
      setHost: false,
      agent: this.#pool.agentFor(conn.sandbox),
      upstreamConnect: () => conn.connectUpstream({ shared: true }),
      ...(ctx.tls ? { upstreamName: host } : {}),
    };
    // A body-less idempotent request on a reused socket the upstream closed meanwhile is sent
    // once more, on a new socket (as browsers and proxies do), since nothing of it was answered.
    const bodyless = body === undefined && !req.headers["transfer-encoding"] && Number(req.headers["content-length"] ?? 0) === 0;
    let current: http.ClientRequest | undefined;
    const send = (retry: boolean): http.ClientRequest => {
      const up = (current = http.request(pooled));
      up.on("error", () => {
        if (retry && up.reusedSocket && !res.headersSent && bodyless && IDEMPOTENT.has(method)) return void send(false).end();
        res.destroy();
      });
      up.on("response", (ur) => respond(ur));
      return up;
    };
    const respond = (ur: http.IncomingMessage) => {
      const type = String(ur.headers["content-type"] ?? "");
      const out: http.OutgoingHttpHeaders = {};
      for (const [k, val] of Object.entries(ur.headers)) if (!HOP.has(k) && val !== undefined) out[k] = val;
      let bytes = 0;
      ur.on("data", (c: Buffer) => (bytes += c.length));
      ur.on("end", () => record(rule, ur.statusCode ?? 0, bytes, tool));
      if (mcp && type.includes("application/json")) {
        const hold = this.#held.hold(conn.sandbox);
        res.once("close", hold.release);
        void readBounded(ur, this.#maxMcpBody, hold).then((b) => {
          if (b === "budget") {
            this.#o.log?.(`traffic-proxy: l7: ${conn.sandbox}: an MCP answer from ${host} passed the sandbox's ${this.#maxMcpHeld} bytes held at once; refused`);
            return void res.writeHead(502, { "content-type": "text/plain" }).end(`traffic-proxy: the answer of ${host} could not be screened: this sandbox's MCP bodies held at once passed ${this.#maxMcpHeld} bytes\n`);
          }
          if (typeof b === "string") return void res.destroy();
          const text = filterAnswer(decide!, b.toString("utf8"));
          out["content-length"] = String(Buffer.byteLength(text));
          res.writeHead(ur.statusCode ?? 502, out).end(text);
          hold.release();
        });
      } else if (mcp && type.includes("text/event-stream")) {
        delete out["content-length"];
        res.writeHead(ur.statusCode ?? 502, out);
        // One event is held at most maxMcpBody long, and the upstream waits while the client is slow.
        const f = new SseFilter(decide!, this.#maxMcpBody);
        const hold = this.#held.hold(conn.sandbox);
        res.once("close", hold.release);
        ur.setEncoding("utf8");
        ur.on("data", (c: string) => {
          const text = f.push(c);
          if (text === undefined || !hold.set(f.pending)) {
            const why = text === undefined ? `outgrew ${this.#maxMcpBody} characters` : `passed the sandbox's ${this.#maxMcpHeld} bytes held at once`;
            this.#o.log?.(`traffic-proxy: l7: ${conn.sandbox}: an SSE event from ${host} ${why} unfinished; stream ended`);
            ur.destroy();
            return void res.destroy();
          }
          if (!res.write(text)) {
            ur.pause();
            res.once("drain", () => ur.resume());
          }
        });
        ur.on("end", () => res.end(f.end()));
      } else {
        res.writeHead(ur.statusCode ?? 502, out);
        ur.pipe(res);
      }
    };
    const up = send(true);
    // A client that leaves takes its upstream request with it (its socket is not put back).
    res.once("close", () => {
      if (!res.writableFinished) current?.destroy();
    });
    if (body) up.end(body, () => bodyHold?.release());
    else if (bodyless) up.end();
    else req.pipe(up);
  }
}

function pathRefusal(why: string): string {
  return `${why}: refused, since servers read it in ways the rules cannot all judge`;
}

/** A header block written by hand (the upgrade path): values from rules and secrets are checked,
 * since no HTTP library stands between them and the wire there. */
function headerBlock(headers: http.OutgoingHttpHeaders): string | undefined {
  let out = "";
  for (const [k, v] of Object.entries(headers)) {
    for (const one of Array.isArray(v) ? v : [String(v)]) {
      if (/[\r\n\0]/.test(one) || !/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(k)) return undefined;
      out += `${k}: ${one}\r\n`;
    }
  }
  return out;
}

/** The whole body, its bytes held by `hold` (the caller releases them); `large` past `max` bytes,
 * `budget` past the sandbox's budget, `cut` when the stream failed or closed first (each of those
 * holding nothing). */
function readBounded(s: NodeJS.ReadableStream, max: number, hold: Hold): Promise<Buffer | "large" | "budget" | "cut"> {
  return new Promise((resolve) => {
    let parts: Buffer[] = [];
    let n = 0;
    let done = false;
    const stop = (why: "large" | "budget" | "cut") => {
      if (done) return;
      done = true;
      parts = [];
      hold.release();
      resolve(why);
    };
    s.on("data", (c: Buffer) => {
      if (done) return;
      n += c.length;
      if (n > max) return stop("large");
      if (!hold.take(c.length)) return stop("budget");
      parts.push(c);
    });
    s.on("end", () => {
      if (done) return;
      done = true;
      resolve(Buffer.concat(parts));
    });
    s.on("error", () => stop("cut"));
    s.on("close", () => stop("cut"));
  });
}
