// The agent as `main.ts --driver kubernetes` builds it, in-process for the kube tier (the same
// calls in the same order: the driver is built and started by kubernetesDriverFromFlags before
// the agent and its link exist): the kubernetes driver on one namespace (plus watched ones), the agent (link, reconciler, ingress) and the CRD link
// (SandboxSets, SandboxClaims and kubectl requests over the agent's session). Optionally the
// container-runtime half of the test kubelet: one real agent-runtime per pod with an IP, so the
// reconciler's /init of a claimed pod succeeds, with the runtime container's RUNTIME_TRACING (the
// driver sets it with the agent's --pod-runtime-tracing; the pod's other settings are a node's)
// and its RUNTIME_ACCESS_TOKEN from the pod's Secret, as the kubelet resolves a secretKeyRef.
import { spawn, type ChildProcess } from "node:child_process";
import { dirname, join, resolve } from "node:path";
import { CoreV1Api, PatchStrategy, setHeaderOptions, type V1Pod } from "@kubernetes/client-node";
import { startAgent, type Agent } from "../../../controllers/agent/agent.ts";
import { lockDataDir } from "../../../controllers/agent/data-dir-lock.ts";
import { KubectlRequests, startCrdLink, type CrdLink } from "../../../controllers/agent/crd-link.ts";
import type { KubernetesDriver } from "../../../controllers/drivers/kubernetes/kubernetes-driver.ts";
import { kubernetesDriverFromFlags } from "../../../controllers/drivers/kubernetes/from-flags.ts";
import { watchNamespacesFlag } from "../../../controllers/drivers/kubernetes/flags.ts";
import { inject } from "vitest";
import { ANNOTATION, RUNTIME_CONTAINER } from "../../../schema/crd/labels.ts";
import { RUNTIME_TRACING_ENV } from "../../../controllers/drivers/kubernetes/pod-spec.ts";
import { RUNTIME_TOKEN_ENV } from "../../../controllers/drivers/kubernetes/runtime-token.ts";
import type { TestEdge } from "./edge.ts";
import { note } from "./failure-logs.ts";
import { persist, podCache } from "./kubelet.ts";
import { kubeConfig } from "./namespace.ts";

const ROOT = resolve(import.meta.dirname, "../../..");

export interface KubeAgent {
  driver: KubernetesDriver;
  agent: Agent;
  crd: CrdLink;
  /** What the CRD link logged (refusals and stale answers from the edge, retries). */
  logs: string[];
  /** Stops the CRD link, the agent (sandboxes kept, as on a restart) and the driver. */
  stop(): Promise<void>;
}

/** `flags`: more of main.ts's flags, e.g. `{"watch-namespaces": "a,b"}` or `{"all-namespaces": true}`. */
export async function startKubeAgent(
  edge: TestEdge,
  namespace: string,
  cluster: string,
  dataDir = join(edge.dir, `agent-${cluster}`),
  flags: { "watch-namespaces"?: string; "all-namespaces"?: boolean } = {},
): Promise<KubeAgent> {
  // The install's step (k8s/README.md): the teams whose namespaces it syncs are bound to the
  // cluster. Under --all-namespaces a test binds a namespace it adds later itself.
  for (const team of [namespace, ...(flags["watch-namespaces"]?.split(",").filter(Boolean) ?? [])]) await edge.bind(team, cluster);
  let agent: Agent | undefined;
  const requests = new KubectlRequests();
  const logs: string[] = [];
  // As main.ts: the data dir's lock first, before the driver (which starts watching) is built.
  const lock = lockDataDir(dataDir);
  let driver: KubernetesDriver | undefined;
  let crd: CrdLink | undefined;
  try {
    driver = await kubernetesDriverFromFlags(
      { kubeconfig: inject("kube").agentKubeconfig, namespace, "runtime-image": "ghcr.io/kruise-edge/sandbox-agent:test", ...flags },
      (id) => agent?.reconciler.queue.add(id),
      requests.onRequest,
      edge.clusterToken,
    );
    agent = await startAgent({ edgeUrl: edge.url, clusterToken: await edge.tokenOf(cluster), clusterId: cluster, dataDir, dataDirLock: lock, driver, log: (m) => {
      note("agent", m);
      if (process.env.KUBE_LOG) console.log(`[agent] ${m}`);
    } });
    await agent.link.whenConnected();
    crd = await startCrdLink({ link: agent.link, driver, kubeConfig: driver.kubeConfig, namespace, watchNamespaces: watchNamespacesFlag(flags), cluster, requests, retryMs: 200, quotaPollMs: 200, autoscalerStatusMs: 300, log: (m) => {
      logs.push(m);
      note("crd", m);
      if (process.env.KUBE_LOG) console.log(`[crd] ${m}`);
    } });
  } catch (err) {
    // A start that failed half-way leaves nothing running, and the data dir's lock free: the next
    // startKubeAgent on this dir then fails for its own reason, not DataDirInUseError (a cascade
    // that hid the first failure).
    await crd?.stop().catch(() => {});
    await agent?.stop("keep").catch(() => {});
    await driver?.stop().catch(() => {});
    lock.release();
    throw err;
  }
  const started = { driver, agent, crd, logs };
  return {
    ...started,
    async stop() {
      await started.crd.stop();
      await started.agent.stop("keep");
      await started.driver.stop();
    },
  };
}

/** A secretKeyRef's value, as the kubelet reads it (a missing Secret is the kubelet's
 * CreateContainerConfigError: no runtime until it exists, never one started open). */
