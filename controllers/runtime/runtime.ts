// The agent-runtime: one HTTP server (or request handler) serving envd's Connect RPC and plain
// HTTP API for one sandbox (standalone, pod sidecar) or many (the local driver registers them
// and requests are routed by the E2b-Sandbox-Id header).
import { rmSync } from "node:fs";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { getEnvs } from "./http/envs.ts";
import { freezeSandbox, postFreeze, postUnfreeze, thawSandbox } from "./http/freeze.ts";
import { getHealth } from "./http/health.ts";
import { postInit } from "./http/init.ts";
import { getMetrics } from "./http/metrics.ts";
import { fileSignatureRefusal } from "../../schema/envd/file-signature.ts";
import { HttpError, presentedToken, sendError, sendJson, UNAUTHORIZED, type HttpHandler } from "./http/respond.ts";
import { signatureMatches } from "./http/signature.ts";
import { DEFAULT_CSI_SOCKET, postStorageMount } from "./http/storage-mounts.ts";
import { ParkedStates } from "./parked-state.ts";
import { rpcSpanName } from "./rpc-names.ts";
import { RuntimeSandbox, type SandboxOptions } from "./sandbox.ts";
import { SandboxGoneError, type SandboxView } from "./sandbox-view.ts";

export interface RuntimeOptions {
  /** Serve this sandbox for every request (standalone or pod mode): requests naming no sandbox,
   * or one the runtime does not know, go to it. Without it, unknown sandboxes get 502. It reads
   * file metadata with blocking calls (RuntimeSandbox's `alone`), so register no other sandbox
   * beside it. */
  single?: { id?: string; view: SandboxView; options?: SandboxOptions };
  /** Called for unexpected errors (they become 500s). Defaults to console.error. */
  onError?: (err: unknown) => void;
  /** The pod's CSI node plugin socket, for dynamic mounts (default DEFAULT_CSI_SOCKET). */
  csiSocket?: string;
  /** Keep Stop-paused sandboxes' carried state (code contexts) in files here too, so it outlives
   * the process (the agent's data directory); without it, it is kept in memory only. */
  parkedDir?: string;
  /** Makes each request a span (the agent's tracing, controllers/lib/tracing.ts `traceHop`);
   * injected so the runtime's own bundle carries no OpenTelemetry. */
  traceRequest?: (name: string, req: IncomingMessage, res: ServerResponse, attributes: Record<string, string>) => void;
  /** The spans kept for the agent to collect (agent-spans.ts): served at RUNTIME_SPANS_PATH to the
   * sandbox's access token, and not themselves traced. */
  agentSpans?: { path: string; take(): unknown };
}

export type ListenTarget = { port: number; host?: string } | { socket: string };

export interface Runtime {
  /** An http.RequestListener; mount it in your own server or use listen(). */
  readonly handler: (req: IncomingMessage, res: ServerResponse) => void;
  /** The code interpreter's API (E2B's port 49999) for the sandbox the request names; loaded on
   * its first request (interpreter/server.ts). */
  readonly interpreter: (req: IncomingMessage, res: ServerResponse) => void;
  addSandbox(id: string, view: SandboxView, opts?: SandboxOptions): RuntimeSandbox;
  /** Kills the sandbox's processes, closes its watchers and cuts its open streams. */
  /** `keepState`: the sandbox is Stop-paused, not gone: what it carried (RuntimeSandbox.carried)
   * goes to the sandbox registered next under `id`; otherwise that is dropped too. */
  removeSandbox(id: string, opts?: { keepState?: boolean }): boolean;
  getSandbox(id: string): RuntimeSandbox | undefined;
  /** Forgets the carried state of Stop-paused sandboxes other than `ids` (gone while it was down). */
  retainParked(ids: Iterable<string>): void;
  /** Live processes across the sandboxes it serves (the agent's metrics read it when scraped). */
  processCount(): number;
  /** Stops / resumes the sandbox's user processes (see http/freeze.ts). */
  freeze(id: string): Promise<void>;
  thaw(id: string): Promise<void>;
  listen(target: ListenTarget): Promise<Server>;
  close(): Promise<void>;
}

const RPC_PREFIXES = ["/process.Process/", "/filesystem.Filesystem/"];
const CORS = {
  "access-control-allow-origin": "*",
  "access-control-allow-methods": "*",
  "access-control-allow-headers": "*",
  "access-control-expose-headers": "*",
};

/** envd's answer for a dead, unknown or paused sandbox (e2b-protocol.md): the SDK's isRunning()
 * reads it as false, and a request's error as "the sandbox was killed or timed out". */
function sendGone(req: IncomingMessage, res: ServerResponse): void {
  const id = req.headers["e2b-sandbox-id"];
  sendJson(res, 502, { sandboxId: typeof id === "string" ? id : "", message: "The sandbox was not found", code: 502 });
}

/** A handler loaded on its first request: /files pulls in streams, zlib, the multipart reader and
 * the directory code, which a cold start (exec → first /health) need not load. */
