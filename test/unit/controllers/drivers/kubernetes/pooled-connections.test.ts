// The driver's API connections (pooled-connections.ts) as the API server sees them: TLS connections
// it has to accept (a handshake each, on both sides). A burst of more requests than undici's default
// 100 streams per session, and a request after a pause of more than its default 4 s idle time, ride
// the session already open, as client-go's do. The server is a local HTTP/2 TLS server that answers
// like the API server (a Namespace) and, like it, allows 250 streams per connection.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createSecureServer, type Http2SecureServer, type ServerHttp2Session } from "node:http2";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { CoreV1Api, KubeConfig } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { poolConnections } from "../../../../../controllers/drivers/kubernetes/pooled-connections.ts";

let dir: string;
let server: Http2SecureServer;
let connections = 0;
const sessions = new Set<ServerHttp2Session>();
let kc: KubeConfig;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "pooled-connections-"));
  execFileSync("openssl", ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", join(dir, "key.pem"), "-out", join(dir, "cert.pem")], { stdio: "ignore" });
  const cert = readFileSync(join(dir, "cert.pem"));
  server = createSecureServer({ key: readFileSync(join(dir, "key.pem")), cert, allowHTTP1: true, settings: { maxConcurrentStreams: 250 } }, (req, res) => {
    // Held a little, so the burst's requests are all in flight at once.
    setTimeout(() => res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ apiVersion: "v1", kind: "Namespace", metadata: { name: "ns" } })), 50);
  });
  server.on("secureConnection", () => connections++);
  server.on("session", (session) => sessions.add(session));
  await new Promise<void>((ok) => server.listen(0, "127.0.0.1", ok));
  kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: "c", server: `https://127.0.0.1:${(server.address() as AddressInfo).port}`, caData: cert.toString("base64"), skipTLSVerify: false }],
    users: [{ name: "agent", token: "t" }],
    contexts: [{ name: "x", cluster: "c", user: "agent" }],
    currentContext: "x",
  });
  poolConnections(kc);
});

afterAll(async () => {
  // The client keeps its session open (that is the point): cut it from this side.
  for (const session of sessions) session.destroy();
  await new Promise((ok) => server?.close(ok));
  rmSync(dir, { recursive: true, force: true });
});

describe("the driver's API connections", () => {
  it("a burst of 150 requests and a request after 5 s idle open no connection beyond the first", { timeout: 30_000 }, async () => {
    const core = kc.makeApiClient(CoreV1Api);
    await core.readNamespace({ name: "ns" });
    expect(connections).toBe(1);
    const burst = await Promise.all(Array.from({ length: 150 }, () => core.readNamespace({ name: "ns" })));
    expect(burst.every((ns) => ns.metadata?.name === "ns")).toBe(true);
    expect(connections).toBe(1);
    await sleep(5_000);
    await core.readNamespace({ name: "ns" });
    expect(connections).toBe(1);
  });
});
