// A sandbox pod as the API server holds it, run without a kubelet: the pod's network namespace is
// one this harness creates, each volume a directory filled as the kubelet would fill it (the
// ConfigMap's and Secret's keys as files, `items` honoured; emptyDir empty and world-writable), and
// the init containers (the template's own as uid 1000) and the traffic-proxy sidecar (in the init
// order when it is a native sidecar, after them when not) run as processes with their argv, env
// and mounts from the pod spec, paths mapped onto those directories (and the image's /app onto
// this repository). The sidecar runs as a container would: in a cgroup of its own, in
// its own cgroup namespace. Beside it, a stand-in internet: a second namespace with HTTP (80),
// HTTPS (443, a certificate from a stand-in CA the sidecar is told to trust through
// NODE_EXTRA_CA_CERTS) answering with the path and the headers it got, and a DNS server.
// Tenant containers never run (there is no image here): `sandboxRun` runs a command as uid 1000
// with the sandbox container's env and its mounts mapped, as its processes would see them.
// Needs root: run under the shared lock (test/README.md).
import { execFileSync, spawn, spawnSync, type ChildProcess } from "node:child_process";
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { removeCgroups } from "../../support/cgroups.ts";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import type { V1Container, V1Pod } from "@kubernetes/client-node";
import { APP_ROOT, RESERVED_CONTAINERS, TRAFFIC_CONTAINER } from "../../../controllers/drivers/kubernetes/traffic-pod.ts";
import { dnsStandIn } from "../../support/dns-standin.ts";
import { waitFor } from "../../support/wait-for.ts";
import { kubectlOk } from "./namespace.ts";

const REPO = resolve(import.meta.dirname, "../../..");
const PY = "/usr/bin/python3";
export const SANDBOX_UID = 1000;

const SERVERS = `
import http.server, socket, ssl, struct, threading, sys
out, crt, key = sys.argv[1:4]
class H(http.server.BaseHTTPRequestHandler):
    def answer(self):
        n = int(self.headers.get("content-length") or 0)
        if n: self.rfile.read(n)
        body = ("saw %s %s %s" % (self.command, self.path, sorted("%s=%s" % (k.lower(), v) for k, v in self.headers.items() if k.lower().startswith("x-")))).encode()
        self.send_response(200); self.send_header("content-length", str(len(body))); self.end_headers(); self.wfile.write(body)
    do_GET = do_POST = answer
    def log_message(self, *a): pass
s = http.server.ThreadingHTTPServer(("0.0.0.0", 80), H)
threading.Thread(target=s.serve_forever, daemon=True).start()
t = http.server.ThreadingHTTPServer(("0.0.0.0", 443), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); ctx.load_cert_chain(crt, key)
t.socket = ctx.wrap_socket(t.socket, server_side=True)
threading.Thread(target=t.serve_forever, daemon=True).start()
` + dnsStandIn('{b"api.test": out, b"other.test": out}');

const sh = (cmd: string, args: string[]) => execFileSync(cmd, args, { stdio: ["ignore", "pipe", "pipe"] }).toString();

/** The objects the pod's volumes name, as the API server returned them (Secret data base64). */
export interface PodObjects {
  configMaps: Record<string, Record<string, string>>;
  secrets: Record<string, Record<string, string>>;
}

/** What the pod's volumes name, read back from the API server (as cluster admin) as the kubelet would. */
export function podObjects(pod: V1Pod): PodObjects {
  const ns = pod.metadata!.namespace!;
  const data = (kind: string, name: string) => (JSON.parse(kubectlOk(["-n", ns, "get", kind, name, "-o", "json"])) as { data: Record<string, string> }).data;
  const out: PodObjects = { configMaps: {}, secrets: {} };
  for (const v of pod.spec!.volumes ?? []) {
    if (v.configMap) out.configMaps[v.configMap.name!] = data("configmap", v.configMap.name!);
    if (v.secret) out.secrets[v.secret.secretName!] = data("secret", v.secret.secretName!);
  }
  return out;
}

