// A plain-HTTP proxy on loopback in front of the test cluster's API server, for one client's
// kubeconfig: it forwards every request (watches stream through) and holds back the answer of one
// chosen LIST until the test releases it. Lets a test order an agent's informers' first lists
// (e.g. its Sandboxes' before its Pods', as a loaded machine or a large namespace may) at the
// network boundary, without touching the agent's code or anything else in the test's process.
import { KubeConfig } from "@kubernetes/client-node";
import { createServer, type IncomingMessage, type Server } from "node:http";
import { Agent, request } from "node:https";
import type { AddressInfo } from "node:net";

const HOP_BY_HOP = new Set(["connection", "keep-alive", "transfer-encoding", "upgrade", "proxy-connection", "host"]);

export class HeldListProxy {
  /** Whether the held LIST has arrived (it is waiting for release()). */
  held = false;
  readonly #server: Server;
  readonly #upstream: URL;
  readonly #agent: Agent;
  readonly #hold: (req: IncomingMessage) => boolean;
  #release!: () => void;
  readonly #released = new Promise<void>((r) => (this.#release = r));
  #taken = false;

  /** `hold`: which GET to hold (the first one it accepts; a watch never is). */
  constructor(kc: KubeConfig, hold: (path: string) => boolean) {
    const cluster = kc.getCurrentCluster()!;
    this.#upstream = new URL(cluster.server);
    this.#agent = new Agent({ keepAlive: true, ca: cluster.caData ? Buffer.from(cluster.caData, "base64") : undefined });
    this.#hold = (req) => {
      const url = new URL(req.url ?? "/", "http://proxy");
      return req.method === "GET" && url.searchParams.get("watch") !== "true" && hold(url.pathname);
    };
    this.#server = createServer((req, res) => {
      const forward = () => {
        const headers = Object.fromEntries(Object.entries(req.headers).filter(([k]) => !HOP_BY_HOP.has(k)));
        const up = request({ host: this.#upstream.hostname, port: this.#upstream.port, path: req.url, method: req.method, headers, agent: this.#agent }, (answer) => {
          res.writeHead(answer.statusCode ?? 502, Object.fromEntries(Object.entries(answer.headers).filter(([k]) => !HOP_BY_HOP.has(k))));
          answer.pipe(res);
        });
        up.on("error", () => res.destroy());
        res.on("close", () => up.destroy());
        req.pipe(up);
      };
      if (!this.#taken && this.#hold(req)) {
        this.#taken = true;
        this.held = true;
        void this.#released.then(forward);
      } else forward();
    });
  }

  async start(): Promise<void> {
    await new Promise<void>((r) => this.#server.listen(0, "127.0.0.1", r));
  }

  /** A copy of `kc` whose API server is this proxy (same user and token). */
  kubeConfig(kc: KubeConfig): KubeConfig {
    const port = (this.#server.address() as AddressInfo).port;
    const out = new KubeConfig();
    out.loadFromOptions({
      // Plain HTTP on loopback: client-node takes an http: server only with skipTLSVerify set
      // (there is no TLS to verify; the proxy verifies the API server's with the cluster's CA).
      clusters: kc.clusters.map((c) => ({ name: c.name, server: `http://127.0.0.1:${port}`, skipTLSVerify: true })),
      users: kc.users,
      contexts: kc.contexts,
      currentContext: kc.currentContext,
    });
    return out;
  }

  /** Lets the held LIST through. */
  release(): void {
    this.#release();
  }

  async stop(): Promise<void> {
    this.release();
    this.#server.closeAllConnections();
    await new Promise((r) => this.#server.close(r));
    this.#agent.destroy();
  }
}
