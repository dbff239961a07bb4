// Egress rules on the local driver: what a sandbox behind the traffic-proxy costs at start (create
// to first command, against a sandbox without rules: a network of its own, veth and NAT), and what
// the proxy adds to a small HTTP request and to a bulk download (through the proxy, and on the
// kernel's fast path for a destination the proxy already allowed), measured from inside sandboxes
// against an origin in a namespace standing in for the internet (test/support/outside-net.ts).
// Through HTTP_PROXY (plain or CONNECT) and redirected (no proxy variables), the proxy hands a
// connection it decided at L3/L4 back to the port relay, which relays it in the kernel
// (port-relay.pl `handoff`); a second driver with that turned off gives the same download with
// every byte through the proxy, in the same rounds. `net.proxied_download_ratio` is the lowest of
// the three ways' medians: what a user gets on a first connection, whichever way the client goes.
// The proxy never reaches the host itself, so the origin cannot live on the host's loopback.
// Part of the `local` suite; alone: `npm run bench -- egress`.
import { mkdtempSync, rmSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { DesiredSandbox } from "../controllers/drivers/driver.ts";
import { spawn } from "node:child_process";
import { LocalDriver } from "../controllers/drivers/local/local-driver.ts";
import { layoutFor } from "../controllers/drivers/local/layout.ts";
import { readRecord } from "../controllers/drivers/local/records.ts";
import { serveIn, startOutside } from "../test/support/outside-net.ts";
import type { BenchContext, Figures } from "./run.ts";
import { minMax, percentile as pct, round } from "./stats.ts";

const USER = { name: "user", uid: 1000, gid: 1000, home: "/home/user", shell: "/bin/bash" };
const STARTS = 15;
const REQUESTS = 300;
const BIG_MB = 100;
/** Interleaved download rounds (at least the number of ways, so each takes every position once). */
const ROUNDS = 9;
const PORT = 8080;

/** The origin, in Node as the proxy is: "ok" for a small GET, BIG_MB MiB for /big. */
const ORIGIN = `
const big = Buffer.alloc(${BIG_MB} << 20, 120);
require("node:http").createServer((req, res) => res.end(req.url === "/big" ? big : "ok")).listen(${PORT}, "0.0.0.0");
`;

/** The floor of any Node relay: a bare socket pipe in front of the origin (its own namespace),
 * nothing read or decided; a sandbox without rules downloads through it. */
const PIPE = `
const net = require("node:net");
net.createServer((c) => {
  const u = net.connect(${PORT}, "127.0.0.1");
  c.on("error", () => u.destroy());
  u.on("error", () => c.destroy());
  c.pipe(u).pipe(c);
}).listen(${PORT + 1}, "0.0.0.0");
`;

/** A bare Node relay from a sandbox's network namespace (its loopback, port PORT + 2) to the
 * origin: the same two namespaces as the proxy's path, one Node hop, nothing read or decided; run
 * on the host (outside the sandbox's cgroup, as the proxy is). The floor of a relay in Node. */
const RELAY = (to: string) => `
const net = require("node:net");
net.createServer((c) => {
  const u = net.connect(${PORT}, "${to}");
  c.on("error", () => u.destroy());
  u.on("error", () => c.destroy());
  c.pipe(u).pipe(c);
}).listen(${PORT + 2}, "127.0.0.1", () => console.log("ready"));
`;

/** Sequential GETs with urllib (one connection each, as most clients through a proxy do); prints
 * the p50 and p99 in ms. */
const CLIENT = `
import os, sys, time, urllib.request
proxy = os.environ.get("HTTP_PROXY")
opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy} if proxy else {}))
ts = []
for _ in range(int(sys.argv[2])):
    t = time.perf_counter(); opener.open(sys.argv[1]).read(); ts.append((time.perf_counter() - t) * 1000)
ts.sort(); print(ts[len(ts) // 2], ts[int(len(ts) * 0.99)])
`;

export async function run(ctx: Partial<BenchContext> = {}): Promise<Figures> {
  const dataDir = mkdtempSync(join(ctx.dir ?? tmpdir(), "bench-egress-"));
  const driver = new LocalDriver({ dataDir, cgroupName: `kruise-bench-${process.pid}-egress`, egressFastPath: true });
  // Every byte through the proxy (no handoff), for the same download in the same rounds.
  const nodeDir = mkdtempSync(join(ctx.dir ?? tmpdir(), "bench-egress-node-"));
  const viaNode = new LocalDriver({ dataDir: nodeDir, cgroupName: `kruise-bench-${process.pid}-egress-node`, egressFastPath: true, egressHandoff: false });
  let relay: ReturnType<typeof spawn> | undefined;
  const outside = await startOutside();
  const origin = await serveIn(outside, PORT, [process.execPath, "-e", ORIGIN]).catch((err) => {
    outside.stop();
    throw err;
  });
  const pipe = await serveIn(outside, PORT + 1, [process.execPath, "-e", PIPE]).catch((err) => {
    origin.kill("SIGKILL");
    outside.stop();
    throw err;
  });
  const rules = { allowOut: [outside.ip], denyOut: ["0.0.0.0/0"] };
  let seq = 0;
  const desired = (egress: DesiredSandbox["egress"]): DesiredSandbox => ({
    id: `beg${process.pid}x${seq++}`, generation: 1, template: "base", state: "Running", pauseStrategy: "Freeze",
    resources: { cpuCount: 1, memoryMB: 512 }, allowInternetAccess: true, egress,
  });
  const sh = async (id: string, script: string, on = driver) => {
    const r = await on.exec(id, { cmd: "/bin/bash", args: ["-c", script], cwd: "/home/user", env: { PATH: "/usr/bin:/bin" }, user: USER }, { timeoutMs: 120_000 });
    // An empty answer would become a figure of 0 or NaN.
    if (r.exitCode !== 0) throw new Error(`${id}: ${script.split("\n")[0]} exited ${r.exitCode ?? r.signal}: ${r.stderr.trim()}`);
    return r.stdout.trim();
  };
  try {
    const plain: number[] = [];
    const behind: number[] = [];
    const ids: Record<"plain" | "proxy", string> = { plain: "", proxy: "" };
    let proxyDesired = desired(rules);
    // Alternating, so load from elsewhere on the machine hits both alike.
    for (let i = 0; i < STARTS; i++) {
      for (const [kind, egress, into] of [["plain", null, plain], ["proxy", rules, behind]] as const) {
        const d = desired(egress);
        const t = performance.now();
        await driver.ensure(d);
        await driver.exec(d.id, { cmd: "/bin/true", args: [], cwd: "/", env: {}, user: USER });
        into.push(performance.now() - t);
        ids[kind] = d.id;
        if (kind === "proxy") proxyDesired = d;
      }
    }
    // On the host's network (no namespaces here) it would leave from the host's own address.
    const source = await sh(ids.plain, `python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.connect(("${outside.ip}", 9)); print(s.getsockname()[0])'`);
    if (source === outside.hostIp) throw new Error(`the baseline sandbox shares the host's network (KRUISE_LOCAL_NETNS=off, or no namespaces here): ${driver.capabilities.notes.join("; ")}`);
    await sh(ids.proxy, `cat > /tmp/client.py <<'EOF'\n${CLIENT}\nEOF`);
    await sh(ids.plain, `cat > /tmp/client.py <<'EOF'\n${CLIENT}\nEOF`);
    const url = `http://${outside.ip}:${PORT}/`;
    const [directP50, directP99] = (await sh(ids.plain, `python3 /tmp/client.py ${url} ${REQUESTS}`)).split(" ").map(Number);
    const [proxyP50, proxyP99] = (await sh(ids.proxy, `python3 /tmp/client.py ${url} ${REQUESTS}`)).split(" ").map(Number);
    const speed = async (id: string, on = driver, args = "") => Number(await sh(id, `curl -sf ${args} -o /dev/null -w '%{speed_download}' ${url}big`, on)) / 2 ** 20;
    // The same rules on the driver without handoff.
    const nodeProxied = desired(rules);
    await viaNode.ensure(nodeProxied);
    // The bare Node relay in the plain sandbox's namespace.
    const nsPid = readRecord(layoutFor(dataDir, ids.plain).record)!.nsInit!.pid;
    relay = spawn("nsenter", [`--net=/proc/${nsPid}/ns/net`, process.execPath, "-e", RELAY(outside.ip)], { stdio: ["ignore", "pipe", "inherit"] });
    await new Promise<void>((resolve, reject) => {
      relay!.stdout!.once("data", () => resolve());
      relay!.once("exit", (code) => reject(new Error(`the Node relay exited (${code})`)));
    });
    const redirectedSpeed = async () => Number(await sh(ids.proxy, `env -u http_proxy -u HTTP_PROXY curl -sf -o /dev/null -w '%{speed_download}' ${url}big`)) / 2 ** 20;
    const loadBefore = loadavg()[0]!;
    // Interleaved, so the machine's load hits all alike, each round: direct, a bare Node pipe (the
    // floor of any Node relay), a bare Node relay, through HTTP_PROXY (plain and CONNECT, handed
    // back; and with every byte through a proxy without handoff), and redirected (no proxy
    // variables): first on a connection the proxy decides and hands back (its fast-path set
    // emptied just before, by a policy change), then on a later connection, which the kernel's
    // fast path takes past the proxy. The order turns by one each round, so no way always runs
    // just after the same other one (the download through Node leaves garbage for the proxy's
    // process to collect; a policy change starts each round): each position's cost lands in the
    // spread of every way alike instead of in one way's median.
    const kinds = ["direct", "pipe", "relay", "proxied", "connect", "nodeproxied", "redirected", "fastpath"] as const;
    const speeds = Object.fromEntries(kinds.map((k) => [k, [] as number[]])) as Record<(typeof kinds)[number], number[]>;
    const steps: (() => Promise<void>)[] = [
      async () => void speeds.direct.push(await speed(ids.plain)),
      async () => void speeds.pipe.push(Number(await sh(ids.plain, `curl -sf -o /dev/null -w '%{speed_download}' http://${outside.ip}:${PORT + 1}/big`)) / 2 ** 20),
      async () => void speeds.relay.push(Number(await sh(ids.plain, `curl -sf -o /dev/null -w '%{speed_download}' http://127.0.0.1:${PORT + 2}/big`)) / 2 ** 20),
      async () => void speeds.proxied.push(await speed(ids.proxy)),
      // HTTP_PROXY with a CONNECT tunnel (as for https), handed back as well.
      async () => void speeds.connect.push(await speed(ids.proxy, driver, "-p")),
      async () => void speeds.nodeproxied.push(await speed(nodeProxied.id, viaNode)),
      async () => {
        speeds.redirected.push(await redirectedSpeed());
        // The set is programmed just after the first connection is allowed (by the relay, async).
        await new Promise((r) => setTimeout(r, 200));
        speeds.fastpath.push(await redirectedSpeed());
      },
    ];
    for (let i = 0; i < ROUNDS; i++) {
      // A label change is a policy change for this sandbox: its fast path is emptied.
      await driver.ensure({ ...proxyDesired, generation: 100 + i, labels: { round: String(i) } });
      for (let j = 0; j < steps.length; j++) await steps[(i + j) % steps.length]!();
    }
    const loadAfter = loadavg()[0]!;
    const med = (k: (typeof kinds)[number]) => pct(speeds[k], 50);
    const spread = (k: (typeof kinds)[number]) => minMax(speeds[k], 0);
    /** Each round's download against that round's direct one: the median, and the lowest and highest. */
    const ratio = (k: (typeof kinds)[number], extra: { target?: string } = {}) => {
      const r = speeds[k].map((v, i) => v / speeds.direct[i]!);
      return { value: round(pct(r, 50), 2), unit: "ratio", spread: minMax(r), ...extra };
    };
    const firstConnection = (["proxied", "connect", "redirected"] as const).map((k) => ratio(k)).sort((x, y) => x.value - y.value)[0]!;
    return {
      "local.egress_create_to_first_cmd_p50_ms": { value: round(pct(behind, 50)), unit: "ms" },
      "local.plain_create_to_first_cmd_p50_ms": { value: round(pct(plain, 50)), unit: "ms" },
      "local.egress_extra_start_ms": { value: round(pct(behind, 50) - pct(plain, 50)), unit: "ms" },
      "local.egress_small_request_p50_ms": { value: round(proxyP50!), unit: "ms" },
      "local.egress_small_request_p99_ms": { value: round(proxyP99!), unit: "ms" },
      "local.direct_small_request_p50_ms": { value: round(directP50!), unit: "ms" },
      "local.direct_small_request_p99_ms": { value: round(directP99!), unit: "ms" },
      "local.egress_download_mib_s": { value: round(med("proxied"), 0), unit: "MiB/s", spread: spread("proxied") },
      "local.direct_download_mib_s": { value: round(med("direct"), 0), unit: "MiB/s", spread: spread("direct") },
      "local.redirected_download_mib_s": { value: round(med("redirected"), 0), unit: "MiB/s", spread: spread("redirected") },
      "local.fastpath_download_mib_s": { value: round(med("fastpath"), 0), unit: "MiB/s", spread: spread("fastpath") },
      "local.node_pipe_download_mib_s": { value: round(med("pipe"), 0), unit: "MiB/s", spread: spread("pipe") },
      // 100 MB on a first connection against direct from a sandbox with a veth, same round: the
      // lowest median of the three ways below (each decided by the proxy, relayed by the port
      // relay in the kernel: handoff).
      "net.proxied_download_ratio": { ...firstConnection, target: "≥ 0.8" },
      // HTTP_PROXY, plain HTTP by absolute URI (a proxy-protocol client never takes the fast path).
      "net.proxied_plain_download_ratio": ratio("proxied", { target: "≥ 0.8" }),
      // The same through a CONNECT tunnel (curl -p), as for https.
      "net.proxied_connect_download_ratio": ratio("connect", { target: "≥ 0.8" }),
      // The same with every byte through the proxy (a driver without handoff, as before it).
      "net.proxied_via_node_download_ratio": ratio("nodeproxied"),
      // A bare Node relay between the same two namespaces (the sandbox's, and the origin's through
      // the host), run on the host: what a Node hop costs by itself.
      "net.node_relay_download_ratio": ratio("relay"),
      "local.proxied_connect_download_mib_s": { value: round(med("connect"), 0), unit: "MiB/s", spread: spread("connect") },
      "local.proxied_via_node_download_mib_s": { value: round(med("nodeproxied"), 0), unit: "MiB/s", spread: spread("nodeproxied") },
      "local.node_relay_download_mib_s": { value: round(med("relay"), 0), unit: "MiB/s", spread: spread("relay") },
      // Redirected (no proxy variables), a connection the proxy decides and hands back: the first
      // one to a destination, or after a policy change or the entry's timeout.
      "net.redirected_download_ratio": ratio("redirected", { target: "≥ 0.8" }),
      // Redirected, a later connection to the same destination: the kernel's fast path.
      "net.fastpath_download_ratio": ratio("fastpath", { target: "≥ 0.8" }),
      // The floor of any Node hop: the same download through one bare Node pipe, same round.
      "net.node_pipe_download_ratio": ratio("pipe"),
      "net.bench_load_average_before": { value: round(loadBefore, 1), unit: "" },
      "net.bench_load_average_after": { value: round(loadAfter, 1), unit: "" },
      "net.bench_load_average": { value: round(loadavg()[0]!, 1), unit: "" },
    };
  } finally {
    relay?.kill("SIGKILL");
    for (const [d, dir] of [[driver, dataDir], [viaNode, nodeDir]] as const) {
      for (const s of await d.list()) await d.destroy(s.id).catch(() => {});
      await d.dispose();
      rmSync(dir, { recursive: true, force: true });
    }
    origin.kill("SIGKILL");
    pipe.kill("SIGKILL");
    outside.stop();
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) console.log(JSON.stringify(await run(), null, 2));
