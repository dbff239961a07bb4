// The cluster ingress: the only way in from the edge's gateway. It serves nothing but requests the
// edge signed (schema/ingress/signature.ts) for one sandbox and one port, and hands them to the
// embedded agent-runtime (envd port) or to a user port inside the sandbox. Streams pass through
// unbuffered in both directions; an upgrade (WebSocket) to a user port becomes a raw byte pipe.
import { createServer, request as httpRequest, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { connect, Socket } from "node:net";
import type { Duplex } from "node:stream";
import { MASK_HOST_HEADER, REQUEST_ID_HEADER, REQUEST_ID_PATTERN, SIGNATURE_HEADER, isUnnamedSignedFileRequest } from "../../schema/ingress/signature.ts";
import { ingressVerifier } from "./ingress-verify.ts";
import { SANDBOX_ID_PATTERN } from "../../schema/protocol/ids.ts";
import type { Runtime } from "../runtime/runtime.ts";
import { traceHop } from "../lib/tracing.ts";
import { RUNTIME_SPANS_PATH } from "../../schema/protocol/runtime-spans-limits.ts";

export const ENVD_PORT = 49983;
/** E2B's code interpreter port: the runtime serves it for the sandboxes it runs whose template has
 * the interpreter (the Jupyter server of E2B's image is replaced by kernels the runtime drives,
 * controllers/runtime/interpreter); in any other sandbox it is a user port like the rest. */
export const INTERPRETER_PORT = 49999;
const STATUS_TEXT: Record<number, string> = { 400: "Bad Request", 401: "Unauthorized", 502: "Bad Gateway" };

export interface IngressOptions {
  clusterToken: string;
  runtime: Runtime;
  /** Where a user port of a sandbox is reachable from this host, or undefined when it is not:
   * a TCP address, or (for a sandbox whose network the host cannot dial) a way to open a stream
   * to it (Driver.connectUserPort). */
  userPortTarget(sandboxId: string, port: number): UserPortTarget | undefined;
  /** The runtime URL of a sandbox whose runtime runs elsewhere (a pod); undefined: embedded. */
  remoteRuntime?(sandboxId: string): string | undefined;
  /** Told of each traced request handed to a pod's runtime (its `ingress` span's traceparent), so
   * the runtime's span for it is taken when the agent collects (pod-spans.ts). */
  podSpans?: { handed(sandboxId: string, traceparent: string | undefined): void; forget(sandboxId: string, traceparent: string | undefined): void };
  now?: () => number;
}

export type UserPortTarget = { host: string; port: number } | { connect(): Promise<Duplex> };

/** A stream to the target, connected (a TCP address is dialled here). */
function dial(target: UserPortTarget): Promise<Duplex> {
  if ("connect" in target) return target.connect();
  return new Promise((resolve, reject) => {
    const s = connect(target.port, target.host);
    s.once("connect", () => resolve(s.off("error", reject))).once("error", reject);
  });
}

/** Errors of a write to a peer that no longer reads: it closed, or reset the connection. */
const PEER_STOPPED_READING = new Set(["EPIPE", "ECONNRESET"]);

/** Lets a stream to a user port outlive the port's refusal to read more. A server may answer
 * early and close without reading the request body (python's http.server answers a POST it does
 * not serve with 501 and closes): the kernel then resets the connection and writing the rest of
 * the body fails. A net.Socket destroys itself on a failed write, and with it the answer still
 * unread in the kernel, so whether the client got the answer or a 502 hung on which of the two
 * the event loop saw first. Here such a failed write only ends the writing (the rest of the body
 * is dropped, as over TCP); reading goes on to the server's end, so what it answered is relayed
 * (nginx and Envoy do the same). Other streams (a kube port-forward) are left as they are. */
function keepReadingAfterPeerStopsReading(stream: Duplex): Duplex {
  if (!(stream instanceof Socket)) return stream;
  let stopped = false;
  const settle = (cb: (err?: Error | null) => void) => (err?: Error | null) => {
    if (err && PEER_STOPPED_READING.has((err as NodeJS.ErrnoException).code ?? "")) {
      stopped = true;
      return cb();
    }
    cb(err);
  };
  const write = stream._write.bind(stream);
  const writev = stream._writev?.bind(stream);
  stream._write = (chunk, encoding, cb) => (stopped ? cb() : write(chunk, encoding, settle(cb)));
  if (writev) stream._writev = (chunks, cb) => (stopped ? cb() : writev(chunks, settle(cb)));
  return stream;
}

/** Headers of one connection (RFC 9110 7.6.1): the upstream's say nothing about the client's. A
 * relayed `connection: close` would make the server close the client's connection while it may
 * still be sending a body the port did not want, resetting it under the answer. */
function endToEnd(headers: IncomingMessage["headers"]): IncomingMessage["headers"] {
  const { connection: _c, "keep-alive": _k, ...rest } = headers;
  return rest;
}

/** Hop-by-hop request headers (RFC 9110 7.6.1), the caller's to its own connection: passed on,
 * `connection: keep-alive` made Node keep a per-request dialled stream open after the answer with
 * no agent to reuse or close it (one idle connection left in the sandbox per request). */
const HOP_BY_HOP = new Set(["connection", "keep-alive", "proxy-connection", "upgrade", "te"]);
/** What a `Connection` list may not remove: the message's framing and its Host (removing
 * content-length from a GET would let its body through unframed, read as a next request). */
const NOT_REMOVABLE = new Set(["host", "content-length", "transfer-encoding"]);

function withoutHopByHop(headers: IncomingMessage["headers"]): IncomingMessage["headers"] {
  const listed = String(headers.connection ?? "").split(",").map((n) => n.trim().toLowerCase()).filter((n) => n && !NOT_REMOVABLE.has(n));
  const out: IncomingMessage["headers"] = {};
  for (const [k, v] of Object.entries(headers)) if (!HOP_BY_HOP.has(k) && !listed.includes(k)) out[k] = v;
  return out;
}

/** After a port answered early, how much more of the client's body is read and dropped (and for
 * how long) before its connection is closed: a multi-GB upload to a port that said 413 is not
 * carried to its end (nginx's lingering_time and lingering_timeout play this part). */
const DRAIN_MAX_BYTES = 64 * 1024 * 1024;
const DRAIN_MAX_MS = 30_000;

function deny(res: ServerResponse, status: number, message: string): void {
  const body = JSON.stringify({ code: status, message });
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(body) }).end(body);
}

