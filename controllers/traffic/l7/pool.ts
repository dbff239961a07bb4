// Upstream connections of the L7 handler, kept alive and reused across a sandbox's client
// connections, as a production MITM proxy does: an inspected HTTPS request then costs the
// sandbox's handshake with the proxy and no second one upstream. A pool belongs to one sandbox
// (never shared across sandboxes, so never across teams) and is keyed by the destination the
// L4 decision allowed (ip, port) and the name sent upstream (SNI). A socket is only ever made by
// a borrowing client connection's own `connect` (its allowed ip:port), so every request on it was
// decided for that very destination. Bounded, since the keys are the tenant's choice (any SNI name,
// any allowed port): at most `maxFree` idle sockets per key and `maxFreePerSandbox` per sandbox,
// `maxIdle` across sandboxes (the shared proxy's descriptors), each closed after `idleMs`; at most
// `maxSocketsPerSandbox` open upstream sockets per sandbox (more requests wait for one); an
// upstream's `Connection: close` is honoured (Node's agent does not reuse it). TLS sessions are
// resumed per sandbox and key, the last `maxSessions` keys of a sandbox kept.
import http from "node:http";
import type { Socket } from "node:net";
import type { Duplex } from "node:stream";
import tls from "node:tls";

/** What `http.request` gets beside the usual options: the borrowing connection's own connect. */
export interface PooledRequest {
  /** A new connection to the allowed ip:port (made only when no idle one is there). */
  upstreamConnect: () => Promise<Socket>;
  /** The name sent upstream (SNI and certificate check); absent for plain HTTP. (Not
   * `servername`: Node's agent fills that in from the Host header for every request.) */
  upstreamName?: string;
}

export interface PoolOptions {
  /** TLS options toward upstreams (tests: a stand-in's CA). */
  tls?: tls.ConnectionOptions;
  /** Idle sockets kept per key (default 4). */
  maxFree?: number;
  /** An idle socket is closed after this long (default 30 s). */
  idleMs?: number;
  /** false: a new upstream connection per client connection's request, no TLS resumption (the
   * bench's baseline). */
  reuse?: boolean;
  /** Sandboxes with a pool at once (default 1024); the least recently used one is dropped past it. */
  maxSandboxes?: number;
  /** Idle sockets kept per sandbox, all keys together (default 32). */
  maxFreePerSandbox?: number;
  /** Idle sockets kept across every sandbox (default 2048). */
  maxIdle?: number;
  /** Open upstream sockets per sandbox, busy or idle (default 256); a request past it waits. */
  maxSocketsPerSandbox?: number;
  /** TLS sessions kept per sandbox, least recently stored dropped first (default 64 keys). */
  maxSessions?: number;
}

/** `sandbox`'s key for a destination: the only thing two requests must share to share a socket. */
export function poolKey(o: { host?: string | null; port?: number | string | null; upstreamName?: string | undefined }): string {
  return `${o.host}:${o.port}:${o.upstreamName === undefined ? "" : `tls:${o.upstreamName}`}`;
}

export class UpstreamPool {
  readonly #o: PoolOptions;
  /** Per sandbox: its agent (plain and TLS sockets, told apart by the key). */
  readonly #agents = new Map<string, http.Agent>();
  /** Per sandbox, per key: the last TLS session, for resumption. */
  readonly #sessions = new Map<string, Map<string, Buffer>>();
  /** Every idle socket kept, of any sandbox (the `maxIdle` bound). */
  readonly #idle = new Set<Socket | Duplex>();

  constructor(o: PoolOptions = {}) {
    this.#o = o;
  }

