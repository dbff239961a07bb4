// A restarted kubernetes driver over sandboxes that are already Ready: what kubectl watches of
// their Sandboxes must not change. Its informers list Sandboxes and Pods concurrently, and a
// Sandbox listed before its pod reads as having none; a status computed then (every first-seen
// Sandbox's is) was written as not-Ready and corrected once the pods arrived: every Ready sandbox
// flapped at every agent restart, and at 10,000 sandboxes the agent sent 25,000 status patches
// (bench/kube.ts, kube.agent_startup_requests and kube.agent_kib_per_sandbox_startup_peak).
// No time is assumed: the pods' list is held at a proxy in front of the API server (the driver's
// own boundary, support/held-list-proxy.ts) until the driver holds the Sandboxes and is idle, and
// "nothing written" is judged once the driver is idle again (idle(): no recompute scheduled or
// running, no write in flight) and the admin's watch has delivered a marker written after that.
import { CustomObjectsApi, type KubeConfig } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ObjectCache } from "../../controllers/drivers/kubernetes/object-cache.ts";
import { slimCustom } from "../../controllers/drivers/kubernetes/slim.ts";
import { KubernetesDriver, sandboxName, type KubeDesiredSandbox, type SandboxObject } from "../../controllers/drivers/kubernetes/kubernetes-driver.ts";
import { GROUP, VERSION } from "../../schema/crd/labels.ts";
import { mergePatch, stableJson } from "../../controllers/drivers/kubernetes/kube-api.ts";
import { HeldListProxy } from "./support/held-list-proxy.ts";
import { TestKubelet } from "./support/kubelet.ts";
import { freshNamespace, kubeConfig, until } from "./support/namespace.ts";

const SANDBOXES = 6;
/** The test's own annotation (seenByWatch): changes no status, so the driver leaves it alone. */
const MARK = "test.example/restart-status-mark";
const RUNTIME_IMAGE = "ghcr.io/kruise-edge/sandbox-agent:test";

let ns: string;
let kubelet: TestKubelet;

function newDriver(kc: KubeConfig): KubernetesDriver {
  return new KubernetesDriver({ kubeConfig: kc, namespace: ns, runtimeImage: RUNTIME_IMAGE });
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
    const first = newDriver(kubeConfig("agent"));
    await first.start();
    const ids = Array.from({ length: SANDBOXES }, (_, i) => `rs${i}`);
    await Promise.all(ids.map((id) => first.ensure(desired(id))));

    // Everything kubectl get -w would show of the Sandboxes: their status changes are counted.
    const watched = new ObjectCache<SandboxObject>(kubeConfig(), {
      path: `/apis/${GROUP}/${VERSION}/namespaces/${ns}/sandboxes`,
      list: () => kubeConfig().makeApiClient(CustomObjectsApi).listNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: ns, plural: "sandboxes" }),
      slim: slimCustom,
    });
    let counting = false;
    const notReady = new Set<string>();
    let statusChanges = 0;
    watched.onChange((o, verb, old) => {
      if (verb !== "update" || !counting || stableJson(old?.status) === stableJson(o.status)) return;
      statusChanges++;
      if (readyOf(o) !== "True") notReady.add(o.metadata!.name!);
    });
    await watched.start();
    await until("every Sandbox's status Ready", () => watched.list().filter((o) => readyOf(o) === "True").length === SANDBOXES, 60_000);
    await first.stop();
    await first.idle(); // its writes already sent have landed
    await seenByWatch(watched, "before");
    counting = true;

    // The restarted driver reaches the API server through a proxy that holds its pods' first list
    // until its Sandboxes are listed and it has done all it was going to do with them (as on a
    // loaded machine or in a large namespace, where either list may end first).
    const proxy = new HeldListProxy(kubeConfig("agent"), (path) => path === `/api/v1/namespaces/${ns}/pods`);
    await proxy.start();
    const second = newDriver(proxy.kubeConfig(kubeConfig("agent")));
    try {
      const started = second.start();
      await until("the restarted driver holds every Sandbox, its pods' list held back", async () => proxy.held && (await second.list()).length === SANDBOXES, 60_000);
      await second.idle();
      proxy.release();
      await started;
      await until("the restarted driver sees every sandbox Ready", async () => (await second.list()).filter((o) => o.ready).length === SANDBOXES, 60_000);
      // Whatever it was going to write has landed, and the admin's watch has delivered it.
      await second.idle();
      await seenByWatch(watched, "after");
      expect([...notReady]).toEqual([]);
      expect(statusChanges).toBe(0);
    } finally {
      await second.stop();
      await watched.stop();
      await proxy.stop();
    }
  }, 180_000);
});

/** Waits until `watched` has delivered every change made to the Sandboxes before now: a marker
 * annotation written now comes after them on the watch (events arrive in resourceVersion order). */
async function seenByWatch(watched: ObjectCache<SandboxObject>, mark: string): Promise<void> {
  const custom = kubeConfig().makeApiClient(CustomObjectsApi);
  await custom.patchNamespacedCustomObject(
    { group: GROUP, version: VERSION, namespace: ns, plural: "sandboxes", name: sandboxName("rs0"), body: { metadata: { annotations: { [MARK]: mark } } } },
    mergePatch,
  );
  await until(`the watch delivered the ${mark} mark`, () => watched.list().some((o) => o.metadata?.annotations?.[MARK] === mark), 60_000);
}
