// The desired sandbox the kube tier's driver tests hand to KubernetesDriver.ensure: a running
// 1-CPU, 512 MB sandbox of the `py` SandboxSet (each file applies that set), unclaimed.
import type { KubeDesiredSandbox } from "../../../controllers/drivers/kubernetes/kubernetes-driver.ts";

export function kubeDesired(id: string, over: Partial<KubeDesiredSandbox> = {}): KubeDesiredSandbox {
  return { id, generation: 1, template: "py", state: "Running", pauseStrategy: "Stop", resources: { cpuCount: 1, memoryMB: 512 }, allowInternetAccess: true, pool: "py", claimed: false, ...over };
}
