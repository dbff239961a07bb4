// The kubernetes driver's egress data plane, run for real without a kubelet: a network namespace
// stands in for a governed pod. The pod spec the driver builds gives the argv: its init container
// (`traffic-redirect`: the nft ruleset and policy routing) runs there as root, then its
// `traffic-proxy` sidecar (transparent.pl opening the TPROXY listener, then the Node proxy as uid
// 1337), with the policy file the pod's ConfigMap would hold. A "sandbox" process (another uid, no
// proxy variables) then reaches the stand-in internet (a second namespace with an HTTP server and
// a DNS server, the cluster DNS's stand-in) only as the policy says. The sidecar runs as a
// container would: in a cgroup of its own, in its own cgroup namespace with cgroup2 mounted at
// /sys/fs/cgroup. Needs root: run under the shared lock (test/README.md).
import { execFileSync, spawn, spawnSync, type ChildProcess } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync, chmodSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { V1Pod } from "@kubernetes/client-node";
import { buildPod } from "../../../../controllers/drivers/kubernetes/pod-spec.ts";
import { APP_ROOT, POLICY_DIR, POLICY_FILE, podPolicy, PROXY_UID, REDIRECT_CONTAINER, TRAFFIC_CONTAINER, trafficConfigMap } from "../../../../controllers/drivers/kubernetes/traffic-pod.ts";
import { TrafficPolicySet } from "../../../../controllers/traffic/governed.ts";
import type { TrafficPolicyEntry } from "../../../../schema/api/traffic-policy.ts";
import { TrafficPolicySpec } from "../../../../schema/api/traffic-policy.ts";
import { dnsStandIn } from "../../../support/dns-standin.ts";
import { waitFor } from "../../../support/wait-for.ts";
import { removeCgroups } from "../../../support/cgroups.ts";

const REPO = resolve(import.meta.dirname, "../../../..");
const k = 1 + (process.pid % 60);
const POD_NS = `kruise-pod-${k}`;
const OUT_NS = `kruise-podout-${k}`;
const POD_IP = `203.0.113.${4 * k + 1}`;
const OUT_IP = `203.0.113.${4 * k + 2}`;
const SANDBOX_UID = 1000;
/** The cgroup v2 hierarchy (pure v2 hosts: /sys/fs/cgroup; hybrid ones: its `unified` mount). */
const CGROUP2 = readFileSync("/proc/self/mounts", "utf8").split("\n").map((l) => l.split(" ")).find((f) => f[2] === "cgroup2")![1]!;
/** The sidecar's "container" cgroup, and its parent (the "pod"). */
const POD_CG = join(CGROUP2, POD_NS);
const PROXY_CG = join(POD_CG, "traffic-proxy");

// The stand-in internet: HTTP on 80 and 8080 answering who it saw, and the "cluster DNS" on 53.
const SERVERS = `
import http.server, socket, socketserver, struct, threading, sys
out = sys.argv[1]
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/big":
            chunk = bytes(1 << 20)
            self.send_response(200); self.send_header("content-length", str(64 << 20)); self.end_headers()
            for _ in range(64): self.wfile.write(chunk)
            return
        body = ("outside saw " + self.client_address[0]).encode()
        self.send_response(200); self.send_header("content-length", str(len(body))); self.end_headers(); self.wfile.write(body)
    def log_message(self, *a): pass
for port in (80, 8080):
    s = http.server.ThreadingHTTPServer(("0.0.0.0", port), H)
    threading.Thread(target=s.serve_forever, daemon=True).start()
` + dnsStandIn('{b"allowed.test": out, b"other.test": out}');

const sh = (cmd: string, args: string[]) => execFileSync(cmd, args, { stdio: ["ignore", "pipe", "pipe"] }).toString();
const inPod = (args: string[]) => ["netns", "exec", POD_NS, ...args];

let dir: string;
let servers: ChildProcess | undefined;
let sidecar: ChildProcess | undefined;
let sidecarOut = "";
let pod: V1Pod;

function entry(team: string | null, name: string, spec: unknown): TrafficPolicyEntry {
  return { team, name, spec: TrafficPolicySpec.parse(spec) };
}