  /** The agent for `sandbox`'s upstream requests (made on first use). */
  agentFor(sandbox: string): http.Agent {
    let agent = this.#agents.get(sandbox);
    if (agent) {
      // Most recently used last, so the first is the one to drop.
      this.#agents.delete(sandbox);
      this.#agents.set(sandbox, agent);
      return agent;
    }
    agent = this.#make(sandbox);
    this.#agents.set(sandbox, agent);
    if (this.#agents.size > (this.#o.maxSandboxes ?? 1024)) this.forget(this.#agents.keys().next().value!);
    return agent;
  }

  /** Drops `sandbox`'s pool (idle sockets closed, sessions forgotten); busy sockets end with their request. */
  forget(sandbox: string): void {
    const agent = this.#agents.get(sandbox);
    if (agent) {
      // Not `agent.destroy()`: that also ends busy sockets, cutting a long stream (SSE, MCP)
      // mid-response. Idle ones close now; a busy one is closed when its request ends.
      agent.keepSocketAlive = () => false;
      for (const list of Object.values(agent.freeSockets)) {
        for (const s of [...(list ?? [])]) {
          this.#idle.delete(s);
          s.destroy();
        }
      }
    }
    this.#agents.delete(sandbox);
    this.#sessions.delete(sandbox);
  }

  /** TLS sessions kept for `sandbox` (tests). */
  sessions(sandbox: string): number {
    return this.#sessions.get(sandbox)?.size ?? 0;
  }

  /** Idle sockets kept across every sandbox (tests). */
  get idleTotal(): number {
    return this.#idle.size;
  }

  /** Idle sockets per key of `sandbox` (tests). */
  idle(sandbox: string): Record<string, number> {
    const free = this.#agents.get(sandbox)?.freeSockets ?? {};
    return Object.fromEntries(Object.entries(free).map(([k, v]) => [k, v?.length ?? 0]));
  }

  #make(sandbox: string): http.Agent {
    const reuse = this.#o.reuse ?? true;
    const agent = new http.Agent({
      keepAlive: reuse,
      maxFreeSockets: this.#o.maxFree ?? 4,
      timeout: this.#o.idleMs ?? 30_000,
      scheduling: "lifo",
    });
    const sessions = new Map<string, Buffer>();
    this.#sessions.set(sandbox, sessions);
    const tlsOptions = this.#o.tls;
    // The sandbox's idle sockets: a freed socket is kept only under both idle bounds, else closed.
    const idle = new Set<Socket | Duplex>();
    const allIdle = this.#idle;
    const maxFree = this.#o.maxFreePerSandbox ?? 32;
    const maxIdle = this.#o.maxIdle ?? 2048;
    const watched = new WeakSet<Socket>();
    const unidle = (s: Socket | Duplex) => {
      idle.delete(s);
      allIdle.delete(s);
    };
    // Open sockets (busy, idle or being made): counted here, since Node's `maxTotalSockets` counts
    // a socket only once made, so a burst of concurrent requests would all pass it.
    const maxOpen = this.#o.maxSocketsPerSandbox ?? 256;
    let open = 0;
    const waiting: (() => void)[] = [];
    const release = () => {
      const next = waiting.shift();
      if (next) next();
      else open--;
    };
    const slot = (): Promise<void> => {
      if (open < maxOpen) {
        open++;
        return Promise.resolve();
      }
      // Full: an idle socket of another key gives its place; else wait for one to close.
      const spare = idle.values().next().value;
      spare?.destroy();
      return new Promise((r) => waiting.push(r));
    };
    Object.assign(agent, {
      keepSocketAlive(socket: Socket) {
        // A request waiting for a socket slot gets this one's place.
        if (idle.size >= maxFree || allIdle.size >= maxIdle || waiting.length) return false;
        // Node's returns whether to keep it (its typings say void).
        if ((http.Agent.prototype.keepSocketAlive.call(agent, socket) as unknown) === false) return false;
        if (!watched.has(socket)) socket.once("close", () => unidle(socket));
        watched.add(socket);
        idle.add(socket);
        allIdle.add(socket);
        return true;
      },
      reuseSocket(socket: Socket, req: http.ClientRequest) {
        unidle(socket);
        http.Agent.prototype.reuseSocket.call(agent, socket, req);
      },
      getName: (opts: http.ClientRequestArgs & PooledRequest) => poolKey({ host: opts.host, port: opts.port, upstreamName: opts.upstreamName }),
      createConnection: (opts: http.ClientRequestArgs & PooledRequest, cb: (err: Error | null, s?: Duplex) => void) => {
        const key = poolKey({ host: opts.host, port: opts.port, upstreamName: opts.upstreamName });
        slot()
          .then(() => opts.upstreamConnect().catch((e: Error) => (release(), Promise.reject(e))))
          .then(
          (raw) => {
            raw.once("close", release);
            if (opts.upstreamName === undefined) return cb(null, raw);
            const session = sessions.get(key);
            const s = tls.connect({ ...tlsOptions, socket: raw, servername: opts.upstreamName, ALPNProtocols: ["http/1.1"], ...(session ? { session } : {}) });
            s.on("session", (sess: Buffer) => {
              if (!reuse || this.#sessions.get(sandbox) !== sessions) return;
              sessions.delete(key);
              sessions.set(key, sess);
              if (sessions.size > (this.#o.maxSessions ?? 64)) sessions.delete(sessions.keys().next().value!);
            });
            let done = false;
            const finish = (e: Error | null) => {
              if (done) return;
              done = true;
              cb(e, e ? undefined : s);
            };
            s.once("secureConnect", () => finish(null));
            s.on("error", (e) => {
              sessions.delete(key);
              finish(e);
            });
            // The raw socket is the TLS socket's transport: its errors end both.
            raw.on("error", () => s.destroy());
          },
          (e: Error) => cb(e),
        );
        return undefined;
      },
    });
    return agent;
  }
}
