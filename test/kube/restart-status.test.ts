// A restarted kubernetes driver over sandboxes that are already Ready: what kubectl watches of
// their Sandboxes must not change. Its informers list Sandboxes and Pods concurrently, and a
// Sandbox listed before its pod reads as having none; a status computed then (every first-seen
// Sandbox's is) was written as not-Ready and corrected once the pods arrived: every Ready sandbox
// flapped at every agent restart, and at 10,000 sandboxes the agent sent 25,000 status patches
// (bench/kube.ts, kube.agent_startup_requests and kube.agent_kib_per_sandbox_startup_peak).
import { CoreV1Api, CustomObjectsApi } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ObjectCache } from "../../controllers/drivers/kubernetes/object-cache.ts";
import { slimCustom } from "../../controllers/drivers/kubernetes/slim.ts";
import { KubernetesDriver, type KubeDesiredSandbox, type SandboxObject } from "../../controllers/drivers/kubernetes/kubernetes-driver.ts";
import { GROUP, VERSION } from "../../schema/crd/labels.ts";
import { TestKubelet } from "./support/kubelet.ts";
import { freshNamespace, kubeConfig, until } from "./support/namespace.ts";

const SANDBOXES = 6;
const RUNTIME_IMAGE = "ghcr.io/kruise-edge/sandbox-agent:test";

let ns: string;
let kubelet: TestKubelet;

function newDriver(): KubernetesDriver {
  return new KubernetesDriver({ kubeConfig: kubeConfig("agent"), namespace: ns, runtimeImage: RUNTIME_IMAGE });
}

function desired(id: string): KubeDesiredSandbox {
  return { id, generation: 1, template: "python:3.12", state: "Running", pauseStrategy: "Stop", resources: { cpuCount: 1, memoryMB: 512 }, allowInternetAccess: true, claimed: true };
}

const readyOf = (o: SandboxObject) => (o.status as { conditions?: { type: string; status: string }[] } | undefined)?.conditions?.find((c) => c.type === "Ready")?.status;

beforeAll(async () => {
  ns = await freshNamespace("restart-status");
  kubelet = new TestKubelet(kubeConfig(), ns);
  await kubelet.start();
}, 120_000);

afterAll(async () => {
  await kubelet?.stop();
});

describe("a restarted kubernetes driver", () => {
  it("writes nothing to Sandboxes that are already Ready: none of them shows not-Ready, even for a moment", async () => {
    const first = newDriver();
    await first.start();
    const ids = Array.from({ length: SANDBOXES }, (_, i) => `rs${i}`);
    await Promise.all(ids.map((id) => first.ensure(desired(id))));

    // Everything kubectl get -w would show of the Sandboxes.
    const watched = new ObjectCache<SandboxObject>(kubeConfig(), {
      path: `/apis/${GROUP}/${VERSION}/namespaces/${ns}/sandboxes`,
      list: () => kubeConfig().makeApiClient(CustomObjectsApi).listNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: ns, plural: "sandboxes" }),
      slim: slimCustom,
    });
    let counting = false;
    const notReady = new Set<string>();
    let updates = 0;
    watched.onChange((o, verb) => {
      if (verb !== "update" || !counting) return;
      updates++;
      if (readyOf(o) !== "True") notReady.add(o.metadata!.name!);
    });
    await watched.start();
    await until("every Sandbox's status Ready", () => watched.list().filter((o) => readyOf(o) === "True").length === SANDBOXES, 60_000);
    await first.stop();
    await new Promise((r) => setTimeout(r, 1000)); // a write of the first driver's still in flight lands
    counting = true;

    // Its pods' first list answers after its Sandboxes' (as on a loaded machine or in a large
    // namespace, where either list may end first): the answer is held back in this process.
    const list = CoreV1Api.prototype.listNamespacedPod;
    CoreV1Api.prototype.listNamespacedPod = async function (this: CoreV1Api, ...args: Parameters<typeof list>) {
      const answer = await list.apply(this, args);
      await new Promise((r) => setTimeout(r, 1500));
      return answer;
    } as typeof list;
    const second = newDriver();
    try {
      await second.start().finally(() => (CoreV1Api.prototype.listNamespacedPod = list));
      await until("the restarted driver sees every sandbox Ready", async () => (await second.list()).filter((o) => o.ready).length === SANDBOXES, 60_000);
      // Its first-seen pass over every Sandbox has run (it is bounded, not instant): a write it
      // made would have come back on the watch by now.
      await new Promise((r) => setTimeout(r, 3000));
      expect([...notReady]).toEqual([]);
      expect(updates).toBe(0);
    } finally {
      await second.stop();
      await watched.stop();
    }
  }, 180_000);
});