/** The policy file the agent would put in the pod's ConfigMap for these policies. */
function writePolicy(entries: TrafficPolicyEntry[]): void {
  const set = new TrafficPolicySet();
  set.replace(entries);
  const policy = podPolicy(set, { allowInternetAccess: true, egress: null, labels: { app: "web" }, namespace: "team-a" }, "team-a")!;
  const cm = trafficConfigMap({ pod: "p", namespace: "team-a", labels: {}, owner: { apiVersion: "v1", kind: "x", name: "x", uid: "x" } }, policy);
  writeFileSync(join(dir, `${POLICY_FILE}.tmp`), cm.data![POLICY_FILE]!);
  execFileSync("mv", [join(dir, `${POLICY_FILE}.tmp`), join(dir, POLICY_FILE)]);
}

/** The pod's argv with the image's paths on this machine: the repository for /app, the test's
 * directory for the ConfigMap's mount, this Node for `node`. */
function local(argv: string[]): string[] {
  return argv.map((a) => (a === "node" ? process.execPath : a.replace(`${APP_ROOT}/`, `${REPO}/`).replace(POLICY_DIR, dir)));
}

/** argv run as the container runtime runs a container's: moved into PROXY_CG, then in the pod's
 * network namespace with a cgroup namespace of its own and cgroup2 mounted at /sys/fs/cgroup. */
function inProxyContainer(argv: string[]): string[] {
  return ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', PROXY_CG, "ip", ...inPod(["unshare", "--cgroup", "--mount", "sh", "-c", 'mount -t cgroup2 none /sys/fs/cgroup && exec "$@"', "sh", ...argv])];
}

/** curl as the sandbox's uid, with no proxy variables: the exit code and what it printed. */
function curl(url: string, uid = SANDBOX_UID): { code: number; out: string } {
  const r = spawnSync("ip", inPod(["setpriv", `--reuid=${uid}`, `--regid=${uid}`, "--clear-groups", "curl", "-sS", "--max-time", "8", url]), { env: { PATH: process.env.PATH! } });
  return { code: r.status ?? -1, out: `${r.stdout}${r.stderr}` };
}

/** The sidecar's Node process. */
function proxyPid(): string {
  const pids = sh("pgrep", ["-f", "--", `--pod-policy ${dir}/`]).trim().split("\n");
  return pids.find((p) => /^Name:\s+node/m.test(readFileSync(`/proc/${p}/status`, "utf8")))!;
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "pod-traffic-"));
  chmodSync(dir, 0o755);
  for (const ns of [POD_NS, OUT_NS]) spawnSync("ip", ["netns", "del", ns]);
  sh("ip", ["netns", "add", POD_NS]);
  sh("ip", ["netns", "add", OUT_NS]);
  sh("ip", ["-n", POD_NS, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", OUT_NS]);
  sh("ip", ["-n", POD_NS, "addr", "add", `${POD_IP}/30`, "dev", "eth0"]);
  sh("ip", ["-n", OUT_NS, "addr", "add", `${OUT_IP}/30`, "dev", "eth0"]);
  for (const ns of [POD_NS, OUT_NS]) for (const dev of ["lo", "eth0"]) sh("ip", ["-n", ns, "link", "set", dev, "up"]);
  sh("ip", ["-n", POD_NS, "route", "add", "default", "via", OUT_IP]);
  // `ip netns exec` puts /etc/netns/<ns>/resolv.conf over /etc/resolv.conf: the pod's cluster DNS.
  mkdirSync(`/etc/netns/${POD_NS}`, { recursive: true });
  writeFileSync(`/etc/netns/${POD_NS}/resolv.conf`, `nameserver ${OUT_IP}\n`);
  servers = spawn("ip", ["netns", "exec", OUT_NS, "python3", "-c", SERVERS, OUT_IP], { stdio: "ignore" });

  pod = buildPod({
    name: "sbx-web",
    namespace: "team-a",
    template: { spec: { containers: [{ name: "sandbox", image: "python:3.12" }] } },
    volumeClaimTemplates: [],
    labels: {},
    owner: { apiVersion: "v1", kind: "x", name: "x", uid: "x" },
    runtimeImage: "agent",
    injection: { "traffic-proxy": { kind: "sidecar", image: "agent" } },
    traffic: { configMap: "sbx-web-traffic", governed: true },
    resources: { cpuCount: 1, memoryMB: 256 },
  });
  const policies = [
    entry("team-a", "web", { priority: 10, selector: { matchLabels: { app: "web" } }, egress: { rules: [{ action: "allow", to: [{ fqdn: "allowed.test" }], ports: [{ port: 80 }] }] } }),
    entry(null, "baseline", { egress: { rules: [{ action: "reject", to: [{ cidr: "0.0.0.0/0" }] }] } }),
  ];
  writePolicy(policies);

  const init = pod.spec!.initContainers!.find((c) => c.name === REDIRECT_CONTAINER)!;
  sh("ip", inPod(local(init.command!)));
  const proxy = pod.spec!.containers.find((c) => c.name === TRAFFIC_CONTAINER)!;
  mkdirSync(PROXY_CG, { recursive: true });
  const [cmd, ...args] = inProxyContainer(local(proxy.command!));
  sidecar = spawn(cmd!, args, { stdio: ["ignore", "pipe", "pipe"] });
  sidecar.stdout!.on("data", (b: Buffer) => (sidecarOut += b.toString()));
  sidecar.stderr!.on("data", (b: Buffer) => (sidecarOut += b.toString()));
  await waitFor(() => sidecarOut.includes("health on"), { timeoutMs: 20_000, what: "the sidecar to listen" });
}, 60_000);

