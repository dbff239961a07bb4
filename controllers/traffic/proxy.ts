// The traffic-proxy: an HTTP forward proxy that lets a sandbox reach only what its egress rules
// allow. Plain HTTP comes as requests by absolute URI (`GET http://host/path`), TLS and anything
// else as CONNECT host:port; WebSocket upgrades by absolute URI pass too. For each request it
// resolves the name once, decides by the rules (policy.ts) and connects to the very address it
// checked, so a second lookup cannot lead somewhere else (DNS rebinding). A refusal is a 403 with
// the reason as a text body; for CONNECT it comes before any tunnel exists.
//
// Which sandbox a connection belongs to is never taken from what the sandbox sends:
// - `listenTcp` serves one sandbox (the sidecar form: the proxy shares the sandbox's pod);
// - `listenTagged` serves connections whose first line, written by the agent's relay before any
//   byte of the sandbox, names the sandbox (the local driver's form, see README.md).
import { lookup } from "node:dns/promises";
import { LookupQueue, type LookupQueueOptions } from "./lookup-queue.ts";
import { createServer as createHttpServer, request as httpRequest, type IncomingMessage, type OutgoingHttpHeaders, type Server, type ServerResponse } from "node:http";
import { createSocket, type Socket as UdpSocket } from "node:dgram";
import { createServer as createNetServer, isIPv4, type Server as NetServer, type Socket } from "node:net";
import type { Duplex } from "node:stream";
import { normalizeHost } from "../../schema/egress/rules.ts";
import { parseIp } from "../../schema/egress/address.ts";
import { refuseLocal, type Refuse } from "./host-reach.ts";
import { decide, needsAddresses, type CompiledPolicy, type Verdict } from "./policy.ts";
import { ALLOWED, connectAny, denied, rawReply } from "./connect.ts";
import { decideGoverned, type Governance } from "./governed.ts";
import { SandboxResolver } from "./resolver.ts";
import { MAX_TAG, RedirectedPath, type FastPath, type L7Hook } from "./redirected.ts";

export interface TrafficProxyOptions {
  /** The compiled rules of a sandbox (the tag its connection came with; "" on a TCP listener).
   * A string is a reason to refuse everything (unknown sandbox, invalid rules). */
  policyFor: (sandbox: string) => CompiledPolicy | string;
  /** Addresses refused whatever the rules say, because the proxy connects from where it runs
   * (host-reach.ts). Default `refuseLocal`: loopback and link-local; the agent passes
   * `refuseHost` (its host's addresses and other sandboxes too). */
  refuse?: Refuse;
  /** Name resolution; default: the system resolver (getaddrinfo, so /etc/hosts counts). */
  resolve?: (host: string) => Promise<string[]>;
  /** How many name lookups run at once, in all and per sandbox (lookup-queue.ts). */
  lookups?: LookupQueueOptions;
  /** How long a connection to a destination may take. Default 10 s. */
  connectTimeoutMs?: number;
  /** How long a new client connection may stay without a complete first request before it is
   * closed (each one holds a relay process on the local driver). Default 10 s. */
  firstRequestTimeoutMs?: number;
  log?: (line: string) => void;
  /** TrafficPolicies that decide for a sandbox instead of `policyFor` when some select it
   * (governed.ts); default none. */
  governed?: (sandbox: string) => Governance | undefined;
  /** L7 policy for redirected connections (redirected.ts); none: bytes are only copied. */
  l7?: L7Hook;
  /** The kernel's fast path for redirected connections decided at L3/L4 (the local driver's;
   * none: every connection stays with the proxy, as in the sidecar). */
  fastPath?: FastPath;
  /** Hand connections the relay offers (tag line "<sandbox> *" or "<sandbox> <ip> <port> *",
   * port-relay.pl `handoff`) back to it once decided at L3/L4: a CONNECT tunnel, a plain-HTTP
   * request without a body, the first on its connection, or a redirected connection no L7 policy
   * wants. Default true; false: every byte goes through the proxy. */
  handoff?: boolean;
}

/** A client connection the relay offered to take back (port-relay.pl `handoff`): its child waits
 * for the proxy's first byte, 'R' (the connection stays here) or 'S' (handed back). */
