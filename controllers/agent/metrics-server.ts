// The agent's Prometheus endpoint: `GET /metrics` on its own port (`--metrics-port`, loopback by
// default), apart from the ingress so a scrape never shares the edge's signed path and a metrics
// port can be exposed to a cluster's Prometheus without exposing sandboxes. Unauthenticated, as
// Prometheus scrapes are: it tells counts, never ids (controllers/lib/metrics.ts).
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { registry } from "../lib/metrics.ts";

export interface MetricsServer {
  url: string;
  close(): Promise<void>;
}

export async function startMetricsServer(port: number, host = "127.0.0.1"): Promise<MetricsServer> {
  const server: Server = createServer((req, res) => {
    const path = new URL(req.url ?? "/", "http://agent").pathname;
    if (path !== "/metrics" || (req.method !== "GET" && req.method !== "HEAD")) {
      return void res.writeHead(404, { "content-type": "text/plain" }).end("not found: the agent serves GET /metrics here\n");
    }
    registry.metrics().then(
      (text) => res.writeHead(200, { "content-type": registry.contentType }).end(req.method === "HEAD" ? undefined : text),
      (err: Error) => res.writeHead(500, { "content-type": "text/plain" }).end(`metrics: ${err.message}\n`),
    );
  });
  await new Promise<void>((ok, fail) => server.once("error", fail).listen(port, host, ok));
  const addr = server.address() as AddressInfo;
  const shown = addr.family === "IPv6" ? `[${addr.address}]` : addr.address;
  return {
    url: `http://${shown}:${addr.port}/metrics`,
    close: () => new Promise<void>((ok) => server.close(() => ok())),
  };
}