async function secretEnv(core: CoreV1Api, namespace: string, ref: { name?: string; key: string } | undefined, wanted: () => boolean): Promise<string | undefined> {
  if (!ref?.name) return undefined;
  while (wanted()) {
    const secret = await core.readNamespacedSecret({ name: ref.name, namespace }).catch(() => undefined);
    const b64 = secret?.data?.[ref.key];
    if (b64) return Buffer.from(b64, "base64").toString();
    await new Promise((r) => setTimeout(r, 200));
  }
  return undefined;
}

/** Ends a runtime and waits for its exit: SIGTERM (its handler flushes spans), SIGKILL after 2 s.
 * A runtime still running when its test file's worker exits is orphaned (ppid 1), and its inherited
 * stderr keeps vitest from exiting (CI runs of s25-int hung on three). */
function end(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((ok) => {
    const kill = setTimeout(() => child.kill("SIGKILL"), 2000);
    child.once("exit", () => (clearTimeout(kill), ok()));
    child.kill();
  });
}

/** One real agent-runtime per pod with an IP, its URL in the runtime-url annotation. The pods are
 * watched by an informer that resumes: a bare watch ends after 30 s without an event, and a
 * launcher that stopped there left every later pod without a runtime, so it never became ready
 * (the scale test's rare stall, after a quiet spell in the namespace). */
export async function runRuntimes(namespace: string, opts: { watchTimeoutMs?: number } = {}): Promise<{ stop(): Promise<void> }> {
  const kc = kubeConfig();
  const core = kc.makeApiClient(CoreV1Api);
  const patch = setHeaderOptions("Content-Type", PatchStrategy.MergePatch);
  const runtimes = new Map<string, ChildProcess>();
  // After stop() no runtime may start: one spawned by an event still in flight would outlive the
  // test, and its inherited stderr kept vitest from exiting (a CI run hung on one).
  let stopped = false;
  // Every runtime ever spawned, until it exits: the map forgets one whose pod went.
  const spawned = new Set<ChildProcess>();
  const onPod = async (pod: V1Pod) => {
    const name = pod.metadata!.name!;
    if (stopped || !pod.status?.podIP || runtimes.has(name) || pod.metadata?.deletionTimestamp) return;
    // A runtime that dies before it listens (a loaded machine) is started again: its pod would
    // otherwise never get a runtime, and its sandbox never become ready.
    for (let attempt = 1; ; attempt++) {
      const runtimeEnv = pod.spec?.containers.find((c) => c.name === RUNTIME_CONTAINER)?.env;
      const tracing = runtimeEnv?.find((e) => e.name === RUNTIME_TRACING_ENV)?.value;
      // The Secret may come late, or never (a destroyed pod's is deleted with it): the wait ends
      // with the launcher or the pod.
      const wanted = () => !stopped && !gone.has(pod.metadata!.uid!);
      const token = await secretEnv(core, namespace, runtimeEnv?.find((e) => e.name === RUNTIME_TOKEN_ENV)?.valueFrom?.secretKeyRef, wanted);
      if (!wanted()) return;
      // The image's `node` is this one.
      const env = { ...process.env, PATH: `${dirname(process.execPath)}:${process.env.PATH}`, RUNTIME_DIST: inject("runtimeDist"), ...(tracing ? { [RUNTIME_TRACING_ENV]: tracing } : {}), ...(token ? { [RUNTIME_TOKEN_ENV]: token } : {}) };
      // As the pod image starts it: its entrypoint, from the runtime's startup snapshot.
      const child = spawn("/bin/sh", [join(ROOT, "k8s/entrypoint.sh"), "--port", "0", "--host", "127.0.0.1"], { cwd: ROOT, env, stdio: ["ignore", "pipe", "inherit"] });
      runtimes.set(name, child);
      spawned.add(child);
      child.once("exit", () => spawned.delete(child));
      const url = await new Promise<string | undefined>((ok) => {
        let out = "";
        child.stdout!.on("data", (b: Buffer) => {
          out += b.toString();
          const m = /listening on (http:\/\/\S+)\n/.exec(out);
          if (m) ok(m[1]!);
        });
        child.once("exit", () => ok(undefined));
      });
      if (stopped) return void end(child);
      if (runtimes.get(name) !== child) return; // its pod went meanwhile
      // Its URL is written until the write lands (or the pod goes): a runtime without it leaves its
      // sandbox not ready for good, which an edge pool waits out for 5 minutes (create timeout).
      if (url) {
        for (;;) {
          try {
            return void (await persist(() => core.patchNamespacedPod({ name, namespace, body: { metadata: { annotations: { [ANNOTATION.runtimeUrl]: url } } } }, patch)));
          } catch (err) {
            note("runtimes", `the runtime URL of pod ${name} not written (tried again): ${(err as Error)?.message ?? err}`);
            if (stopped || runtimes.get(name) !== child) return;
          }
        }
      }
      // Tried again for as long as its pod is there (a pod's runtime container restarts too);
      // each failure is in a failed test's log.
      note("runtimes", `the runtime of pod ${name} exited before it listened (attempt ${attempt}, starting it again)`);
      await new Promise((r) => setTimeout(r, Math.min(5000, 250 * attempt)));
      if (stopped || runtimes.get(name) !== child) return;
    }
  };
  const gone = new Set<string>(); // uids of deleted pods
  const pods = podCache(kc, namespace, opts.watchTimeoutMs);
  pods.onChange((pod, verb) => {
    if (verb === "delete") {
      gone.add(pod.metadata!.uid!); // by uid: a pod of the same name may come again
      runtimes.get(pod.metadata!.name!)?.kill();
      runtimes.delete(pod.metadata!.name!);
    } else void onPod(pod).catch((e) => console.error("runtime launcher:", e));
  });
  await pods.start();
  return {
    async stop() {
      stopped = true;
      void pods.stop();
      await Promise.all([...spawned].map(end));
    },
  };
}