interface Handback {
  /** Bytes of the relay's tag line, which bytesRead counts and the child never sent. */
  tagBytes: number;
  /** The first byte went. */
  said: boolean;
  /** Handed back: nothing more goes to the child. */
  handed: boolean;
  /** The socket's own write, around the one that says 'R' first. */
  write: (data: Buffer | string) => boolean;
}

/** Destinations remembered per sandbox as put on the fast path (to judge again at a rule change),
 * at most: beyond, connections stay with the proxy (port-relay.pl's set holds as many). */
const MAX_FAST = 4096;

/** Request headers that describe the hop to the proxy, not the request. */
const HOP_BY_HOP = new Set(["connection", "proxy-connection", "keep-alive", "proxy-authorization", "proxy-authenticate", "te", "trailer", "transfer-encoding", "upgrade"]);
/** The tag line of the relay's one connection that carries its sandboxes' DNS over UDP: frames of
 * a 2-byte length, then "<sandbox> <the relay's token>\n" and the query (echoed in the answer). */
const DNS_CHANNEL = "*dns";


/** A connection to a destination, kept while it is open so a rule change can end it. */
interface Open {
  host: string;
  upstream: Socket;
  client: Duplex;
  /** Where an L7 client connection may go (its upstream sockets are pooled, not its own). */
  at?: { ip: string; port: number };
}

async function systemResolve(host: string): Promise<string[]> {
  return (await lookup(host, { all: true, verbatim: true })).map((a) => a.address);
}

/** A body-less plain-HTTP request as it goes to its destination (origin form, its `Host`, no
 * hop-by-hop headers) with `connection: close`, for a handoff (#handOff). */
function requestHead(req: IncomingMessage, url: URL): Buffer {
  const lines = [`${req.method} ${url.pathname}${url.search} HTTP/1.1`, `host: ${url.host}`];
  for (let i = 0; i < req.rawHeaders.length; i += 2) {
    const name = req.rawHeaders[i]!.toLowerCase();
    if (!HOP_BY_HOP.has(name) && name !== "host") lines.push(`${req.rawHeaders[i]}: ${req.rawHeaders[i + 1]}`);
  }
  lines.push("connection: close");
  return Buffer.from(`${lines.join("\r\n")}\r\n\r\n`, "latin1");
}

/** What a paused client socket read and nobody took yet (its read buffer), taken now. */
function buffered(client: Duplex): Buffer[] {
  const more: Buffer[] = [];
  for (let c: Buffer | null; (c = (client as Socket).read?.() as Buffer | null) != null; ) more.push(c);
  return more;
}

function splitAuthority(authority: string): { host: string; port: number } | undefined {
  const m = /^\[([^\]]+)\]:(\d{1,5})$/.exec(authority) ?? /^([^:[\]]+):(\d{1,5})$/.exec(authority);
  const port = m ? Number(m[2]) : 0;
  return m && port >= 1 && port <= 65535 ? { host: m[1]!, port } : undefined;
}

export class TrafficProxy {
  readonly server: Server;
  readonly #o: TrafficProxyOptions;
  /** A lookup on behalf of a sandbox, in its turn (lookup-queue.ts). */
  readonly #resolve: (host: string, sandbox: string) => Promise<string[]>;
  readonly #refuse: Refuse;
  /** The sandbox each client connection belongs to. */
  readonly #tags = new WeakMap<object, string>();
  readonly #listeners: NetServer[] = [];
  readonly #udp: UdpSocket[] = [];
  /** Every client connection, tunnels included, so close() ends them all. */
  readonly #sockets = new Set<Socket>();
  /** Open connections to destinations (requests in flight, tunnels, upgrades) by sandbox. */
  readonly #conns = new Map<string, Set<Open>>();
  /** Closes a client connection that has not sent a whole first request in time. */
  readonly #idle = new WeakMap<object, NodeJS.Timeout>();
  /** The sandboxes' DNS (their port 53, redirected), and what it answered them. */
  readonly #dns: SandboxResolver;
  /** Connections and DNS the redirect in a sandbox's namespace brings (redirected.ts). */
  readonly #redirected: RedirectedPath;
  /** Per sandbox, the destinations put on the fast path since its last flush ("ip port" => the
   * name they went by), judged again by revalidate. */
  readonly #fast = new Map<string, Map<string, { ip: string; port: number; host: string; until: number }>>();
  /** Connections the relay offered to take back, until one is handed or said to stay. */
  readonly #handback = new WeakMap<object, Handback>();
  /** Per sandbox, its policy epoch: moved on by every rule change (policyChanging, revalidate)
   * before the fast path is emptied, so a verdict taken before it never admits after it. */
  readonly #epochs = new Map<string, number>();