export async function createIngress(opts: IngressOptions): Promise<Server> {
  const verify = ingressVerifier(opts.clusterToken);
  const now = opts.now ?? Date.now;

  const server = createServer((req, res) => {
    void handle(req, res).catch((err: unknown) => {
      if (!res.headersSent) deny(res, 502, `ingress: ${(err as Error).message}`);
      else res.destroy();
    });
  });

  /** Which sandbox and port a request is for, once its edge signature checks out. */
  async function admit(req: IncomingMessage): Promise<{ sandboxId: string; port: number } | { status: number; message: string }> {
    const named = req.headers["e2b-sandbox-id"];
    const port = Number(req.headers["e2b-sandbox-port"] ?? ENVD_PORT);
    // Unnamed requests are the SDK's signed file URLs: the runtime finds the sandbox by signature.
    const unnamed = named === undefined && isUnnamedSignedFileRequest(req.method ?? "GET", new URL(req.url ?? "/", "http://ingress"));
    const sandboxId = unnamed ? "" : named;
    if (typeof sandboxId !== "string" || (sandboxId !== "" && !SANDBOX_ID_PATTERN.test(sandboxId)) || !Number.isInteger(port) || port < 1 || port > 65535) {
      return { status: 400, message: "missing or invalid E2b-Sandbox-Id / E2b-Sandbox-Port" };
    }
    const signature = req.headers[SIGNATURE_HEADER];
    const verdict = verify(typeof signature === "string" ? signature : undefined, { sandboxId, port, method: req.method ?? "GET", pathAndQuery: req.url ?? "/" }, now());
    if (!verdict.ok) return { status: 401, message: `request not signed by the edge (${verdict.reason})` };
    delete req.headers[SIGNATURE_HEADER];
    // E2B's maskRequestHost: the edge names the Host the user port sees (signed request only).
    const mask = req.headers[MASK_HOST_HEADER];
    delete req.headers[MASK_HOST_HEADER];
    if (typeof mask === "string" && mask && port !== ENVD_PORT) req.headers.host = mask;
    return { sandboxId, port };
  }

  /** A WebSocket (or any upgrade) to a user port: the request head is replayed to the port and
   * the two sockets are joined. envd itself serves no upgrades. */
  async function upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): Promise<void> {
    const refuse = (status: number, message: string) => {
      const body = JSON.stringify({ code: status, message });
      socket.end(`HTTP/1.1 ${status} ${STATUS_TEXT[status] ?? "Error"}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`);
    };
    const admitted = await admit(req);
    if ("status" in admitted) return refuse(admitted.status, admitted.message);
    const { sandboxId, port } = admitted;
    if (port === ENVD_PORT) return refuse(400, "the envd port does not take upgrades");
    const target = opts.userPortTarget(sandboxId, port);
    if (!target) return refuse(502, `port ${port} of sandbox ${sandboxId} is not reachable`);
    let upstream: Duplex;
    try {
      upstream = await dial(target);
    } catch (err) {
      return refuse(502, `port ${port} of sandbox ${sandboxId}: ${(err as Error).message}`);
    }
    if (socket.destroyed) return void upstream.destroy();
    upstream.once("error", () => socket.destroy());
    const lines = [`${req.method} ${req.url} HTTP/1.1`];
    for (let i = 0; i < req.rawHeaders.length; i += 2) {
      const name = req.rawHeaders[i]!.toLowerCase();
      if (name === SIGNATURE_HEADER || name === MASK_HOST_HEADER) continue;
      // The Host admit() settled on (the edge's mask, when the sandbox has one).
      lines.push(name === "host" ? `Host: ${req.headers.host}` : `${req.rawHeaders[i]}: ${req.rawHeaders[i + 1]}`);
    }
    upstream.write(`${lines.join("\r\n")}\r\n\r\n`);
    if (head.length) upstream.write(head);
    upstream.pipe(socket);
    socket.pipe(upstream);
    socket.once("error", () => upstream.destroy());
    socket.once("close", () => upstream.destroy());
    upstream.once("close", () => socket.destroy());
  }

  server.on("upgrade", (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    void upgrade(req, socket, head).catch(() => socket.destroy());
  });

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const admitted = await admit(req);
    if ("status" in admitted) return deny(res, admitted.status, admitted.message);
    const { sandboxId, port } = admitted;
    // The gateway's request id on the answer, whoever writes it (the runtime, a user port): the
    // gateway then passes the answer on as it is (schema/ingress/signature.ts).
    const requestId = req.headers[REQUEST_ID_HEADER];
    if (typeof requestId === "string" && REQUEST_ID_PATTERN.test(requestId)) res.setHeader(REQUEST_ID_HEADER, requestId);
    // The path only (a query may carry a signed URL's signature), bounded: the tenant's data.
    const path = (req.url ?? "/").split("?", 1)[0]!.slice(0, 256);
    traceHop("ingress", req, res, { "sandbox.id": sandboxId, "sandbox.port": port, "http.request.method": req.method ?? "", "url.path": path });

    const remote = sandboxId ? opts.remoteRuntime?.(sandboxId) : undefined;
    if (port === ENVD_PORT && !remote) return opts.runtime.handler(req, res);
    if (port === INTERPRETER_PORT && !remote && opts.runtime.getSandbox(sandboxId)?.interpreter) return opts.runtime.interpreter(req, res);

    const remoteUrl = port === ENVD_PORT && remote ? new URL(remote) : undefined;
    // The ingress span's, once handed to a pod's runtime: its span is waited for until it comes.
    let handed: string | undefined;
    if (remoteUrl) {
      // The runtime's spans are the agent's to collect, not the caller's to read or drain. The
      // runtime routes on the WHATWG-normalised path (`/agent/./spans`, `/x/../agent/spans` and
      // `/agent/%2e/spans` are all its spans path), so that is the one compared.
      let routed: string;
      try {
        routed = new URL(req.url ?? "/", "http://runtime").pathname;
      } catch {
        return deny(res, 400, "invalid request path");
      }
      if (routed === RUNTIME_SPANS_PATH) return deny(res, 404, `no route for ${req.method} ${path}`);
      // A preflight is answered before the runtime traces anything: no span will come for it.
      const tp = req.headers.traceparent;
      if (req.method !== "OPTIONS" && typeof tp === "string") opts.podSpans?.handed(sandboxId, (handed = tp));
    }
    const target = remoteUrl ? { host: remoteUrl.hostname, port: Number(remoteUrl.port || ENVD_PORT) } : opts.userPortTarget(sandboxId, port);
    if (!target) return deny(res, 502, `port ${port} of sandbox ${sandboxId} is not reachable`);
    let where: { host: string; port: number } | { createConnection: () => Duplex };
    // A pod's runtime reads what it is sent: its connections stay pooled (Node's global agent).
    if (remoteUrl && !("connect" in target)) where = target;
    else {
      // A user port is dialled here, one connection per request, that it may stop reading.
      try {
        const stream = keepReadingAfterPeerStopsReading(await dial(target));
        if (res.destroyed) return void stream.destroy(); // the client left while we connected
        where = { createConnection: () => stream };
      } catch (err) {
        return deny(res, 502, `port ${port} of sandbox ${sandboxId}: ${(err as Error).message}`);
      }
    }
    const headers = withoutHopByHop(req.headers);
    // A dialled stream serves this one request: the port is told so, and Node closes it after the
    // answer (a pod runtime's pooled connections are its agent's to keep).
    if ("createConnection" in where) headers.connection = "close";
    const upstream = httpRequest({ ...where, method: req.method, path: req.url, headers });
    let answer: IncomingMessage | undefined;
    upstream.on("response", (up) => {
      answer = up;
      res.writeHead(up.statusCode ?? 502, endToEnd(up.headers));
      up.pipe(res);
    });
    upstream.on("error", (err) => {
      // The port's whole answer arrived (the error is its connection ending after it): it is
      // being relayed. Only without an answer is it a 502.
      if (answer?.complete) return;
      // Never delivered (refused, reset before an answer): the runtime has no span for it.
      if (handed && !answer) opts.podSpans?.forget(sandboxId, handed);
      if (!res.headersSent) deny(res, 502, `port ${port} of sandbox ${sandboxId}: ${err.message}`);
      else res.destroy(err);
    });
    // The rest of a body the port no longer takes is read and dropped, so the client's connection
    // ends cleanly after the answer instead of being reset under it; up to DRAIN_MAX_BYTES or
    // DRAIN_MAX_MS, then reading stops and the connection is closed once the answer is out.
    upstream.on("close", () => {
      if (req.complete) return;
      req.unpipe(upstream);
      let left = DRAIN_MAX_BYTES;
      const enough = () => {
        clearTimeout(timer);
        req.pause();
        if (res.writableFinished) req.socket.destroy();
        else res.once("close", () => req.socket.destroy());
      };
      const timer = setTimeout(enough, DRAIN_MAX_MS).unref();
      req.on("data", (chunk: Buffer) => {
        if ((left -= chunk.length) < 0 && !req.isPaused()) enough();
      });
      req.once("close", () => clearTimeout(timer));
      req.resume();
    });
    res.on("close", () => upstream.destroy());
    req.pipe(upstream);
  }

  return server;
}