export class PodNetns {
  readonly k = 1 + (process.pid % 60);
  readonly podNs = `kruise-l7pod-${this.k}`;
  readonly outNs = `kruise-l7out-${this.k}`;
  readonly podIp = `198.51.100.${4 * this.k + 1}`;
  readonly outIp = `198.51.100.${4 * this.k + 2}`;
  /** The pod's address on the "cluster network" (linkHost): what its status says, reached from
   * this machine as the agent reaches a pod. */
  readonly clusterIp = `192.0.2.${4 * this.k + 2}`;
  readonly #hostIp = `192.0.2.${4 * this.k + 1}`;
  readonly #hostLink = `kh-l7pod-${this.k}`;
  readonly dir = mkdtempSync(join(tmpdir(), "l7pod-"));
  /** Where each volume of the pod was laid out. */
  readonly volumes = new Map<string, string>();
  sidecarOut = "";
  #servers: ChildProcess | undefined;
  #sidecar: ChildProcess | undefined;
  readonly #cgroup2 = readFileSync("/proc/self/mounts", "utf8").split("\n").map((l) => l.split(" ")).find((f) => f[2] === "cgroup2")![1]!;
  readonly #podCg = join(this.#cgroup2, this.podNs);
  readonly #proxyCg = join(this.#podCg, "traffic-proxy");
  #pod!: V1Pod;

  /** The stand-in's root, which signed its servers' certificates. */
  get standInCa(): string {
    return join(this.dir, "standin", "ca.crt");
  }

