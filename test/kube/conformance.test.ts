// The driver conformance suite (test/controllers/drivers/conformance.ts) against the kubernetes
// driver, with the agent's least-privilege identity on a real API server. The test plays the
// kubelet (TestKubelet) and points each pod at a real agent-runtime on loopback (`settle`). What
// this driver cannot do from the agent (exec, view, snapshots, limits observed from inside) is
// checked to be refused or reported, under a name that says why.
import { readFileSync } from "node:fs";
import { CoreV1Api } from "@kubernetes/client-node";
import type { Driver } from "../../controllers/drivers/driver.ts";
import { KubernetesDriver } from "../../controllers/drivers/kubernetes/kubernetes-driver.ts";
import { describeDriverConformance } from "../controllers/drivers/conformance.ts";
import { TestKubelet } from "./support/kubelet.ts";
import { kubeConfig, kubectlOk } from "./support/namespace.ts";
import { loopbackRuntime, type LoopbackRuntime } from "./support/settle.ts";

const ns = `conformance-${Math.random().toString(36).slice(2, 8)}`;
const options = () => ({ kubeConfig: kubeConfig("agent"), namespace: ns, runtimeImage: "ghcr.io/kruise-edge/sandbox-agent:test", checkpointWaitMs: 1000 });
let kubelet: TestKubelet;
let runtime: LoopbackRuntime;

describeDriverConformance("kubernetes", {
  make: () => new KubernetesDriver(options()),
  start: async (driver) => {
    await kubeConfig().makeApiClient(CoreV1Api).createNamespace({ body: { metadata: { name: ns } } });
    // The shipped injection config: its traffic-proxy governs a sandbox without internet access.
    kubectlOk(["-n", ns, "apply", "-f", "-"], readFileSync("k8s/injection-config.yaml", "utf8").replace("namespace: sandbox-system", `namespace: ${ns}`));
    kubelet = new TestKubelet(kubeConfig(), ns);
    await kubelet.start();
    runtime = await loopbackRuntime(kubeConfig(), ns);
    await (driver as KubernetesDriver).start();
  },
  settle: (driver, id) => runtime.settle(driver, id),
  restart: async () => {
    const next = new KubernetesDriver(options());
    await next.start();
    return next;
  },
  retire: (driver: Driver) => (driver as KubernetesDriver).stop(),
  networkOff: "proxied",
  dispose: async (driver) => {
    await (driver as KubernetesDriver).stop();
    await kubelet?.stop();
    await runtime?.close();
  },
});
