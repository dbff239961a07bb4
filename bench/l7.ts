// What L7 inspection adds to a small HTTPS request: the same GET to an HTTPS stand-in, direct and
// through the traffic-proxy's L7 handler (the sandbox's handshake with a leaf of its CA, the
// request parsed, decided, given a secret header, audited, and sent upstream on the sandbox's
// pooled connection), a new client connection per request as most clients through a proxy make.
// In the same interleaved run (order rotated every round): the handler with its upstream pool off
// (a new upstream TLS connection per client connection: the code before the pool), and the floor
// of any Node hop, a bare Node TCP pipe (net.Server → net.connect, piped) in front of the same
// stand-in. Figures are medians of per-round differences against the direct request of that
// round, with the p25–p75 spread. On loopback, without the port relay and network namespace of a
// real sandbox (bench/egress.ts measures that hop). Alone: `npm run bench -- l7`.
import https from "node:https";
import { connect, createServer, type AddressInfo, type Socket } from "node:net";
import { loadavg } from "node:os";
import { SandboxCa } from "../controllers/traffic/l7/ca.ts";
import { L7Handler } from "../controllers/traffic/l7/handler.ts";
import type { L7Policy } from "../controllers/traffic/l7/policy.ts";
import { startFront, startHttpsEcho } from "../test/support/l7-stand-ins.ts";
import type { BenchContext, Figures } from "./run.ts";
import { percentile as pct, round } from "./stats.ts";

const ROUNDS = Number(process.env.L7_BENCH_ROUNDS ?? 300);
const POLICY: L7Policy = { http: [{ name: "token", host: "api.test", action: "allow", setHeaders: { authorization: "Bearer ${e2b.secrets.tok}" } }], mcp: [] };

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

/** A bare TCP relay to 127.0.0.1:`to`: one Node hop, nothing read. */
async function startPipe(to: number): Promise<{ port: number; close(): void }> {
  const open = new Set<Socket>();
  const server = createServer((c) => {
    const up = connect(to, "127.0.0.1");
    for (const s of [c, up]) {
      open.add(s);
      s.on("close", () => open.delete(s)).on("error", () => {});
    }
    c.pipe(up).pipe(c);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return { port: (server.address() as AddressInfo).port, close: () => (server.close(), open.forEach((s) => s.destroy())) };
}

const spreadOf = (xs: number[]): [number, number] => [round(pct(xs, 25), 2), round(pct(xs, 75), 2)];

export async function run(_ctx: Partial<BenchContext> = {}): Promise<Figures> {
  const echo = await startHttpsEcho(["api.test"]);
  const ca = await SandboxCa.create("bench");
  const handler = (reuse: boolean) =>
    new L7Handler({ policyFor: () => POLICY, secretsFor: () => new Map([["tok", "bench-secret"]]), caFor: async () => ca, audit: () => {}, upstreamTls: { ca: echo.ca }, upstreamPool: { reuse } });
  const pooled = await startFront(handler(true), "bench", echo.port);
  const unpooled = await startFront(handler(false), "bench", echo.port);
  const pipe = await startPipe(echo.port);
  const paths = {
    direct: () => get(echo.port, echo.ca),
    l7: () => get(pooled.port, ca.certPem),
    l7_unpooled: () => get(unpooled.port, ca.certPem),
    pipe: () => get(pipe.port, echo.ca),
  };
  type Path = keyof typeof paths;
  const names = Object.keys(paths) as Path[];
  const load = loadavg()[0]!;
  try {
    // Warm every path (the leaf certificate is made on the first inspected request).
    for (let i = 0; i < 20; i++) for (const n of names) await paths[n]();
    const t: Record<Path, number[]> = { direct: [], l7: [], l7_unpooled: [], pipe: [] };
    for (let i = 0; i < ROUNDS; i++) {
      // Rotate the order so no path always runs on a warmer (or busier) machine.
      for (let j = 0; j < names.length; j++) {
        const n = names[(i + j) % names.length]!;
        t[n].push(await paths[n]());
      }
    }
    const added = (n: Path) => t[n].map((x, i) => x - t.direct[i]!);
    // The same over one kept-alive client connection each: what inspection adds per request once
    // the sandbox's handshake is paid.
    const keepDirect = new https.Agent({ keepAlive: true, maxSockets: 1 });
    const keepL7 = new https.Agent({ keepAlive: true, maxSockets: 1 });
    const kept: number[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      const d = await get(echo.port, echo.ca, keepDirect);
      kept.push((await get(pooled.port, ca.certPem, keepL7)) - d);
    }
    keepDirect.destroy();
    keepL7.destroy();
    const fig = (xs: number[]) => ({ value: round(pct(xs, 50), 2), unit: "ms", spread: spreadOf(xs) });
    return {
      "net.https_direct_p50_ms": { value: round(pct(t.direct, 50), 2), unit: "ms" },
      "net.https_l7_p50_ms": { value: round(pct(t.l7, 50), 2), unit: "ms" },
      "net.https_l7_p99_ms": { value: round(pct(t.l7, 99), 2), unit: "ms" },
      "net.proxied_request_overhead_ms": { ...fig(added("l7")), target: "<= 1" },
      "net.proxied_request_overhead_unpooled_ms": fig(added("l7_unpooled")),
      "net.node_pipe_hop_overhead_ms": fig(added("pipe")),
      "net.proxied_request_overhead_keepalive_ms": fig(kept),
      "net.bench_load_average": { value: round(load, 1), unit: "" },
    };
  } finally {
    for (const f of [pooled, unpooled, pipe]) f.close();
    echo.close();
  }
}