  /** The stand-in internet, its CA (the sidecar's upstream trust), and the pod's namespace. */
  async start(pod: V1Pod, objects: PodObjects): Promise<void> {
    this.#pod = pod;
    chmodSync(this.dir, 0o755);
    const ca = join(this.dir, "standin");
    mkdirSync(ca);
    const o = (args: string[]) => sh("openssl", args);
    o(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2", "-subj", "/CN=stand-in root", "-keyout", `${ca}/ca.key`, "-out", `${ca}/ca.crt`]);
    o(["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", "/CN=api.test", "-keyout", `${ca}/srv.key`, "-out", `${ca}/srv.csr`]);
    writeFileSync(`${ca}/ext`, "subjectAltName=DNS:api.test,DNS:other.test\n");
    o(["x509", "-req", "-in", `${ca}/srv.csr`, "-CA", `${ca}/ca.crt`, "-CAkey", `${ca}/ca.key`, "-CAcreateserial", "-days", "2", "-extfile", `${ca}/ext`, "-out", `${ca}/srv.crt`]);
    for (const ns of [this.podNs, this.outNs]) spawnSync("ip", ["netns", "del", ns]);
    sh("ip", ["netns", "add", this.podNs]);
    sh("ip", ["netns", "add", this.outNs]);
    sh("ip", ["-n", this.podNs, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", this.outNs]);
    sh("ip", ["-n", this.podNs, "addr", "add", `${this.podIp}/30`, "dev", "eth0"]);
    sh("ip", ["-n", this.outNs, "addr", "add", `${this.outIp}/30`, "dev", "eth0"]);
    for (const ns of [this.podNs, this.outNs]) for (const dev of ["lo", "eth0"]) sh("ip", ["-n", ns, "link", "set", dev, "up"]);
    sh("ip", ["-n", this.podNs, "route", "add", "default", "via", this.outIp]);
    mkdirSync(`/etc/netns/${this.podNs}`, { recursive: true });
    writeFileSync(`/etc/netns/${this.podNs}/resolv.conf`, `nameserver ${this.outIp}\n`);
    this.#servers = spawn("ip", ["netns", "exec", this.outNs, PY, "-c", SERVERS, this.outIp, `${ca}/srv.crt`, `${ca}/srv.key`], { stdio: "ignore" });

    // The volumes, as the kubelet fills them.
    for (const v of pod.spec!.volumes ?? []) {
      const d = join(this.dir, "vol", v.name);
      mkdirSync(d, { recursive: true, mode: 0o755 });
      chmodSync(d, 0o777);
      this.volumes.set(v.name, d);
      const src = v.configMap ? objects.configMaps[v.configMap.name!] : v.secret ? objects.secrets[v.secret.secretName!] : undefined;
      if (!src) continue;
      const items = (v.configMap ?? v.secret)!.items ?? Object.keys(src).map((key) => ({ key, path: key }));
      for (const it of items) {
        const value = src[it.key];
        if (value === undefined) continue;
        const mode = (v.configMap ?? v.secret)!.defaultMode ?? 0o644;
        writeFileSync(join(d, it.path), v.secret ? Buffer.from(value, "base64") : value);
        chmodSync(join(d, it.path), mode);
      }
      chmodSync(d, 0o755);
    }

    // In the pod's order; the template's own init containers as the sandbox's processes (uid 1000).
    // A native sidecar (restartPolicy Always) is started there, and the next init container runs
    // once it listens (as the kubelet waits for its startup probe).
    for (const c of pod.spec!.initContainers ?? []) {
      if (c.restartPolicy === "Always") {
        if (c.name !== TRAFFIC_CONTAINER) throw new Error(`native sidecar ${c.name}: only the traffic-proxy runs here`);
        await this.#startSidecar(c, ca);
        continue;
      }
      const tenant = !RESERVED_CONTAINERS.includes(c.name) ? ["setpriv", `--reuid=${SANDBOX_UID}`, `--regid=${SANDBOX_UID}`, "--clear-groups"] : [];
      const r = spawnSync("ip", ["netns", "exec", this.podNs, ...tenant, ...this.#argv(c)], { env: this.#env(c) });
      if (r.status !== 0) throw new Error(`init container ${c.name}: ${r.stderr}`);
    }
    if (!this.#sidecar) await this.#startSidecar(pod.spec!.containers.find((c) => c.name === TRAFFIC_CONTAINER)!, ca);
  }

  /** A second link from this machine into the pod's namespace (the pod's eth1, clusterIp), as the
   * cluster network a real agent reaches the pod over. */
  linkHost(): void {
    spawnSync("ip", ["link", "del", this.#hostLink]);
    sh("ip", ["link", "add", this.#hostLink, "type", "veth", "peer", "name", "eth1", "netns", this.podNs]);
    sh("ip", ["addr", "add", `${this.#hostIp}/30`, "dev", this.#hostLink]);
    sh("ip", ["-n", this.podNs, "addr", "add", `${this.clusterIp}/30`, "dev", "eth1"]);
    sh("ip", ["link", "set", this.#hostLink, "up"]);
    sh("ip", ["-n", this.podNs, "link", "set", "eth1", "up"]);
  }

  /** Writes a key of the pod's Secret into the volumes that project it, as the kubelet does when
   * the Secret changes. */
  reproject(secretName: string, key: string, b64: string): void {
    for (const v of this.#pod.spec!.volumes ?? []) {
      if (v.secret?.secretName !== secretName || (v.secret.items && !v.secret.items.some((i) => i.key === key))) continue;
      const path = v.secret.items?.find((i) => i.key === key)?.path ?? key;
      writeFileSync(join(this.volumes.get(v.name)!, path), Buffer.from(b64, "base64"));
      chmodSync(join(this.volumes.get(v.name)!, path), v.secret.defaultMode ?? 0o644);
    }
  }

  /** The traffic-proxy as its container runs: its own cgroup and cgroup namespace, in the pod's
   * network namespace; resolves once it listens. */
  async #startSidecar(proxy: V1Container, ca: string): Promise<void> {
    mkdirSync(this.#proxyCg, { recursive: true });
    const argv = ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', this.#proxyCg, "ip", "netns", "exec", this.podNs, "unshare", "--cgroup", "--mount", "sh", "-c", 'mount -t cgroup2 none /sys/fs/cgroup && exec "$@"', "sh", ...this.#argv(proxy)];
    // The stand-in's CA is the only thing the sidecar gets that its container would not.
    this.#sidecar = spawn(argv[0]!, argv.slice(1), { stdio: ["ignore", "pipe", "pipe"], env: { ...this.#env(proxy), NODE_EXTRA_CA_CERTS: `${ca}/ca.crt` } });
    this.#sidecar.stdout!.on("data", (b: Buffer) => (this.sidecarOut += b.toString()));
    this.#sidecar.stderr!.on("data", (b: Buffer) => (this.sidecarOut += b.toString()));
    await waitFor(() => this.sidecarOut.includes("health on") || this.#sidecar!.exitCode !== null, { timeoutMs: 30_000, what: "the sidecar to listen" });
    if (!this.sidecarOut.includes("health on")) throw new Error(`the sidecar exited: ${this.sidecarOut}`);
  }

  /** A path inside a container of the pod, as a path on this machine. */
  #path(c: V1Container, p: string): string {
    const mounts = [...(c.volumeMounts ?? [])].sort((a, b) => b.mountPath.length - a.mountPath.length);
    for (const m of mounts) if (p === m.mountPath || p.startsWith(`${m.mountPath}/`)) return this.volumes.get(m.name)! + p.slice(m.mountPath.length);
    return p === APP_ROOT || p.startsWith(`${APP_ROOT}/`) ? REPO + p.slice(APP_ROOT.length) : p;
  }

  /** argv with every mount path (in scripts too) and /app mapped onto this machine. */
  #argv(c: V1Container): string[] {
    const roots = [...(c.volumeMounts ?? []).map((m) => m.mountPath), APP_ROOT].sort((a, b) => b.length - a.length);
    const re = new RegExp(`(${roots.map((r) => r.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&")).join("|")})(?=/|$|[^A-Za-z0-9_-])`, "g");
    return [...(c.command ?? []), ...(c.args ?? [])].map((a) => (a === "node" ? process.execPath : a.replace(re, (root) => this.#path(c, root))));
  }

  #env(c: V1Container): NodeJS.ProcessEnv {
    const env: NodeJS.ProcessEnv = { PATH: process.env.PATH! };
    for (const e of c.env ?? []) if (e.value !== undefined) env[e.name] = e.value.startsWith("/") ? this.#path(c, e.value) : e.value;
    return env;
  }

  container(name: string): V1Container {
    return [...this.#pod.spec!.containers, ...(this.#pod.spec!.initContainers ?? [])].find((c) => c.name === name)!;
  }

  /** A command as the sandbox's processes run it: uid 1000, no proxy variables, the env and
   * mounts of container `name`. Exit code and output. */
  sandboxRun(name: string, argv: string[]): { code: number; out: string } {
    const c = this.container(name);
    const r = spawnSync("ip", ["netns", "exec", this.podNs, "setpriv", `--reuid=${SANDBOX_UID}`, `--regid=${SANDBOX_UID}`, "--clear-groups", ...argv], { env: this.#env(c) });
    return { code: r.status ?? -1, out: `${r.stdout}${r.stderr}` };
  }

  /** The host path a container's mount path maps to. */
  hostPath(container: string, p: string): string {
    return this.#path(this.container(container), p);
  }

  async stop(): Promise<void> {
    this.#sidecar?.kill("SIGKILL");
    this.#servers?.kill("SIGKILL");
    if (this.#sidecar && this.#sidecar.exitCode === null) await new Promise((r) => this.#sidecar!.once("exit", r));
    for (const ns of [this.podNs, this.outNs]) spawnSync("ip", ["netns", "del", ns]);
    spawnSync("ip", ["link", "del", this.#hostLink]);
    rmSync(`/etc/netns/${this.podNs}`, { recursive: true, force: true });
    // Every process of the pod's cgroups (the sidecar's children too), then the cgroups.
    await removeCgroups([this.#proxyCg, this.#podCg]).catch(() => {});
    rmSync(this.dir, { recursive: true, force: true });
  }
}
