// The traffic-proxy's L7 handler (the redirected path's `L7Hook`): for a sandbox with an L7
// policy, connections to hosts the policy names are read as HTTP (HTTPS through the sandbox's own
// CA, ca.ts), each request decided (policy.ts), given its headers (secrets resolved here, in the
// proxy, never in the sandbox), screened for MCP tool calls (mcp.ts), rate limited, audited, and
// sent to the one destination the L4 decision allowed. Other connections pass through untouched.
import http from "node:http";
import type { Socket } from "node:net";
import tls from "node:tls";
import { RateLimiter } from "./rate.ts";
import { decideRequest, decideTool, inspects, resolveSecrets, type L7Policy } from "./policy.ts";
import { SseFilter, filterAnswer, screenRequest, type ToolDecider } from "./mcp.ts";
import { evaluateProfiles, profileToolVerdict, renderToken, type ProfileOutcome } from "./profile.ts";
import { secretRefs } from "../../../schema/api/secret.ts";
import { oneConnectionAgent, withHead } from "./streams.ts";
import type { SandboxCa } from "./ca.ts";

/** What the redirected path hands over (structurally its `RedirectedConnection`). */
export interface L7Connection {
  sandbox: string;
  ip: string;
  port: number;
  sniffed?: { kind: string; name?: string } | undefined | null;
  head: Buffer;
  client: Socket;
  allowedBy: string;
  connectUpstream(): Promise<Socket>;
}

/** One audit record: who, where, which rule, status and bytes; never bodies, headers or secrets. */
export interface AuditRecord {
  sandbox: string;
  host: string;
  method: string;
  path: string;
  rule: string;
  status: number;
  bytesOut: number;
  bytesIn: number;
  tool?: string;
}

export interface L7Options {
  policyFor(sandbox: string): L7Policy | undefined;
  /** The sandbox's secret values its rules name (sent by the edge for this sandbox only). */
  secretsFor(sandbox: string): ReadonlyMap<string, string>;
  caFor(sandbox: string): Promise<SandboxCa>;
  audit(rec: AuditRecord): void;
  /** TLS options toward upstreams (tests: a stand-in's CA). Default: the system's roots. */
  upstreamTls?: tls.ConnectionOptions;
  log?(line: string): void;
  /** Largest JSON-RPC body screened or filtered; larger MCP bodies are refused (413/502). */
  maxMcpBody?: number;
}

interface Ctx {
  conn: L7Connection;
  host: string;
  tls: boolean;
  agent: http.Agent;
}

const HOP = new Set(["connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te", "trailer"]);

export class L7Handler {
  readonly #o: L7Options;
  readonly #server: http.Server;
  readonly #ctx = new WeakMap<object, Ctx>();
  readonly #rate = new RateLimiter();

