// "The internet" for tests that must stay on this machine: a network namespace behind a veth to
// the host, with an address from the documentation range 198.51.100.0/24 (the host's own
// uplink here is in 192.0.2.0/24) and a small HTTP server that answers with the address it saw
// the client come from. Optionally it also owns 169.254.169.254 (a cloud metadata address),
// routed from the host, so a test can show the host reaches it and a sandbox does not; and
// `privateIp`, an address in a private range (172.30.<k>.2, as a LAN or VPC neighbour of the host
// would have), routed from the host the same way.
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";

export const METADATA_IP = "169.254.169.254";

const SERVER = `
import http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = ("outside saw " + self.client_address[0]).encode()
        self.send_response(200); self.send_header("content-length", str(len(body))); self.end_headers(); self.wfile.write(body)
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("0.0.0.0", 80), H).serve_forever()
`;

export interface Outside {
  /** The server's address ("outside"). */
  ip: string;
  /** Its network namespace, for serveIn. */
  ns: string;
  /** The host's address on the link to it: what a NAT'd client looks like from there. */
  hostIp: string;
  /** The host's end of that link (a veth; the stand-in's end is its eth0). */
  link: string;
  /** With `privateHost`: its address in 172.16.0.0/12, reachable from the host. */
  privateIp?: string;
  stop(): void;
}

const ip = (...args: string[]) => execFileSync("ip", args, { stdio: ["ignore", "ignore", "pipe"] });

async function waitServing(ns: string, port = 80): Promise<void> {
  for (const deadline = Date.now() + 10_000; ; await sleep(50)) {
    try {
      execFileSync("ip", ["netns", "exec", ns, "python3", "-c", `import socket; socket.create_connection(('127.0.0.1', ${port}), 1)`], { stdio: "ignore" });
      return;
    } catch {
      if (Date.now() > deadline) throw new Error(`the server in ${ns} did not start on port ${port}`);
    }
  }
}

/** Runs `argv` inside the stand-in and waits until it listens on `port`: another server "on the
 * internet" (a benchmark's origin). Kill it before `stop()`, which would leave it running. */
export async function serveIn(outside: Pick<Outside, "ns">, port: number, argv: string[]): Promise<ChildProcess> {
  const server = spawn("ip", ["netns", "exec", outside.ns, ...argv], { stdio: ["ignore", "ignore", "inherit"] });
  try {
    await waitServing(outside.ns, port);
  } catch (err) {
    server.kill("SIGKILL");
    throw err;
  }
  return server;
}

export async function startOutside(opts: { metadata?: boolean; privateHost?: boolean } = {}): Promise<Outside> {
  let k = 1 + Math.floor(Math.random() * 62);
  while (existsSync(`/sys/class/net/kto${k}`)) k = 1 + (k % 62);
  const [ns, veth] = [`kruise-outside-${k}`, `kto${k}`];
  const hostIp = `198.51.100.${4 * k + 1}`;
  const outIp = `198.51.100.${4 * k + 2}`;
  const privateIp = opts.privateHost ? `172.30.${k}.2` : undefined;
  ip("netns", "add", ns);
  ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns);
  ip("addr", "add", `${hostIp}/30`, "dev", veth);
  ip("link", "set", veth, "up");
  ip("-n", ns, "addr", "add", `${outIp}/30`, "dev", "eth0");
  ip("-n", ns, "link", "set", "eth0", "up");
  ip("-n", ns, "link", "set", "lo", "up");
  ip("-n", ns, "route", "add", "default", "via", hostIp);
  if (opts.metadata) {
    ip("-n", ns, "addr", "add", `${METADATA_IP}/32`, "dev", "lo");
    ip("route", "replace", `${METADATA_IP}/32`, "via", outIp);
  }
  if (privateIp) {
    ip("-n", ns, "addr", "add", `${privateIp}/32`, "dev", "lo");
    ip("route", "replace", `${privateIp}/32`, "via", outIp);
  }
  const server: ChildProcess = spawn("ip", ["netns", "exec", ns, "python3", "-c", SERVER], { stdio: "ignore" });
  await waitServing(ns);
  return {
    ip: outIp,
    ns,
    hostIp,
    link: veth,
    privateIp,
    stop() {
      server.kill("SIGKILL");
      if (opts.metadata) execFileSync("ip", ["route", "del", `${METADATA_IP}/32`, "via", outIp], { stdio: "ignore" });
      if (privateIp) execFileSync("ip", ["route", "del", `${privateIp}/32`, "via", outIp], { stdio: "ignore" });
      execFileSync("ip", ["netns", "del", ns], { stdio: "ignore" });
    },
  };
}

/** A "container" on a bridge of its own (as docker0 is), with the HTTP server above on port 80,
 * published on `port` of every host address by DNAT the way `docker run -p` and a NodePort do;
 * and port 80 of `routed` (a pod behind a routed veth, as Calico makes them: no bridge) published
 * on `routedPort`. */
export interface Published {
  containerIp: string;
  port: number;
  routedPort: number;
  stop(): void;
}

export async function startPublished(routed: string): Promise<Published> {
  let k = 1 + Math.floor(Math.random() * 62);
  while (existsSync(`/sys/class/net/ktc${k}`)) k = 1 + (k % 62);
  const [ns, bridge, veth, table] = [`kruise-container-${k}`, `ktc${k}`, `ktcv${k}`, `kruise_test_publish_${k}`];
  const [bridgeIp, containerIp, port, routedPort] = [`172.31.${k}.1`, `172.31.${k}.2`, 20_000 + k, 20_100 + k];
  let server: ChildProcess | undefined;
  const stop = () => {
    server?.kill("SIGKILL");
    for (const args of [["nft", "delete", "table", "ip", table], ["ip", "link", "del", bridge], ["ip", "netns", "del", ns]]) {
      try {
        execFileSync(args[0]!, args.slice(1), { stdio: "ignore" });
      } catch {
        // not made
      }
    }
  };
  try {
    ip("netns", "add", ns);
    ip("link", "add", bridge, "type", "bridge");
    ip("addr", "add", `${bridgeIp}/24`, "dev", bridge);
    ip("link", "set", bridge, "up");
    ip("link", "add", veth, "master", bridge, "type", "veth", "peer", "name", "eth0", "netns", ns);
    ip("link", "set", veth, "up");
    ip("-n", ns, "addr", "add", `${containerIp}/24`, "dev", "eth0");
    ip("-n", ns, "link", "set", "eth0", "up");
    ip("-n", ns, "link", "set", "lo", "up");
    ip("-n", ns, "route", "add", "default", "via", bridgeIp);
    const dnat = `fib daddr type local tcp dport ${port} dnat to ${containerIp}:80`;
    const dnatRouted = `fib daddr type local tcp dport ${routedPort} dnat to ${routed}:80`;
    execFileSync("nft", ["-f", "-"], {
      input: `table ip ${table} {
  chain prerouting { type nat hook prerouting priority -100; policy accept; iifname != "${bridge}" ${dnat}; ${dnatRouted}; }
  chain output { type nat hook output priority -100; policy accept; ${dnat}; ${dnatRouted}; }
}
`,
    });
    server = spawn("ip", ["netns", "exec", ns, "python3", "-c", SERVER], { stdio: "ignore" });
    await waitServing(ns);
  } catch (err) {
    stop();
    throw err;
  }
  return { containerIp, port, routedPort, stop };
}