  constructor(opts: TrafficProxyOptions) {
    this.#o = opts;
    const lookups = new LookupQueue(opts.lookups);
    const resolve = opts.resolve ?? systemResolve;
    this.#resolve = (host, sandbox) => lookups.run(sandbox, () => resolve(host));
    this.#refuse = opts.refuse ?? refuseLocal;
    this.#dns = new SandboxResolver(this.#resolve, this.#refuse);
    this.#redirected = new RedirectedPath({
      policyFor: (sandbox) => opts.policyFor(sandbox),
      governed: (sandbox) => opts.governed?.(sandbox),
      refuse: this.#refuse,
      resolve: this.#resolve,
      dns: this.#dns,
      log: opts.log,
      connectTimeoutMs: opts.connectTimeoutMs ?? 10_000,
      firstRequestTimeoutMs: opts.firstRequestTimeoutMs ?? 10_000,
      adopt: (socket) => {
        this.#sockets.add(socket);
        socket.once("close", () => this.#sockets.delete(socket));
      },
      track: (sandbox, host, upstream, client) => this.#trackTag(sandbox, host, upstream, client),
      trackClient: (sandbox, host, ip, port, client) => this.#trackTag(sandbox, host, client, client, { ip, port }),
      l7: opts.l7,
      handback: {
        can: (client) => this.#canHandOff(client),
        // Its one address is the one the kernel said it was going to (the tag line); the relay's
        // child also refuses any other. No answer of the proxy's own goes to the client either way.
        give: (client, host, ip, port, head) => void this.#handOff(client, host, [ip], port, "", "", () => Buffer.concat([head, ...buffered(client)])),
        stay: (client) => this.#stay(client),
      },
      ...(opts.fastPath ? { fast: { epoch: (sandbox: string) => this.#epochs.get(sandbox) ?? 0, admit: (sandbox: string, ip: string, port: number, host: string, seconds: number, epoch: number) => this.#admitFast(sandbox, ip, port, host, seconds, epoch) } } : {}),
    });
    this.server = createHttpServer({ keepAliveTimeout: 30_000 });
    const started = (req: IncomingMessage) => clearTimeout(this.#idle.get(req.socket));
    this.server.on("request", (req, res) => void this.#forward(req, res));
    this.server.on("connect", (req, socket, head) => void this.#tunnel(req, socket, head));
    this.server.on("upgrade", (req, socket, head) => void this.#upgrade(req, socket, head));
    for (const event of ["request", "connect", "upgrade"]) this.server.prependListener(event, started);
    this.server.on("clientError", (_err, socket) => socket.destroy());
    this.server.on("connection", (socket: Socket) => {
      this.#sockets.add(socket);
      this.#idle.set(socket, setTimeout(() => socket.destroy(), opts.firstRequestTimeoutMs ?? 10_000).unref());
      socket.once("close", () => {
        this.#sockets.delete(socket);
        clearTimeout(this.#idle.get(socket));
      });
    });
  }

  /** Serves every connection on host:port as the one sandbox whose rules `policyFor("")` gives. */
  listenTcp(port: number, host: string): Promise<number> {
    return new Promise((resolve, reject) => {
      this.server.once("error", reject).listen(port, host, () => {
        this.server.off("error", reject);
        resolve((this.server.address() as { port: number }).port);
      });
    });
  }

  /** Serves a Unix socket whose connections start with `<sandbox>\n`, written by the relay. */
  listenTagged(path: string): Promise<void> {
    const net = createNetServer({ allowHalfOpen: true }, (socket) => this.#readTag(socket));
    this.#listeners.push(net);
    return new Promise((resolve, reject) => net.once("error", reject).listen(path, () => resolve()));
  }

  /** Serves the TPROXY listener a pod's sidecar inherited (fd, see transparent.pl): each socket's
   * local address is where the sandbox was connecting (the kernel's, never the sandbox's word);
   * port 53 is DNS over TCP. The sandbox is the pod's one (""). */
  listenTransparent(fd: number): Promise<void> {
    const net = createNetServer({ allowHalfOpen: true }, (socket) => {
      const ip = (socket.localAddress ?? "").replace(/^::ffff:/, "");
      const port = socket.localPort ?? 0;
      if (port === 53) return void this.#redirected.dnsFrames("", socket, false);
      void this.#redirected.connection("", socket, ip, port);
    });
    this.#listeners.push(net);
    return new Promise((resolve, reject) => net.once("error", reject).listen({ fd }, () => resolve()));
  }

  /** Answers the pod's DNS over UDP (its port 53, redirected here) by the sandbox's rules. */
  listenDns(port: number, host: string): Promise<void> {
    const udp = createSocket("udp4");
    udp.on("message", (query, from) => {
      void this.#redirected.dnsAnswer("", query).then((answer) => answer && udp.send(answer, from.port, from.address));
    });
    this.#udp.push(udp);
    return new Promise((resolve, reject) => udp.once("error", reject).bind(port, host, () => resolve()));
  }

  #readTag(socket: Socket): void {
    let buf = Buffer.alloc(0);
    const onData = (chunk: Buffer) => {
      buf = Buffer.concat([buf, chunk]);
      const nl = buf.indexOf(0x0a);
      if (nl < 0) {
        if (buf.length > MAX_TAG) socket.destroy();
        return;
      }
      socket.off("data", onData).pause();
      // "<sandbox>", or "<sandbox> <ip> <port>" for a connection the redirect in its namespace
      // brought (where it was going, from the kernel), which speaks its own protocol, not ours.
      // A trailing " *" on the latter: the relay can take it back (RedirectedContext.handback).
      const [tag = "", ip, port, offer] = buf.subarray(0, nl).toString().split(" ");
      this.#tags.set(socket, tag);
      const rest = buf.subarray(nl + 1);
      if (rest.length) socket.unshift(rest);
      // "<sandbox> *": to the proxy's port itself, and the relay can take it back.
      if (ip === "*" && port === undefined) {
        this.#offered(socket, nl + 1);
        this.server.emit("connection", socket);
        return void socket.resume();
      }
      if (ip !== undefined && ip !== "*" && offer === "*") this.#offered(socket, nl + 1);
      if (tag === DNS_CHANNEL) return void this.#redirected.dnsFrames(tag, socket, true);
      if (ip !== undefined && Number(port) === 53) return void this.#redirected.dnsFrames(tag, socket, false);
      if (ip !== undefined) return void this.#redirected.connection(tag, socket, ip, Number(port));
      this.server.emit("connection", socket);
      socket.resume();
    };
    socket.on("data", onData).on("error", () => socket.destroy());
  }

  /** The relay's child waits for the proxy's first byte on `socket`: 'R', written before the first
   * answer unless a handoff said 'S' (#handOff); after a handoff nothing more is written. */
  #offered(socket: Socket, tagBytes: number): void {
    const own = socket.write.bind(socket) as (...args: unknown[]) => boolean;
    const end = socket.end.bind(socket) as (...args: unknown[]) => Socket;
    const h: Handback = { tagBytes, said: false, handed: false, write: (data) => own(data) };
    this.#handback.set(socket, h);
    socket.write = ((...args: unknown[]) => {
      if (h.handed) return true;
      if (!h.said) h.said = own("R") || true;
      return own(...args);
    }) as Socket["write"];
    // An end without a word (a client that sent no request in time) ends the child too.
    socket.end = ((...args: unknown[]) => {
      if (h.handed) return socket;
      if (!h.said && args.length && typeof args[0] !== "function") h.said = own("R") || true;
      return end(...args);
    }) as Socket["end"];
  }

  /** Hands a connection the relay offered back to its child, if nothing was said to it yet: the
   * child connects to `addresses` (already checked) itself and relays client and destination in
   * the kernel, so the bytes never pass through this process. `ok` goes to the client once it is
   * connected, `fail` when it does not answer; `up()` is what goes to the destination first (the
   * request as rewritten, and for a tunnel the client's bytes read past it). `oneRequest` (a plain
   * request): nothing the client sends after `up` goes to the destination, since it was never
   * checked (a pipelined request, perhaps for another host). The proxy keeps the socket: ending it
   * (a rule change) ends the connection, and it ends with it. False: not offered, too late, or not
   * exactly one IPv4 address (the relay dials IPv4 only, and a rule change judges the one address
   * tracked, which must be the one connected to: more stay with the proxy, which tries each). */
  #handOff(client: object, host: string, addresses: string[], port: number, ok: string, fail: string, up: () => Buffer, oneRequest = false): boolean {
    const h = this.#handback.get(client);
    if (!h || !this.#canHandOff(client)) return false;
    const [ip, ...others] = addresses;
    if (ip === undefined || others.length || !isIPv4(ip)) return false;
    const socket = client as Socket;
    const first = up();
    // What the child sent and the proxy read: for a tunnel it sends the destination what came
    // after; '-' for one request, where it sends nothing after `first`.
    const read = oneRequest ? "-" : String(socket.bytesRead - h.tagBytes);
    h.said = h.handed = true;
    const parts = [Buffer.from(ok), Buffer.from(fail), first];
    h.write(Buffer.concat([Buffer.from(`S${ip} ${port} ${read} ${parts.map((p) => p.length).join(" ")}\n`), ...parts]));
    this.#track(socket, host, socket, socket, { ip, port });
    socket.on("data", () => {}).once("end", () => socket.destroy());
    return true;
  }

  /** Whether the relay offered `client` back and nothing was said to its child yet. */
  #canHandOff(client: object): boolean {
    const h = this.#handback.get(client);
    return h !== undefined && !h.said && this.#o.handoff !== false;
  }

  /** The connection stays with the proxy: the relay's child hears 'R' now rather than with the
   * answer, and goes on relaying the client's bytes (it holds back beyond a first MiB until it
   * hears), which a request body the destination waits for needs. */
  #stay(client: object): void {
    const h = this.#handback.get(client);
    if (!h || h.said) return;
    h.said = true;
    h.write("R");
  }

  async #check(socket: object, host: string, port: number): Promise<Verdict | { status: number; reason: string }> {
    const tag = this.#tags.get(socket) ?? "";
    // A sandbox under L7 policy is inspected on the redirected path only: through the proxy
    // (CONNECT, absolute URI) its requests would pass uninspected. The pod sidecar's one sandbox is "".
    if (this.#o.l7?.wants(tag, host, port)) return { allowed: false, reason: `${tag || "the sandbox"}'s HTTP(S) egress is inspected (SecurityProfile or network.rules): connect directly, not through the proxy` };
    const g = this.#o.governed?.(tag);
    if (g) return this.#checkGoverned(tag, g, host, port);
    const policy = this.#o.policyFor(tag);
    if (typeof policy === "string") {
      denied("rules");
      return { allowed: false, reason: policy };
    }
    let addresses: string[] = [];
    if (needsAddresses(policy, host)) {
      try {
        addresses = await this.#resolve(host, tag);
      } catch (err) {
        return { status: 502, reason: `cannot resolve ${host}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}` };
      }
    }
    const verdict = decide(policy, host, addresses, this.#refuse);
    if (verdict.allowed) ALLOWED.inc();
    else {
      denied("rules");
      this.#o.log?.(`traffic-proxy: ${tag || "sandbox"}: denied ${verdict.reason}`);
    }
    return verdict;
  }

  /** A proxied request of a sandbox TrafficPolicies govern: the addresses of `host` some rule
   * allows at `port` (by the name or the address), the first refusal's rule otherwise. */
  async #checkGoverned(tag: string, g: Governance, host: string, port: number): Promise<Verdict | { status: number; reason: string }> {
    let addresses = [host];
    if (!parseIp(host)) {
      try {
        addresses = await this.#resolve(host, tag);
      } catch (err) {
        return { status: 502, reason: `cannot resolve ${host}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}` };
      }
    }
    const names = parseIp(host) ? [] : [host];
    const verdicts = addresses.map((ip) => ({ ip, v: decideGoverned(g, { ip, port, names }, this.#refuse) }));
    const passed = verdicts.filter((x) => x.v.allowed);
    if (passed.length) {
      ALLOWED.inc();
      return { allowed: true, addresses: passed.map((x) => x.ip), rule: passed[0]!.v.by };
    }
    const first = verdicts[0]?.v ?? { by: `${host} did not resolve to any address`, source: "default" };
    denied(first.source);
    const reason = `${host}:${port} ${verdicts.length > 1 ? `(${verdicts[0]!.ip}) ` : ""}is refused by ${first.by}`;
    this.#o.log?.(`traffic-proxy: ${tag || "sandbox"}: denied ${reason}`);
    return { allowed: false, reason };
  }

  async #forward(req: IncomingMessage, res: ServerResponse): Promise<void> {
    // Handed back: a request pipelined after it goes nowhere (the child relays only the first, and
    // the destination's answer to it ends the connection; the client asks again on a new one).
    if (this.#handback.get(req.socket)?.handed) return;
    let url: URL;
    try {
      url = new URL(req.url ?? "");
    } catch {
      return void res.writeHead(400, { "content-type": "text/plain" }).end("traffic-proxy: send requests by absolute URI (http://host/path) or CONNECT\n");
    }
    if (url.protocol !== "http:") return void res.writeHead(400, { "content-type": "text/plain" }).end(`traffic-proxy: ${url.protocol} is not proxied by absolute URI; use CONNECT\n`);
    const host = normalizeHost(url.hostname);
    const v = await this.#check(req.socket, host, Number(url.port || 80));
    if (!("addresses" in v)) return void res.writeHead("status" in v ? v.status : 403, { "content-type": "text/plain" }).end(`traffic-proxy: ${"status" in v ? "" : "egress denied: "}${v.reason}\n`);
    // Without a body, the request as it goes upstream is all the proxy must write: handed back with
    // `connection: close`, so the destination's answer ends the connection (a later request on it
    // would have gone to another host), and passes to the client as it comes.
    const bodyless = req.headers["transfer-encoding"] === undefined && (req.headers["content-length"] ?? "0") === "0";
    if (bodyless && this.#handOff(req.socket, host, v.addresses, Number(url.port || 80), "", rawReply("502 Bad Gateway", `traffic-proxy: cannot reach ${url.host}\n`), () => requestHead(req, url), true)) return;
    this.#stay(req.socket);
    let socket: Socket;
    try {
      socket = await connectAny(v.addresses, Number(url.port || 80), this.#o.connectTimeoutMs ?? 10_000);
    } catch (err) {
      return void res.writeHead(502, { "content-type": "text/plain" }).end(`traffic-proxy: cannot reach ${url.host}: ${(err as Error).message}\n`);
    }
    const headers: OutgoingHttpHeaders = {};
    for (const [k, val] of Object.entries(req.headers)) if (!HOP_BY_HOP.has(k) && val !== undefined) headers[k] = val;
    headers.host = url.host;
    this.#track(req.socket, host, socket, res);
    const upstream = httpRequest({ method: req.method, path: url.pathname + url.search, headers, setHost: false, createConnection: () => socket });
    upstream.on("response", (r) => {
      const out: OutgoingHttpHeaders = {};
      for (const [k, val] of Object.entries(r.headers)) if (!HOP_BY_HOP.has(k) && val !== undefined) out[k] = val;
      res.writeHead(r.statusCode ?? 502, r.statusMessage, out);
      r.pipe(res);
    });
    // A client that leaves takes its upstream request with it.
    res.once("close", () => {
      if (!res.writableFinished) upstream.destroy();
    });
    upstream.on("error", (err) => {
      if (res.headersSent) return void res.destroy();
      res.writeHead(502, { "content-type": "text/plain" }).end(`traffic-proxy: cannot reach ${url.host}: ${err.message}\n`);
    });
    req.pipe(upstream);
  }

  /** Connects to a checked address and hands the open socket to `ready`; answers the client
   * itself when that is refused or fails. */
  async #open(client: Duplex, host: string, port: number, ready: (upstream: Socket) => void, handBack?: { ok: string; up: () => Buffer }): Promise<void> {
    client.on("error", () => client.destroy());
    const v = await this.#check(client, normalizeHost(host), port);
    if (!("addresses" in v)) {
      client.end(rawReply("status" in v ? `${v.status} Bad Gateway` : "403 Forbidden", `traffic-proxy: ${"status" in v ? "" : "egress denied: "}${v.reason}\n`));
      return;
    }
    if (handBack && this.#handOff(client, normalizeHost(host), v.addresses, port, handBack.ok, rawReply("502 Bad Gateway", `traffic-proxy: cannot reach ${host}:${port}\n`), handBack.up)) return;
    this.#stay(client);
    let upstream: Socket;
    try {
      upstream = await connectAny(v.addresses, port, this.#o.connectTimeoutMs ?? 10_000);
    } catch (err) {
      client.end(rawReply("502 Bad Gateway", `traffic-proxy: cannot reach ${host}:${port}: ${(err as Error).message}\n`));
      return;
    }
    upstream.on("error", () => client.destroy());
    client.on("close", () => upstream.destroy());
    upstream.on("close", () => client.destroy());
    this.#track(client, normalizeHost(host), upstream, client);
    ready(upstream);
  }

  async #tunnel(req: IncomingMessage, client: Duplex, head: Buffer): Promise<void> {
    if (this.#handback.get(client)?.handed) return;
    const target = splitAuthority(req.url ?? "");
    if (!target) return void client.end(rawReply("400 Bad Request", `traffic-proxy: CONNECT needs host:port, not ${JSON.stringify(req.url)}\n`));
    const established = "HTTP/1.1 200 Connection Established\r\n\r\n";
    // The client's bytes past the CONNECT: its head, and what the socket read since.
    const sent = () => Buffer.concat([head, ...buffered(client)]);
    await this.#open(
      client,
      target.host,
      target.port,
      (upstream) => {
        client.write(established);
        if (head.length) upstream.write(head);
        client.pipe(upstream).on("error", () => {});
        upstream.pipe(client);
      },
      { ok: established, up: sent },
    );
  }

  async #upgrade(req: IncomingMessage, client: Duplex, head: Buffer): Promise<void> {
    let url: URL;
    try {
      url = new URL(req.url ?? "");
    } catch {
      return void client.end(rawReply("400 Bad Request", "traffic-proxy: send upgrades by absolute URI (http://host/path)\n"));
    }
    await this.#open(client, url.hostname, Number(url.port || 80), (upstream) => {
      // The Host the rules were applied to, as the forward path sends, not the client's own.
      const lines = [`${req.method} ${url.pathname}${url.search} HTTP/1.1`, `Host: ${url.host}`];
      for (let i = 0; i < req.rawHeaders.length; i += 2) {
        const name = req.rawHeaders[i]!;
        if (!/^(proxy-|host$)/i.test(name)) lines.push(`${name}: ${req.rawHeaders[i + 1]}`);
      }
      upstream.write(`${lines.join("\r\n")}\r\n\r\n`);
      if (head.length) upstream.write(head);
      client.pipe(upstream).on("error", () => {});
      upstream.pipe(client);
    });
  }

  /** Remembers an open connection to a destination under its client's sandbox until it closes.
   * A handed-back one (#handOff) has its relay socket for both ends, and `at` for its destination.
   * `client` is what ends the client's side: the response of a forwarded request, or the socket
   * of a tunnel or upgrade. */
  #track(clientSocket: object, host: string, upstream: Socket, client: Duplex | ServerResponse, at?: Open["at"]): void {
    this.#trackTag(this.#tags.get(clientSocket) ?? "", host, upstream, client, at);
  }

  #trackTag(tag: string, host: string, upstream: Socket, client: Duplex | ServerResponse, at?: Open["at"]): void {
    let set = this.#conns.get(tag);
    if (!set) this.#conns.set(tag, (set = new Set()));
    const entry: Open = { host, upstream, client: client as Duplex, ...(at ? { at } : {}) };
    set.add(entry);
    upstream.once("close", () => {
      set.delete(entry);
      if (set.size === 0 && this.#conns.get(tag) === set) this.#conns.delete(tag);
    });
  }

  /** Checks the sandbox's open connections against its rules as they are now and ends those the
   * rules no longer allow (all of them when it has no rules any more): a tunnel opened before a
   * rule change must not outlive it. Judged by the name asked for and the address connected to,
   * without a new lookup. Returns how many were ended. */
  revalidate(sandbox: string): number {
    this.policyChanging(sandbox);
    this.#flushFast(sandbox);
    const set = this.#conns.get(sandbox);
    if (!set) return 0;
    let ended = 0;
    for (const o of [...set]) {
      const address = o.at?.ip ?? o.upstream.remoteAddress;
      const port = o.at?.port ?? o.upstream.remotePort ?? 0;
      const v: Verdict = address ? this.#judge(sandbox, o.host, address, port) : { allowed: false, reason: "closed" };
      if (v.allowed) continue;
      this.#o.log?.(`traffic-proxy: ${sandbox || "sandbox"}: ended a connection to ${o.host} after a rule change: ${v.reason}`);
      o.upstream.destroy();
      o.client.destroy();
      set.delete(o);
      ended++;
    }
    return ended;
  }

  /** The verdict, by the sandbox's rules as they are now, for a connection to ip:port that went by
   * `host` (a name, or the address), without a new lookup. */
  #judge(sandbox: string, host: string, ip: string, port: number): Verdict {
    const g = this.#o.governed?.(sandbox);
    if (!g) {
      const policy = this.#o.policyFor(sandbox);
      return typeof policy === "string" ? { allowed: false, reason: policy } : decide(policy, host, [ip], this.#refuse);
    }
    const v = decideGoverned(g, { ip, port, names: parseIp(host) ? [] : [host] }, this.#refuse);
    return v.allowed ? { allowed: true, addresses: [ip] } : { allowed: false, reason: v.by };
  }

  /** The sandbox is gone (destroyed, stopped): what the proxy kept for it goes. */
  forget(sandbox: string): void {
    this.#fast.delete(sandbox);
    this.#epochs.delete(sandbox);
    this.#conns.delete(sandbox);
  }

  /** A rule change for the sandbox is under way (called before its fast path is emptied):
   * connections decided until now may no longer put their destination on the fast path. */
  policyChanging(sandbox: string): void {
    if (this.#o.fastPath) this.#epochs.set(sandbox, (this.#epochs.get(sandbox) ?? 0) + 1);
  }

  /** A connection allowed under `epoch`, now connected: on the fast path only if no rule change
   * came in between, and the rules as they are now still allow it without L7 (judged again, no
   * lookup, with the names its DNS answered). False: a change came in between and the rules now
   * deny it, so it ends (the change's revalidate ran before it was tracked). */
  #admitFast(sandbox: string, ip: string, port: number, host: string, seconds: number, epoch: number): boolean {
    const stale = epoch !== (this.#epochs.get(sandbox) ?? 0);
    let v = this.#judge(sandbox, host, ip, port);
    // No name in the bytes: the names this sandbox's DNS answered this address for, as #route.
    if (!v.allowed && parseIp(host)) v = this.#dns.namesFor(sandbox, ip).map((name) => this.#judge(sandbox, name, ip, port)).find((w) => w.allowed) ?? v;
    if (!v.allowed) {
      // Not stale: a change whose revalidate is still to come; it judges this (tracked) connection.
      if (!stale) return true;
      this.#o.log?.(`traffic-proxy: ${sandbox || "sandbox"}: ended a connection to ${host} after a rule change: ${v.reason}`);
      return false;
    }
    if (stale || this.#o.l7?.wants(sandbox, ip, port)) return true;
    let mine = this.#fast.get(sandbox);
    if (!mine) this.#fast.set(sandbox, (mine = new Map()));
    const key = `${ip} ${port}`;
    // Entries the kernel has let expire are not counted against the cap (the set is as large).
    const now = Date.now();
    if (!mine.has(key) && mine.size >= MAX_FAST) for (const [k, f] of mine) if (f.until <= now) mine.delete(k);
    if (!mine.has(key) && mine.size >= MAX_FAST) return true;
    // An element already in the kernel keeps its timeout (`add` does not extend it): so does this.
    const was = mine.get(key)?.until ?? 0;
    mine.set(key, { ip, port, host, until: was > now ? was : now + seconds * 1000 });
    // Still in the kernel's set (an `add` would change nothing): no relay command, no nft run.
    if (was <= now) this.#o.fastPath!.admit(sandbox, ip, port, seconds);
    return true;
  }

  /** After a rule change: the sandbox's fast path is emptied, and the connections on it are ended
   * when the new rules deny one of its destinations (the kernel cannot tell them apart). */
  #flushFast(sandbox: string): void {
    const mine = this.#fast.get(sandbox);
    if (!mine || !this.#o.fastPath) return;
    this.#fast.delete(sandbox);
    let denied: string | undefined;
    for (const f of mine.values()) {
      const v = this.#judge(sandbox, f.host, f.ip, f.port);
      if (!v.allowed) {
        denied = v.reason;
        break;
      }
    }
    if (denied !== undefined) this.#o.log?.(`traffic-proxy: ${sandbox || "sandbox"}: ended its fast-path connections after a rule change: ${denied}`);
    void this.#o.fastPath.flush(sandbox, denied !== undefined);
  }

  async close(): Promise<void> {
    for (const l of this.#listeners) l.close();
    for (const u of this.#udp) u.close();
    for (const s of this.#sockets) s.destroy();
    await new Promise<void>((resolve) => (this.server.listening ? this.server.close(() => resolve()) : resolve()));
  }
}
