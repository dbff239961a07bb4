// A real Kubernetes control plane for tests and benchmarks: etcd (data on tmpfs) and kube-apiserver
// on loopback with TLS, a token file and RBAC, built by tools/kube/build.sh. No scheduler, kubelet
// or controller-manager: TestKubelet plays the kubelet, and nothing garbage-collects owner refs.
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync, existsSync } from "node:fs";
import { join, resolve } from "node:path";
import { KubeConfig } from "@kubernetes/client-node";
import { freePort } from "../../../scripts/lib/sqld.ts";

const ROOT = resolve(import.meta.dirname, "../../..");

export interface Cluster {
  server: string;
  /** `gitVersion` of the running kube-apiserver, e.g. v1.35.4. */
  version: string;
  dir: string;
  /** Cluster admin (system:masters). */
  adminKubeconfig: string;
  /** The agent's identity: user `sandbox-agent`, only what k8s/rbac.yaml grants. */
  agentKubeconfig: string;
  kubeConfig(who?: "admin" | "agent"): KubeConfig;
  /** Runs the machine's kubectl as admin; returns stdout, throws with stderr on failure. */
  kubectl(args: string[], input?: string): string;
  /** Like kubectl, but returns the exit status and both streams instead of throwing. */
  kubectlResult(args: string[], input?: string): { status: number; stdout: string; stderr: string };
  stop(): Promise<void>;
}

export const AGENT_USER = "sandbox-agent";

/** Path of the folder holding kube-apiserver and etcd (building them on first use). */
export function kubeBin(): string {
  const out = execFileSync("bash", [join(ROOT, "tools/kube/build.sh")], { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] });
  return out.trim().split("\n").pop()!;
}

function kubeconfigYaml(server: string, caFile: string, user: string, token: string): string {
  const ca = readFileSync(caFile).toString("base64");
  return [
    "apiVersion: v1",
    "kind: Config",
    `clusters: [{name: test, cluster: {server: "${server}", certificate-authority-data: "${ca}"}}]`,
    `users: [{name: ${user}, user: {token: "${token}"}}]`,
    `contexts: [{name: test, context: {cluster: test, user: ${user}}}]`,
    "current-context: test",
    "",
  ].join("\n");
}

async function waitFor(what: string, check: () => Promise<boolean>, timeoutMs: number, proc: ChildProcess, log: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (proc.exitCode !== null) throw new Error(`${what} exited (${proc.exitCode}):\n${readFileSync(log, "utf8").slice(-3000)}`);
    if (await check().catch(() => false)) return;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`${what} not ready after ${timeoutMs} ms:\n${readFileSync(log, "utf8").slice(-3000)}`);
}

function stopProcess(p: ChildProcess): Promise<void> {
  if (p.exitCode !== null || p.signalCode !== null) return Promise.resolve();
  return new Promise((ok) => {
    const timer = setTimeout(() => p.kill("SIGKILL"), 5000);
    p.once("exit", () => {
      clearTimeout(timer);
      ok();
    });
    p.kill("SIGTERM");
  });
}

/** `auditLog`: the API server writes one JSON line per request (metadata only) to `<dir>/audit.log`,
 * so a benchmark can tell whose request touched which object. */
