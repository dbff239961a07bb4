// What L7 inspection adds to a small HTTPS request: the same GET to an HTTPS stand-in, direct and
// through the traffic-proxy's L7 handler (a second TLS handshake with a leaf of the sandbox's CA,
// the request parsed, decided, given a secret header, audited, and a TLS connection upstream),
// interleaved in one run, a new connection per request as most clients through a proxy make.
// On loopback, without the port relay and network namespace of a real sandbox (bench/egress.ts
// measures that hop). Alone: `npm run bench -- l7`.
import https from "node:https";
import { SandboxCa } from "../controllers/traffic/l7/ca.ts";
import { L7Handler } from "../controllers/traffic/l7/handler.ts";
import { startFront, startHttpsEcho } from "../test/support/l7-stand-ins.ts";
import type { BenchContext, Figures } from "./run.ts";
import { percentile as pct, round } from "./stats.ts";

const ROUNDS = 400;

function get(port: number, ca: string, agent: https.Agent | false = false): Promise<number> {
  const t = performance.now();
  return new Promise((resolve, reject) => {
    https
      .get({ host: "127.0.0.1", port, servername: "api.test", ca, agent, path: "/small", headers: { host: "api.test" } }, (res) => {
        res.resume();
        res.on("end", () => (res.statusCode === 200 ? resolve(performance.now() - t) : reject(new Error(`status ${res.statusCode}`))));
      })
      .on("error", reject);
  });
}

export async function run(_ctx: Partial<BenchContext> = {}): Promise<Figures> {
  const echo = await startHttpsEcho(["api.test"]);
  const ca = await SandboxCa.create("bench");
  const handler = new L7Handler({
    policyFor: () => ({ http: [{ name: "token", host: "api.test", action: "allow", setHeaders: { authorization: "Bearer ${e2b.secrets.tok}" } }], mcp: [] }),
    secretsFor: () => new Map([["tok", "bench-secret"]]),
    caFor: async () => ca,
    audit: () => {},
    upstreamTls: { ca: echo.ca },
  });
  const front = await startFront(handler, "bench", echo.port);
  try {
    // Warm both paths (the leaf certificate is made on the first inspected request).
    for (let i = 0; i < 20; i++) await Promise.all([get(echo.port, echo.ca), get(front.port, ca.certPem)]);
    const direct: number[] = [];
    const l7: number[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      // Alternate which goes first so neither always runs on a warmer machine.
      if (i % 2) {
        direct.push(await get(echo.port, echo.ca));
        l7.push(await get(front.port, ca.certPem));
      } else {
        l7.push(await get(front.port, ca.certPem));
        direct.push(await get(echo.port, echo.ca));
      }
    }
    const d50 = pct(direct, 50);
    const l50 = pct(l7, 50);
    // The same over one kept-alive connection each: what inspection adds per request once the
    // handshakes are paid.
    const keepDirect = new https.Agent({ keepAlive: true, maxSockets: 1 });
    const keepL7 = new https.Agent({ keepAlive: true, maxSockets: 1 });
    const kd: number[] = [];
    const kl: number[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      kd.push(await get(echo.port, echo.ca, keepDirect));
      kl.push(await get(front.port, ca.certPem, keepL7));
    }
    keepDirect.destroy();
    keepL7.destroy();
    return {
      "net.https_direct_p50_ms": { value: round(d50, 2), unit: "ms" },
      "net.https_l7_p50_ms": { value: round(l50, 2), unit: "ms" },
      "net.https_l7_p99_ms": { value: round(pct(l7, 99), 2), unit: "ms" },
      "net.proxied_request_overhead_ms": { value: round(l50 - d50, 2), unit: "ms", target: "<= 1" },
      "net.proxied_request_overhead_keepalive_ms": { value: round(pct(kl, 50) - pct(kd, 50), 2), unit: "ms" },
    };
  } finally {
    front.close();
    echo.close();
  }
}
