// In-place changes at claim against the real API server (Kubernetes 1.35: the pod `resize`
// subresource): a warm pool member claimed with another image and more CPU keeps its pod (same
// UID, nothing recreated); the pod spec carries the new image and CPU, the Sandbox records the
// update once, and an Event says what changed. (The edge sets the intent's `inplaceUpdate` from
// E2B's `e2b.agents.kruise.io/image`/`cpu-*` extensions and SandboxClaim `inplaceUpdate`.) The image
// must be in the injection config's pod-policy.inplaceImages (review 25 M3).
import { CoreV1Api, PatchStrategy, setHeaderOptions, type V1Pod } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { KubernetesDriver, type KubeDesiredSandbox } from "../../controllers/drivers/kubernetes/kubernetes-driver.ts";
import { LABEL } from "../../schema/crd/labels.ts";
import { TestKubelet } from "./support/kubelet.ts";
import { freshNamespace, kubeConfig, kubectlOk, until } from "./support/namespace.ts";
import { withSandboxSet } from "./support/sandbox-set.ts";

let ns: string;
let driver: KubernetesDriver;
let kubelet: TestKubelet;
let core: CoreV1Api;

function desired(id: string, generation: number, over: Partial<KubeDesiredSandbox> = {}): KubeDesiredSandbox {
  return { id, generation, template: "python:3.12", state: "Running", pauseStrategy: "Stop", resources: { cpuCount: 1, memoryMB: 512 }, allowInternetAccess: true, pool: "python", claimed: false, ...over };
}

async function podOf(id: string): Promise<V1Pod> {
  const pods = (await core.listNamespacedPod({ namespace: ns, labelSelector: `${LABEL.sandboxId}=${id}` })).items;
  expect(pods).toHaveLength(1);
  return pods[0]!;
}

beforeAll(async () => {
  ns = await freshNamespace("inplace");
  core = kubeConfig().makeApiClient(CoreV1Api);
  await withSandboxSet(ns, "python");
  // The operator's in-place images (review 25 M3): Docker Hub's python repository only.
  kubectlOk(["-n", ns, "create", "configmap", "sandbox-injection-config-user", `--from-literal=pod-policy=${JSON.stringify({ inplaceImages: ["python"] })}`]);
  kubelet = new TestKubelet(kubeConfig(), ns);
  await kubelet.start();
  driver = new KubernetesDriver({ kubeConfig: kubeConfig("agent"), namespace: ns, runtimeImage: "ghcr.io/kruise-edge/sandbox-agent:test" });
  await driver.start();
  await until("python set in the cache", () => driver.sandboxSets.get("python"));
  await until("the pod-policy read", () => driver.injection.current()["pod-policy"]?.inplaceImages.includes("python"));
});

afterAll(async () => {
  await driver?.stop();
  await kubelet?.stop();
});

describe("in-place update at claim", () => {
  it("a claim with another image and more CPU changes the running pod in place", async () => {
    await driver.ensure(desired("warm1", 1));
    await until("member ready", async () => (await driver.observe("warm1"))?.ready);
    // The API server resizes only pods whose kubelet reports container resources in the status
    // (how a 1.35 kubelet says it can resize in place): that much of a kubelet, for this pod.
    const running = await podOf("warm1");
    const statuses = running.spec!.containers.map((c) => ({ name: c.name, image: c.image, imageID: "", ready: true, started: true, restartCount: 0, state: { running: { startedAt: new Date() } }, resources: c.resources }));
    await core.patchNamespacedPodStatus({ name: running.metadata!.name!, namespace: ns, body: { status: { containerStatuses: statuses } } }, setHeaderOptions("Content-Type", PatchStrategy.MergePatch));
    const before = await podOf("warm1");
    expect(before.spec!.containers[0]).toMatchObject({ name: "sandbox", image: "python:3.12", resources: { limits: { cpu: "1" } } });

    const claimed = await driver.ensure(desired("warm1", 2, { claimed: true, inplaceUpdate: { image: "python:3.13", cpuCount: 2 } }));
    expect(claimed.phase).toBe("Running");
    const after = await podOf("warm1");
    expect(after.metadata!.uid).toBe(before.metadata!.uid); // the same pod: nothing recreated
    expect(after.spec!.containers[0]).toMatchObject({ name: "sandbox", image: "python:3.13", resources: { requests: { cpu: "2" }, limits: { cpu: "2" } } });
    expect(after.spec!.containers[1]!.name).toBe("agent-runtime"); // the sidecar is untouched
    const sbx = JSON.parse(kubectlOk(["-n", ns, "get", "sbx", "python-warm1", "-o", "json"]));
    expect(JSON.parse(sbx.metadata.annotations["agents.kruise.io/inplace-update"])).toEqual({ image: "python:3.13", cpuCount: 2, pod: before.metadata!.uid });
    const events = kubectlOk(["-n", ns, "get", "events", "--field-selector", "involvedObject.name=python-warm1", "-o", "jsonpath={.items[*].reason}"]);
    expect(events.split(" ")).toContain("InplaceUpdated");

    // The same update again (a repeated intent) leaves the pod alone.
    await driver.ensure(desired("warm1", 3, { claimed: true, inplaceUpdate: { image: "python:3.13", cpuCount: 2 } }));
    await new Promise((r) => setTimeout(r, 300)); // the claim's deferred metadata write
    expect((await podOf("warm1")).metadata!.resourceVersion).toBe(after.metadata!.resourceVersion);
  });

  it("an image outside the operator's inplaceImages (another team's private repository) is refused: the sandbox fails, its pod keeps its image", async () => {
    await driver.ensure(desired("warm2", 1));
    const before = await podOf("warm2");
    for (const image of ["registry.internal/team-b/app:v3", "python-evil:1", "docker.io/pythonx/python:3"]) {
      await expect(driver.ensure(desired("warm2", 2, { claimed: true, inplaceUpdate: { image } }))).rejects.toMatchObject({ reason: "InvalidSpec", message: expect.stringContaining(`in-place image "${image}"`) });
    }
    expect((await podOf("warm2")).spec!.containers[0]!.image).toBe(before.spec!.containers[0]!.image);
    const events = kubectlOk(["-n", ns, "get", "events", "--field-selector", "involvedObject.name=python-warm2,reason=InplaceImageRefused", "-o", "jsonpath={.items[*].message}"]);
    expect(events).toContain("registry.internal/team-b/app");
  });
});