function lazy(load: () => Promise<HttpHandler>): HttpHandler {
  let handler: Promise<HttpHandler> | undefined;
  return async (req, res, sbx, url) => (await (handler ??= load()))(req, res, sbx, url);
}
const getFiles = lazy(() => import("./http/files-get.ts").then((m) => m.getFiles));
const postFiles = lazy(() => import("./http/files-post.ts").then((m) => m.postFiles));

/** Endpoints that check credentials themselves (/files accepts signatures, /init its own rule). */
const ROUTES: Record<string, { handler: HttpHandler; selfAuth?: boolean; untraced?: boolean }> = {
  "GET /health": { handler: getHealth, selfAuth: true },
  "GET /files": { handler: getFiles, selfAuth: true },
  "HEAD /files": { handler: getFiles, selfAuth: true },
  "POST /files": { handler: postFiles, selfAuth: true },
  "POST /init": { handler: postInit, selfAuth: true },
  "GET /envs": { handler: getEnvs },
  "GET /metrics": { handler: getMetrics },
  "POST /freeze": { handler: postFreeze },
  "POST /unfreeze": { handler: postUnfreeze },
};

export function createRuntime(opts: RuntimeOptions = {}): Runtime {
  const routes: typeof ROUTES = { ...ROUTES, "POST /v1/storage/mounts": { handler: postStorageMount(opts.csiSocket ?? DEFAULT_CSI_SOCKET) } };
  const spans = opts.agentSpans;
  if (spans) routes[`GET ${spans.path}`] = { handler: async (_req, res) => sendJson(res, 200, spans.take()), untraced: true };
  const sandboxes = new Map<string, RuntimeSandbox>();
  const servers = new Set<Server>();
  const onError = opts.onError ?? ((err: unknown) => console.error("runtime:", err));
  const single = opts.single ? new RuntimeSandbox(opts.single.id ?? "default", opts.single.view, opts.single.options, { alone: true }) : undefined;
  const bySocket = new WeakMap<IncomingMessage, RuntimeSandbox>();

  // The Connect services, built on first use (see rpc.ts); `listen` starts building them at once.
  let rpc: Promise<(req: IncomingMessage, res: ServerResponse) => void> | undefined;
  const rpcHandler = () => (rpc ??= import("./rpc.ts").then((m) => m.rpcHandler((req) => bySocket.get(req))));
  // Embedded (the local driver's agent): nothing waits on readiness, so build them now.
  if (!opts.single) setImmediate(() => void rpcHandler());

  /** A signed /files URL carries no sandbox id: find the sandbox whose token signed it. */
  function bySignature(req: IncomingMessage, url: URL): RuntimeSandbox | undefined {
    const q = url.searchParams;
    const signature = q.get("signature");
    if (url.pathname !== "/files" || !signature) return undefined;
    const exp = q.get("signature_expiration");
    // Junk (not envd's syntax, or expired) is no sandbox's: refused before one hash per sandbox.
    if (fileSignatureRefusal(signature, exp, Math.floor(Date.now() / 1000)) !== undefined) return undefined;
    const op = req.method === "POST" ? "write" : "read";
    for (const sbx of sandboxes.values()) {
      if (sbx.accessToken && signatureMatches(sbx.accessToken, signature, q.get("path") ?? "", op, q.get("username"), exp === null ? undefined : Number(exp))) return sbx;
    }
    return undefined;
  }

  function route(req: IncomingMessage, url: URL): RuntimeSandbox | undefined {
    const id = req.headers["e2b-sandbox-id"];
    const named = typeof id === "string" ? sandboxes.get(id) : undefined;
    return named ?? single ?? bySignature(req, url);
  }

  async function serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? "/", "http://runtime");
    for (const [k, v] of Object.entries(CORS)) res.setHeader(k, v);
    if (req.method === "OPTIONS") return void res.writeHead(204).end();
    const sbx = route(req, url);
    if (!sbx && url.pathname === "/files" && url.searchParams.has("signature") && !req.headers["e2b-sandbox-id"]) {
      // Why no sandbox's token matched, when the syntax or the clock says so (e.g. expired).
      const q = url.searchParams;
      return sendError(res, 401, fileSignatureRefusal(q.get("signature"), q.get("signature_expiration"), Math.floor(Date.now() / 1000)) ?? "invalid signature");
    }
    if (!sbx) return sendGone(req, res);
    sbx.requests.add(req);
    res.once("close", () => sbx.requests.delete(req));

    const isRpc = RPC_PREFIXES.some((p) => url.pathname.startsWith(p));
    const endpoint = isRpc ? undefined : routes[`${req.method} ${url.pathname}`];
    if (!isRpc && !endpoint) {
      // Traced too (under a bounded name, not the caller's path): a pod's agent waits for a span
      // of every request it hands on (controllers/agent/pod-spans.ts).
      opts.traceRequest?.(`${req.method} (no route)`, req, res, { "sandbox.id": sbx.id });
      return sendError(res, 404, `no route for ${req.method} ${url.pathname}`);
    }
    // A span per request, named by its RPC or route (a bounded set), under the ingress's.
    if (!endpoint?.untraced) opts.traceRequest?.(isRpc ? rpcSpanName(url.pathname) : `${req.method} ${url.pathname}`, req, res, { "sandbox.id": sbx.id });
    if (!endpoint?.selfAuth) {
      if (!sbx.checkToken(presentedToken(req))) return sendError(res, 401, UNAUTHORIZED);
    }
    if (isRpc) {
      bySocket.set(req, sbx);
      return (await rpcHandler())(req, res);
    }
    await endpoint!.handler(req, res, sbx, url);
  }

  const handler = (req: IncomingMessage, res: ServerResponse) => {
    serve(req, res).catch((err: unknown) => {
      if (err instanceof HttpError) return sendError(res, err.status, err.message, err.close);
      if (err instanceof SandboxGoneError && !res.headersSent) return sendGone(req, res);
      onError(err);
      sendError(res, 500, (err as Error)?.message ?? String(err));
    });
  };

  /** Stop-paused sandboxes' carried state, until they run again or go (removeSandbox). */
  const parked = new ParkedStates(opts.parkedDir);
  let interpreterModule: Promise<typeof import("./interpreter/server.ts")> | undefined;
  async function serveInterpreter(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? "/", "http://runtime");
    for (const [k, v] of Object.entries(CORS)) res.setHeader(k, v);
    if (req.method === "OPTIONS") return void res.writeHead(204).end();
    const id = req.headers["e2b-sandbox-id"];
    const sbx = (typeof id === "string" ? sandboxes.get(id) : undefined) ?? single;
    if (!sbx) return sendGone(req, res);
    sbx.requests.add(req);
    res.once("close", () => sbx.requests.delete(req));
    const m = await (interpreterModule ??= import("./interpreter/server.ts"));
    await m.serveInterpreter(req, res, sbx, url);
  }

  function mustGet(id: string): RuntimeSandbox {
    const sbx = sandboxes.get(id) ?? (single && (id === single.id) ? single : undefined);
    if (!sbx) throw new Error(`sandbox ${id} is not registered`);
    return sbx;
  }

  return {
    handler,
    interpreter: (req, res) => {
      serveInterpreter(req, res).catch((err: unknown) => {
        if (err instanceof HttpError) return sendError(res, err.status, err.message, err.close);
        if (err instanceof SandboxGoneError && !res.headersSent) return sendGone(req, res);
        onError(err);
        sendError(res, 500, (err as Error)?.message ?? String(err));
      });
    },
    addSandbox(id, view, sandboxOpts) {
      if (sandboxes.has(id)) throw new Error(`sandbox ${id} is already registered`);
      const sbx = new RuntimeSandbox(id, view, sandboxOpts);
      // Kept until the sandbox is deleted: an agent restart finds it whether the sandbox was
      // running or Stop-paused then.
      for (const [k, v] of parked.get(id) ?? []) sbx.carried.set(k, v);
      sbx.onCarried = (carried) => parked.set(id, carried);
      sandboxes.set(id, sbx);
      if (sbx.interpreter) {
        void (interpreterModule ??= import("./interpreter/server.ts")).then((m) => sandboxes.get(id) === sbx && m.prewarm(sbx), onError);
      }
      return sbx;
    },
    removeSandbox(id, removeOpts) {
      const keep = removeOpts?.keepState === true;
      const sbx = sandboxes.get(id);
      if (sbx) {
        sandboxes.delete(id);
        // Gone for good: what closing it saves is not kept.
        if (!keep) sbx.onCarried = undefined;
        sbx.close();
        if (keep) sbx.saveCarried();
      }
      if (!keep) parked.delete(id, "deleted");
      return sbx !== undefined;
    },
    retainParked: (ids) => parked.retainOnly(ids),
    getSandbox: (id) => sandboxes.get(id) ?? (single?.id === id ? single : undefined),
    processCount() {
      let n = single?.processes.live().length ?? 0;
      for (const sbx of sandboxes.values()) n += sbx.processes.live().length;
      return n;
    },
    freeze: (id) => freezeSandbox(mustGet(id)),
    thaw: (id) => thawSandbox(mustGet(id)),
    async listen(target) {
      const server = createServer({ keepAliveTimeout: 65_000 }, handler);
      servers.add(server);
      await new Promise<void>((resolve, reject) => {
        server.once("error", reject);
        if ("socket" in target) {
          rmSync(target.socket, { force: true });
          server.listen(target.socket, resolve);
        } else server.listen(target.port, target.host, resolve);
      });
      // Once the first request (a readiness probe's /health) is answered, or after 200 ms idle:
      // building them takes tens of milliseconds of one core, which a first /health would wait
      // for. An RPC arriving earlier waits for them instead (rpcHandler).
      const build = () => setImmediate(() => void rpcHandler());
      const timer = setTimeout(build, 200);
      timer.unref();
      server.once("request", (_req: IncomingMessage, res: ServerResponse) => {
        clearTimeout(timer);
        res.once("finish", build);
      });
      return server;
    },
    async close() {
      for (const sbx of sandboxes.values()) sbx.close();
      sandboxes.clear();
      single?.close();
      await Promise.all([...servers].map((s) => new Promise<void>((r) => { s.closeAllConnections(); s.close(() => r()); })));
      servers.clear();
    },
  };
}
