// "The internet" for tests that must stay on this machine: a network namespace behind a veth to
// the host, with an address from the documentation range 198.51.100.0/24 (the host's own
// uplink here is in 192.0.2.0/24) and a small HTTP server that answers with the address it saw
// the client come from. Optionally it also owns 169.254.169.254 (a cloud metadata address),
// routed from the host, so a test can show the host reaches it and a sandbox does not.
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
  /** The host's address on the link to it: what a NAT'd client looks like from there. */
  hostIp: string;
  stop(): void;
}

const ip = (...args: string[]) => execFileSync("ip", args, { stdio: ["ignore", "ignore", "pipe"] });

export async function startOutside(opts: { metadata?: boolean } = {}): Promise<Outside> {
  let k = 1 + Math.floor(Math.random() * 62);
  while (existsSync(`/sys/class/net/kto${k}`)) k = 1 + (k % 62);
  const [ns, veth] = [`kruise-outside-${k}`, `kto${k}`];
  const hostIp = `198.51.100.${4 * k + 1}`;
  const outIp = `198.51.100.${4 * k + 2}`;
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
  const server: ChildProcess = spawn("ip", ["netns", "exec", ns, "python3", "-c", SERVER], { stdio: "ignore" });
  for (const deadline = Date.now() + 10_000; ; await sleep(50)) {
    try {
      execFileSync("ip", ["netns", "exec", ns, "python3", "-c", "import socket; socket.create_connection(('127.0.0.1', 80), 1)"], { stdio: "ignore" });
      break;
    } catch {
      if (Date.now() > deadline) throw new Error("the outside server did not start");
    }
  }
  return {
    ip: outIp,
    hostIp,
    stop() {
      server.kill("SIGKILL");
      if (opts.metadata) execFileSync("ip", ["route", "del", `${METADATA_IP}/32`, "via", outIp], { stdio: "ignore" });
      execFileSync("ip", ["netns", "del", ns], { stdio: "ignore" });
    },
  };
}