/** The pod's end, as the kubelet's: every process of its cgroups (the sidecar's children too),
 * then the cgroups, the namespaces and the files. Run by the last case, and again (a no-op) after
 * a failed one. */
async function stopPod(): Promise<void> {
  const exited = sidecar && sidecar.exitCode === null && sidecar.signalCode === null ? new Promise((r) => sidecar!.once("exit", r)) : undefined;
  sidecar?.kill("SIGKILL");
  servers?.kill("SIGKILL");
  await removeCgroups([PROXY_CG, POD_CG]);
  await exited;
  for (const ns of [POD_NS, OUT_NS]) spawnSync("ip", ["netns", "del", ns]);
  rmSync(`/etc/netns/${POD_NS}`, { recursive: true, force: true });
  if (dir) rmSync(dir, { recursive: true, force: true });
}
afterAll(stopPod, 30_000);

describe("a governed pod's redirect and sidecar (in a network namespace)", () => {
  it("the proxy runs as uid 1337 with no capabilities once its listener is open", () => {
    const status = readFileSync(`/proc/${proxyPid()}/status`, "utf8");
    expect(status).toMatch(new RegExp(`^Uid:\\s+${PROXY_UID}\\s+${PROXY_UID}\\s+${PROXY_UID}\\s+${PROXY_UID}$`, "m"));
    expect(status).toMatch(/^CapEff:\s+0+$/m);
    expect(status).toMatch(/^CapPrm:\s+0+$/m);
    // The kubelet's readiness probe, from outside the pod (an inbound connection: its replies pass).
    expect(spawnSync("ip", ["netns", "exec", OUT_NS, "curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", `http://${POD_IP}:15021/ready`]).stdout.toString()).toBe("200");
  });

  it("curl without proxy variables: the allowed name answers, the rest is refused naming the rule", async () => {
    const ok = curl("http://allowed.test/");
    expect(ok).toEqual({ code: 0, out: `outside saw ${POD_IP}` });
    // other.test resolves at the cluster DNS, but no rule admits it: the proxy's DNS says NXDOMAIN.
    expect(curl("http://other.test/").code).toBe(6);
    // By address, plain HTTP: the proxy answers 403 with the rule that refused it.
    expect(curl(`http://${OUT_IP}:8080/`).out).toContain("GlobalTrafficPolicy baseline rule 1 (reject)");
    // The allowed address on a port the rule does not name: refused too.
    expect(curl(`http://allowed.test:8080/`).out).toContain("baseline");
    // The proxy's log names the rule (read once the event loop, blocked by spawnSync, runs again).
    await waitFor(() => sidecarOut.includes(`denied ${OUT_IP}:8080: GlobalTrafficPolicy baseline rule 1 (reject)`), { what: "the denial in the proxy's log" });
  });

  it("the sandbox cannot go around it: other UDP is dropped, and taking the proxy's uid gets nothing", () => {
    const udp = spawnSync("ip", inPod(["setpriv", `--reuid=${SANDBOX_UID}`, `--regid=${SANDBOX_UID}`, "--clear-groups", "/usr/bin/python3", "-c", `import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b"x", ("${OUT_IP}", 9))`]));
    expect(udp.stderr.toString()).toContain("Operation not permitted");
    // A root process of another container that setuid()s to the proxy's uid (what the
    // agent-runtime's root commands can do): still redirected, and refused by the baseline.
    expect(curl(`http://${OUT_IP}:8080/`, PROXY_UID).out).toContain("GlobalTrafficPolicy baseline rule 1 (reject)");
    const udp1337 = spawnSync("ip", inPod(["setpriv", `--reuid=${PROXY_UID}`, `--regid=${PROXY_UID}`, "--clear-groups", "/usr/bin/python3", "-c", `import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b"x", ("${OUT_IP}", 9))`]));
    expect(udp1337.stderr.toString()).toContain("Operation not permitted");
    // Nor can it reach into the proxy (the pod shares its process namespace): the proxy is not
    // dumpable, so /proc/<pid>/environ (and ptrace, mem, pidfd_getfd) is closed even to uid 1337.
    const node = proxyPid();
    expect(statSync(`/proc/${node}/environ`).uid).toBe(0);
    const peek = spawnSync("setpriv", [`--reuid=${PROXY_UID}`, `--regid=${PROXY_UID}`, "--clear-groups", "cat", `/proc/${node}/environ`]);
    expect(peek.status).not.toBe(0);
    expect(peek.stderr.toString()).toContain("Permission denied");
  });

  it("a bulk download through the transparent path (a figure, not asserted)", () => {
    // Same run, interleaved: through the proxy (uid 1000) and past it (uid 1337 in the proxy's
    // container), 64 MiB each.
    const get = ["curl", "-sS", "-o", "/dev/null", "-w", "%{speed_download}", `http://allowed.test/big`];
    const through = () => Number(spawnSync("ip", inPod(["setpriv", `--reuid=${SANDBOX_UID}`, `--regid=${SANDBOX_UID}`, "--clear-groups", ...get])).stdout.toString());
    const past = () => {
      const [cmd, ...args] = inProxyContainer(["setpriv", `--reuid=${PROXY_UID}`, `--regid=${PROXY_UID}`, "--clear-groups", ...get]);
      return Number(spawnSync(cmd!, args).stdout.toString());
    };
    const rounds = [0, 1, 2].map(() => [through(), past()] as const);
    const median = (xs: number[]) => xs.sort((a, b) => a - b)[1]!;
    const [proxied, direct] = [median(rounds.map((r) => r[0])), median(rounds.map((r) => r[1]))];
    expect(proxied).toBeGreaterThan(0);
    console.log(`net.pod_proxied_download_ratio ${(proxied / direct).toFixed(2)} (proxied ${(proxied / 2 ** 20).toFixed(0)} MiB/s, direct ${(direct / 2 ** 20).toFixed(0)} MiB/s, medians of 3)`);
  });

  it("a new policy file (the ConfigMap changed) applies without a restart", async () => {
    writePolicy([entry(null, "open", { egress: { rules: [{ action: "allow", to: [{ cidr: `${OUT_IP}/32` }] }] } })]);
    await waitFor(() => sidecarOut.includes("policy reloaded"), { timeoutMs: 15_000, what: "a reload" });
    expect(curl(`http://${OUT_IP}:8080/`)).toEqual({ code: 0, out: `outside saw ${POD_IP}` });
    expect(curl("http://other.test/")).toEqual({ code: 0, out: `outside saw ${POD_IP}` });
  });

  // Every run used to leave kruise-pod-<k> (and its traffic-proxy child) in the host's cgroup tree:
  // the sidecar's SIGKILL reached its first process only, and the cgroup was removed at once.
  it("stopped, it leaves no cgroup of the pod's and no process of the sidecar's", async () => {
    const procs = readFileSync(join(PROXY_CG, "cgroup.procs"), "utf8").trim().split("\n").filter(Boolean).map(Number);
    expect(procs.length).toBeGreaterThan(0);
    await stopPod();
    expect([existsSync(PROXY_CG), existsSync(POD_CG)]).toEqual([false, false]);
    // Ended: gone, or a zombie its parent (the machine's init, for the sidecar's orphans) has yet
    // to reap.
    const running = (pid: number) => {
      try {
        return !/^\d+ \(.*\) Z /s.test(readFileSync(`/proc/${pid}/stat`, "utf8"));
      } catch {
        return false;
      }
    };
    expect(procs.filter(running)).toEqual([]);
  });
});