  constructor(o: L7Options) {
    this.#o = o;
    this.#server = http.createServer({ keepAlive: true }, (req, res) => void this.#request(req, res).catch((e: Error) => {
      this.#o.log?.(`traffic-proxy: l7: ${e.message}`);
      res.destroy();
    }));
  }

  wants(sandbox: string): boolean {
    return this.#o.policyFor(sandbox) !== undefined;
  }

  handle(conn: L7Connection): void {
    void this.#handle(conn).catch(() => conn.client.destroy());
  }

  async #handle(conn: L7Connection): Promise<void> {
    const policy = this.#o.policyFor(conn.sandbox);
    const isTls = conn.sniffed?.kind === "tls";
    const host = (conn.sniffed?.name || conn.ip).toLowerCase();
    if (!policy || !inspects(policy, host) || (conn.sniffed?.kind !== "http" && !isTls)) return this.#passThrough(conn);
    const src = withHead(conn.client, conn.head);
    let socket: Socket | typeof src = src;
    if (isTls) {
      const leaf = await (await this.#o.caFor(conn.sandbox)).leaf(host);
      socket = new tls.TLSSocket(src as unknown as Socket, { isServer: true, key: leaf.key, cert: leaf.cert, ALPNProtocols: ["http/1.1"] });
      socket.on("error", () => conn.client.destroy());
    }
    const agent = oneConnectionAgent(conn.connectUpstream, isTls ? { ...this.#o.upstreamTls, servername: host } : undefined);
    this.#ctx.set(socket, { conn, host, tls: isTls, agent });
    this.#server.emit("connection", socket);
  }

  async #passThrough(conn: L7Connection): Promise<void> {
    const up = await conn.connectUpstream();
    if (conn.head.length) up.write(conn.head);
    conn.client.pipe(up);
    up.pipe(conn.client);
    conn.client.resume();
  }

  async #request(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const ctx = this.#ctx.get(req.socket);
    if (!ctx) return void res.destroy();
    const { conn, host } = ctx;
    const policy = this.#o.policyFor(conn.sandbox);
    const method = req.method ?? "GET";
    const path = req.url ?? "/";
    const record = (rule: string, status: number, bytesIn = 0, tool?: string) =>
      this.#o.audit({ sandbox: conn.sandbox, host, method, path: path.split("?")[0]!, rule, status, bytesOut: Number(req.headers["content-length"] ?? 0), bytesIn, ...(tool ? { tool } : {}) });
    const refuse = (status: number, rule: string, text: string) => {
      record(rule, status);
      res.writeHead(status, { "content-type": "text/plain" }).end(`traffic-proxy: ${text}\n`);
    };
    if (!policy) return refuse(403, "no L7 policy", "egress denied: the sandbox's policy changed");
    if (!this.#rate.take(conn.sandbox, policy.requestsPerMinute)) return refuse(429, "requestsPerMinute", `rate limit of ${policy.requestsPerMinute} requests per minute`);
    const secrets = this.#o.secretsFor(conn.sandbox);
    const headers: http.OutgoingHttpHeaders = {};
    for (const [k, val] of Object.entries(req.headers)) if (!HOP.has(k) && val !== undefined) headers[k] = val;
    const setHeaders = (values: Record<string, string>) => {
      for (const [k, val] of Object.entries(values)) {
        for (const existing of Object.keys(headers)) if (existing.toLowerCase() === k.toLowerCase()) delete headers[existing];
        headers[k] = val;
      }
    };

    // SecurityProfiles first (profile.ts), then E2B's network.rules / plain HTTP rules.
    const prof = policy.profiles?.length ? evaluateProfiles(policy.profiles, host, method, path) : undefined;
    if (prof?.terminal?.kind === "block") return refuse(prof.terminal.status, prof.terminal.rule, prof.terminal.body || `${method} ${path.split("?")[0]} to ${host} is blocked by rule "${prof.terminal.rule}"`);
    let rule = prof?.matched.join(",") || conn.allowedBy;
    // A credential never crosses the network in clear text: not over plain HTTP.
    const wantsSecret = Object.keys(prof?.secretHeaders ?? {}).length > 0 || (!bypassedBy(prof) && Object.values(decideRequest(policy, host, method, path).setHeaders).some((x) => secretRefs(x).length > 0));
    if (wantsSecret && !ctx.tls) return refuse(403, rule, `credentials are only added to HTTPS requests; ${host} was asked over plain HTTP`);
    if (prof) {
      for (const name of prof.remove) delete headers[name];
      setHeaders(prof.set);
      for (const [h, [template, secret]] of Object.entries(prof.secretHeaders)) {
        const value = secrets.get(secret);
        // failStrategy Block: no credential, no request (the destination never sees a half-made one).
        if (value === undefined) return refuse(403, rule, `rule "${rule}": credential "${secret}" is not available`);
        setHeaders({ [h]: renderToken(template, value) });
      }
    }
    const bypassed = bypassedBy(prof);
    const v = bypassed ? { action: "allow" as const, setHeaders: {} } : decideRequest(policy, host, method, path);
    if (v.rule) rule = prof?.matched.length ? `${rule},${v.rule}` : v.rule;
    if (v.action === "block") return refuse(403, rule, `${method} ${path.split("?")[0]} to ${host} is blocked by rule "${v.rule}"`);
    setHeaders(resolveSecrets(v.setHeaders, secrets));

    const profMcp = bypassed ? undefined : prof?.mcp;
    const decide: ToolDecider = profMcp ? (tool) => profileToolVerdict(profMcp, tool) : (tool) => decideTool(policy, host, tool);
    const mcp = !bypassed && (profMcp !== undefined || decideTool(policy, host, "") !== undefined);
    let body: Buffer | undefined;
    let tool: string | undefined;
    if (mcp && method === "POST") {
      body = await readBounded(req, this.#o.maxMcpBody ?? 4 << 20);
      if (!body) return refuse(413, "mcp", "MCP request body too large to screen");
      const s = screenRequest(decide, body.toString("utf8"));
      tool = s.calls.map((c) => c.tool).join(",") || undefined;
      if (s.calls[0]) rule = s.calls.map((c) => c.rule).join(",");
      const denied = s.calls.find((c) => !c.allowed);
      if (s.answer) {
        record(denied?.rule ?? "mcp", 200, Buffer.byteLength(s.answer), tool);
        return void res.writeHead(200, { "content-type": "application/json" }).end(s.answer);
      }
      headers["content-length"] = String(body.length);
      delete headers["transfer-encoding"];
    }

    const up = http.request({ protocol: ctx.tls ? "https:" : "http:", host: conn.ip, port: conn.port, method, path, headers, agent: ctx.agent, setHost: false });
    up.on("error", () => res.destroy());
    up.on("response", (ur) => {
      const type = String(ur.headers["content-type"] ?? "");
      const out: http.OutgoingHttpHeaders = {};
      for (const [k, val] of Object.entries(ur.headers)) if (!HOP.has(k) && val !== undefined) out[k] = val;
      let bytes = 0;
      ur.on("data", (c: Buffer) => (bytes += c.length));
      ur.on("end", () => record(rule, ur.statusCode ?? 0, bytes, tool));
      if (mcp && type.includes("application/json")) {
        void readBounded(ur, this.#o.maxMcpBody ?? 4 << 20).then((b) => {
          if (!b) return void res.destroy();
          const text = filterAnswer(decide, b.toString("utf8"));
          out["content-length"] = String(Buffer.byteLength(text));
          res.writeHead(ur.statusCode ?? 502, out).end(text);
        });
      } else if (mcp && type.includes("text/event-stream")) {
        delete out["content-length"];
        res.writeHead(ur.statusCode ?? 502, out);
        const f = new SseFilter(decide);
        ur.setEncoding("utf8");
        ur.on("data", (c: string) => res.write(f.push(c)));
        ur.on("end", () => res.end(f.end()));
      } else {
        res.writeHead(ur.statusCode ?? 502, out);
        ur.pipe(res);
      }
    });
    if (body) up.end(body);
    else req.pipe(up);
  }
}

const bypassedBy = (o: ProfileOutcome | undefined) => o?.terminal?.kind === "bypass";

/** The whole body, or undefined past `max` bytes. */
function readBounded(s: NodeJS.ReadableStream, max: number): Promise<Buffer | undefined> {
  return new Promise((resolve) => {
    const parts: Buffer[] = [];
    let n = 0;
    s.on("data", (c: Buffer) => {
      n += c.length;
      if (n > max) return resolve(undefined);
      parts.push(c);
    });
    s.on("end", () => resolve(n > max ? undefined : Buffer.concat(parts)));
    s.on("error", () => resolve(undefined));
  });
}