export async function startCluster(opts: { dir?: string; auditLog?: boolean } = {}): Promise<Cluster> {
  const bin = kubeBin();
  const shm = existsSync("/dev/shm") ? "/dev/shm" : undefined;
  const dir = opts.dir ?? mkdtempSync(join(shm ?? "/tmp", "sbx-kube-"));
  mkdirSync(join(dir, "pki"), { recursive: true });
  const [etcdPort, peerPort, apiPort] = [await freePort(), await freePort(), await freePort()];

  execFileSync("openssl", ["genrsa", "-out", join(dir, "sa.key"), "2048"], { stdio: "ignore" });
  execFileSync("openssl", ["rsa", "-in", join(dir, "sa.key"), "-pubout", "-out", join(dir, "sa.pub")], { stdio: "ignore" });
  const adminToken = `admin-${Math.random().toString(36).slice(2)}`;
  const agentToken = `agent-${Math.random().toString(36).slice(2)}`;
  writeFileSync(join(dir, "tokens.csv"), `${adminToken},admin,admin,system:masters\n${agentToken},${AGENT_USER},${AGENT_USER}\n`);

  const etcdLog = join(dir, "etcd.log");
  const etcd = spawn(
    join(bin, "etcd"),
    [
      "--data-dir", join(dir, "etcd"),
      "--listen-client-urls", `http://127.0.0.1:${etcdPort}`, "--advertise-client-urls", `http://127.0.0.1:${etcdPort}`,
      "--listen-peer-urls", `http://127.0.0.1:${peerPort}`, "--initial-advertise-peer-urls", `http://127.0.0.1:${peerPort}`,
      "--initial-cluster", `default=http://127.0.0.1:${peerPort}`,
      "--unsafe-no-fsync", "--log-level", "warn",
    ],
    { stdio: ["ignore", openSync(etcdLog, "a"), openSync(etcdLog, "a")] },
  );
  const apiLog = join(dir, "apiserver.log");
  const api = spawn(
    join(bin, "kube-apiserver"),
    [
      `--etcd-servers=http://127.0.0.1:${etcdPort}`, "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
      `--secure-port=${apiPort}`, `--cert-dir=${join(dir, "pki")}`, `--token-auth-file=${join(dir, "tokens.csv")}`,
      "--authorization-mode=RBAC", "--service-account-issuer=https://kubernetes.default.svc",
      `--service-account-key-file=${join(dir, "sa.pub")}`, `--service-account-signing-key-file=${join(dir, "sa.key")}`,
      "--service-cluster-ip-range=10.0.0.0/24", "--disable-admission-plugins=ServiceAccount", "--allow-privileged=true",
      "--v=0",
      ...(opts.auditLog ? [`--audit-policy-file=${auditPolicy(dir)}`, `--audit-log-path=${join(dir, "audit.log")}`, "--audit-log-format=json"] : []),
    ],
    { stdio: ["ignore", openSync(apiLog, "a"), openSync(apiLog, "a")] },
  );
  const server = `https://127.0.0.1:${apiPort}`;
  const cleanup = async () => {
    await stopProcess(api);
    await stopProcess(etcd);
    if (!opts.dir) rmSync(dir, { recursive: true, force: true });
  };
  try {
    // The serving certificate only exists once the apiserver wrote it; until then readyz is skipped.
    const caFile = join(dir, "pki/apiserver.crt");
    await waitFor(
      "kube-apiserver",
      async () => {
        if (!existsSync(caFile)) return false;
        const out = execFileSync("curl", ["-sk", "--max-time", "2", "-H", `Authorization: Bearer ${adminToken}`, `${server}/readyz`], { encoding: "utf8" });
        return out.trim() === "ok";
      },
      60_000,
      api,
      apiLog,
    );
    const adminKubeconfig = join(dir, "admin.kubeconfig");
    const agentKubeconfig = join(dir, "agent.kubeconfig");
    writeFileSync(adminKubeconfig, kubeconfigYaml(server, caFile, "admin", adminToken));
    writeFileSync(agentKubeconfig, kubeconfigYaml(server, caFile, AGENT_USER, agentToken));

    const kubectlResult = (args: string[], input?: string) => {
      const r = spawnKubectl(adminKubeconfig, args, input);
      return r;
    };
    const kubectl = (args: string[], input?: string) => {
      const r = kubectlResult(args, input);
      if (r.status !== 0) throw new Error(`kubectl ${args.join(" ")} failed (${r.status}): ${r.stderr}`);
      return r.stdout;
    };
    const version = (JSON.parse(kubectl(["get", "--raw", "/version"])) as { gitVersion: string }).gitVersion;
    return {
      server,
      version,
      dir,
      adminKubeconfig,
      agentKubeconfig,
      kubeConfig(who = "admin") {
        const kc = new KubeConfig();
        kc.loadFromFile(who === "admin" ? adminKubeconfig : agentKubeconfig);
        return kc;
      },
      kubectl,
      kubectlResult,
      stop: cleanup,
    };
  } catch (err) {
    await cleanup();
    throw err;
  }
}

/** Metadata of every request, one event each (at completion), watches included; an Event's body
 * too (what it is about). */
function auditPolicy(dir: string): string {
  const file = join(dir, "audit-policy.yaml");
  writeFileSync(file, "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived, ResponseStarted]\nrules: [{ level: Request, resources: [{ group: \"\", resources: [events] }] }, { level: Metadata }]\n");
  return file;
}

function spawnKubectl(kubeconfig: string, args: string[], input?: string): { status: number; stdout: string; stderr: string } {
  const { spawnSync } = process.getBuiltinModule("node:child_process") as typeof import("node:child_process");
  const r = spawnSync("kubectl", ["--kubeconfig", kubeconfig, ...args], { encoding: "utf8", input, timeout: 60_000, maxBuffer: 256 * 1024 * 1024 });
  return { status: r.status ?? 1, stdout: r.stdout ?? "", stderr: r.stderr ?? "" };
}
