// The kube tier's usual system for one test file: the real edge, a fresh namespace, the test
// kubelet on it, optionally one real agent-runtime per pod (so claimed pods get their /init),
// and the in-process agent with its CRD link. `restart()` stops the agent (sandboxes kept, as a
// real restart) and starts a new one; `stop()` stops whatever runs then.
import { startTestEdge, type TestEdge } from "./edge.ts";
import { runRuntimes, startKubeAgent, type KubeAgent } from "./kube-agent.ts";
import { TestKubelet } from "./kubelet.ts";
import { join } from "node:path";
import { keepDump, keepFile } from "./failure-logs.ts";
import { freshNamespace, kubeConfig, kubectl } from "./namespace.ts";

export interface KubeSystem {
  edge: TestEdge;
  ns: string;
  kubelet: TestKubelet;
  /** The agent running now. */
  agent: KubeAgent;
  /** Restarts the agent (mid-run, mid-rollout), doing `whileDown` between, and returns the new one. */
  restart(whileDown?: () => unknown): Promise<KubeAgent>;
  stop(): Promise<void>;
}

/** `agentFlags`: more of main.ts's flags for the agent (startKubeAgent's). */
export async function startKubeSystem(name: string, cluster: string, opts: { runtimes?: boolean; agentFlags?: Parameters<typeof startKubeAgent>[4] } = {}): Promise<KubeSystem> {
  const edge = await startTestEdge(name);
  const ns = await freshNamespace(name);
  const kubelet = new TestKubelet(kubeConfig(), ns);
  await kubelet.start();
  const runtimes = opts.runtimes ? await runRuntimes(ns) : undefined;
  // Kept if a test fails: the edge's log, and the namespace's objects and Events at that moment.
  const unkeep = [
    keepFile("edge-workerd", join(edge.dir, "edge", "workerd.log")),
    keepDump("kubectl", () => {
      const kinds = "sandboxsets,sandboxes,sandboxclaims,sandboxupdateops,poolautoscalers,pods,persistentvolumeclaims";
      const objects = kubectl(["-n", ns, "get", kinds, "-o", "yaml"]);
      const events = kubectl(["-n", ns, "get", "events", "--sort-by=.lastTimestamp"]);
      return `${objects.stdout}${objects.stderr}\n--- events ---\n${events.stdout}${events.stderr}`;
    }),
    // The test kubelet's and the running agent's side when it failed: pods it never reported on,
    // the agent's session and its work queue (a stall there shows as keys queued or scheduled).
    keepDump("harness", () => {
      const q = sys.agent.agent.reconciler.queue;
      return `kubelet: ${kubelet.describe()}\nagent: link ${sys.agent.agent.link.connected ? "connected" : "not connected"}; work queue depth ${q.depth}, scheduled ${q.scheduled}\n`;
    }),
  ];
  const sys: KubeSystem = {
    edge,
    ns,
    kubelet,
    agent: await startKubeAgent(edge, ns, cluster, undefined, opts.agentFlags),
    async restart(whileDown) {
      await sys.agent.stop();
      await whileDown?.();
      sys.agent = await startKubeAgent(edge, ns, cluster, undefined, opts.agentFlags);
      return sys.agent;
    },
    async stop() {
      for (const u of unkeep) u();
      await sys.agent.stop().catch(() => {});
      runtimes?.stop();
      await kubelet.stop();
      await edge.stop();
    },
  };
  return sys;
}
