// The traffic-proxy's byte path on loopback, without sandboxes (no root): 100 MiB from a Node
// origin, fetched directly, through the proxy's forward path (HTTP_PROXY: an absolute-URI GET),
// through its redirected path handed to the L7 handler for a host no rule inspects (bytes copied
// only), and through a bare Node socket pipe between the same endpoints (the floor any Node relay
// starts from). Interleaved rounds; median and spread (min–max) per path. The real sandbox path
// adds the relay and a network namespace hop (bench/egress.ts). Alone: `npm run bench -- proxy-bytes`.
import { execFile, spawn } from "node:child_process";
import { once } from "node:events";
import net, { type AddressInfo } from "node:net";
import { promisify } from "node:util";
import { fileURLToPath } from "node:url";
import { SandboxCa } from "../controllers/traffic/l7/ca.ts";
import { L7Handler } from "../controllers/traffic/l7/handler.ts";
import { compilePolicy } from "../controllers/traffic/policy.ts";
import { TrafficProxy } from "../controllers/traffic/proxy.ts";
import { startFront } from "../test/support/l7-stand-ins.ts";
import type { BenchContext, Figures } from "./run.ts";
import { percentile as pct, round } from "./stats.ts";

const MIB = 100;
const run_ = promisify(execFile);
const ROUNDS = 7;

/** MiB/s of one GET of /big by curl (a process of its own, as a sandbox's client is); `proxy`:
 * through that port as HTTP_PROXY. */
async function download(port: number, origin: number, proxy = false): Promise<number> {
  const args = proxy ? ["-x", `http://127.0.0.1:${port}`, `http://127.0.0.1:${origin}/big`] : [`http://127.0.0.1:${port}/big`, "-H", `host: 127.0.0.1:${origin}`];
  const { stdout } = await run_("curl", ["-sf", "--noproxy", proxy ? "" : "*", "-o", "/dev/null", "-w", "%{size_download} %{speed_download}", ...args]);
  const [size, speed] = stdout.split(" ").map(Number);
  if (size !== MIB << 20) throw new Error(`got ${size} bytes`);
  return speed! / 2 ** 20;
}

const listen = (s: net.Server) => new Promise<number>((r) => s.listen(0, "127.0.0.1", () => r((s.address() as AddressInfo).port)));

/** The origin, a Node process of its own: MIB MiB for every GET; prints its port. */
const ORIGIN = `const big = Buffer.alloc(${MIB} << 20, 120);
const s = require("node:http").createServer((req, res) => res.end(big)).listen(0, "127.0.0.1", () => console.log(s.address().port));`;

export async function run(_ctx: Partial<BenchContext> = {}): Promise<Figures> {
  const origin = spawn(process.execPath, ["-e", ORIGIN], { stdio: ["ignore", "pipe", "inherit"] });
  const originPort = Number((await once(origin.stdout!, "data"))[0].toString().trim());
  // The floor: accept, connect, pipe both ways; nothing read or decided.
  const bare = net.createServer((c) => {
    const u = net.connect(originPort, "127.0.0.1");
    c.pipe(u).on("error", () => {});
    u.pipe(c).on("error", () => {});
    c.on("error", () => u.destroy());
  });
  const barePort = await listen(bare);
  const proxy = new TrafficProxy({ refuse: () => undefined, policyFor: () => compilePolicy({ allowOut: [], denyOut: [] }) });
  const proxyPort = await proxy.listenTcp(0, "127.0.0.1");
  const ca = await SandboxCa.create("bench");
  const l7 = new L7Handler({ policyFor: () => ({ http: [{ name: "other", host: "api.test", action: "allow" }], mcp: [] }), secretsFor: () => new Map(), caFor: async () => ca, audit: () => {} });
  const front = await startFront(l7, "bench", originPort);
  try {
    const paths = { direct: () => download(originPort, originPort), bare: () => download(barePort, originPort), forward: () => download(proxyPort, originPort, true), redirected: () => download(front.port, originPort) };
    const speeds: Record<keyof typeof paths, number[]> = { direct: [], bare: [], forward: [], redirected: [] };
    for (const p of Object.values(paths)) await p(); // warm
    for (let i = 0; i < ROUNDS; i++) {
      // Rotate the order so no path always runs first.
      const order = Object.keys(paths) as (keyof typeof paths)[];
      for (let k = 0; k < order.length; k++) {
        const name = order[(i + k) % order.length]!;
        speeds[name].push(await paths[name]());
      }
    }
    const med = (k: keyof typeof paths) => pct(speeds[k], 50);
    const out: Figures = {};
    for (const k of Object.keys(paths) as (keyof typeof paths)[]) {
      out[`net.loopback_${k}_download_mib_s`] = { value: round(med(k), 0), unit: "MiB/s", spread: [round(Math.min(...speeds[k]), 0), round(Math.max(...speeds[k]), 0)] };
    }
    out["net.loopback_forward_download_ratio"] = { value: round(med("forward") / med("direct"), 2), unit: "ratio", target: "≥ 0.8" };
    out["net.loopback_redirected_download_ratio"] = { value: round(med("redirected") / med("direct"), 2), unit: "ratio", target: "≥ 0.8" };
    out["net.loopback_bare_pipe_download_ratio"] = { value: round(med("bare") / med("direct"), 2), unit: "ratio" };
    return out;
  } finally {
    front.close();
    await proxy.close();
    bare.close();
    origin.kill("SIGKILL");
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) console.log(JSON.stringify(await run(), null, 2));
