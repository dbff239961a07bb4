// Makes a kubernetes sandbox usable from the test once `ensure` returned: the TestKubelet marks its
// pod Running and Ready, and since pod IPs are not routable here, the pod's
// `agents.kruise.io/runtime-url` annotation is pointed at a real agent-runtime on loopback (the
// driver's freeze and thaw go there). Waits until the driver reports the sandbox ready at it.
import { CoreV1Api, PatchStrategy, setHeaderOptions, type KubeConfig } from "@kubernetes/client-node";
import { ANNOTATION, LABEL } from "../../../schema/crd/labels.ts";
import { HostView } from "../../../controllers/runtime/host-view.ts";
import { createRuntime } from "../../../controllers/runtime/runtime.ts";
import type { Driver } from "../../../controllers/drivers/driver.ts";
import { idLabel } from "../../../controllers/drivers/kubernetes/kubernetes-driver.ts";
import { persist } from "./kubelet.ts";
import { until } from "./namespace.ts";

const mergePatch = setHeaderOptions("Content-Type", PatchStrategy.MergePatch);

export interface LoopbackRuntime {
  url: string;
  /** Waits for `id`'s pod, points it at this runtime and waits until the driver reports it ready. */
  settle(driver: Driver, id: string): Promise<void>;
  close(): Promise<void>;
}

export async function loopbackRuntime(kc: KubeConfig, namespace: string): Promise<LoopbackRuntime> {
  const core = kc.makeApiClient(CoreV1Api);
  const runtime = createRuntime({ single: { view: new HostView(), options: {} } });
  const server = await runtime.listen({ port: 0, host: "127.0.0.1" });
  const url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  return {
    url,
    async settle(driver, id) {
      const pod = await until(`${id}'s pod`, async () => {
        const items = (await core.listNamespacedPod({ namespace, labelSelector: `${LABEL.sandboxId}=${idLabel(id)}` })).items;
        return items.find((p) => !p.metadata?.deletionTimestamp);
      });
      if (pod.metadata?.annotations?.[ANNOTATION.runtimeUrl] !== url) {
        const body = { metadata: { annotations: { [ANNOTATION.runtimeUrl]: url } } };
        await persist(() => core.patchNamespacedPod({ name: pod.metadata!.name!, namespace, body }, mergePatch));
      }
      await until(`${id} ready at ${url}`, async () => {
        const o = await driver.observe(id);
        return o?.phase === "Running" && o.ready && o.endpoint === url;
      });
    },
    close: () => runtime.close(),
  };
}
