// A sandbox whose agent-runtime fails its liveness probe (issue 18.2) against the real API server:
// the kubelet restarts the container in the same pod, and the Sandbox shows it as the
// `RuntimeHealthy` condition (False while restarting, True again with the restart count after),
// with a `RuntimeRestarted` Event. The sandbox is kept: same Sandbox, same pod, ready again. The
// test plays the kubelet's part (the restarted container's status), the named boundary.
import { CoreV1Api, type V1Pod } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { KubernetesDriver, idLabel } from "../../controllers/drivers/kubernetes/kubernetes-driver.ts";
import { LABEL } from "../../schema/crd/labels.ts";
import { TestKubelet } from "./support/kubelet.ts";
import { freshNamespace, kubeConfig, kubectlOk, until } from "./support/namespace.ts";
import { kubeDesired } from "./support/desired.ts";

let ns: string;
let driver: KubernetesDriver;
let kubelet: TestKubelet;
let core: CoreV1Api;

const desired = (id: string, generation: number) => kubeDesired(id, { generation });

async function podOf(id: string): Promise<V1Pod> {
  const pods = (await core.listNamespacedPod({ namespace: ns, labelSelector: `${LABEL.sandboxId}=${idLabel(id)}` })).items;
  expect(pods).toHaveLength(1);
  return pods[0]!;
}

interface Sbx {
  metadata: { uid: string };
  status?: { phase?: string; conditions?: { type: string; status: string; reason: string; message: string }[] };
}
const sandbox = (name: string) => JSON.parse(kubectlOk(["-n", ns, "get", "sbx", name, "-o", "json"])) as Sbx;
const conditionOf = (s: Sbx, type: string) => s.status?.conditions?.find((c) => c.type === type);

/** What the kubelet reports while and after it restarts the runtime container. */
async function runtimeStatus(id: string, ready: boolean, restartCount: number): Promise<void> {
  const pod = await podOf(id);
  const now = new Date();
  pod.status!.conditions = pod.status!.conditions!.map((c) => (c.type === "Ready" || c.type === "ContainersReady" ? { ...c, status: ready ? "True" : "False", lastTransitionTime: now } : c));
  pod.status!.containerStatuses = pod.status!.containerStatuses!.map((c) =>
    c.name !== "agent-runtime"
      ? c
      : {
          ...c,
          ready,
          restartCount,
          state: ready ? { running: { startedAt: now } } : { waiting: { reason: "CrashLoopBackOff", message: "back-off 10s restarting failed container" } },
          lastState: { terminated: { exitCode: 137, reason: "Error", finishedAt: now } },
        },
  );
  await core.replaceNamespacedPodStatus({ name: pod.metadata!.name!, namespace: ns, body: pod });
}

beforeAll(async () => {
  ns = await freshNamespace("rthealth");
  core = kubeConfig().makeApiClient(CoreV1Api);
  kubectlOk(["-n", ns, "apply", "-f", "-"], "apiVersion: agents.kruise.io/v1alpha1\nkind: SandboxSet\nmetadata: { name: py }\nspec:\n  replicas: 0\n  template: { spec: { containers: [{ name: sandbox, image: python:3.12 }] } }\n");
  kubelet = new TestKubelet(kubeConfig(), ns);
  await kubelet.start();
  driver = new KubernetesDriver({ kubeConfig: kubeConfig("agent"), namespace: ns, runtimeImage: "ghcr.io/kruise-edge/sandbox-agent:test" });
  await driver.start();
});

afterAll(async () => {
  await driver?.stop();
  await kubelet?.stop();
});

describe("runtime liveness", () => {
  it("shows a restarting runtime as a condition and an Event, and keeps the sandbox through it", async () => {
    await driver.ensure(desired("live1", 1));
    await until("ready", async () => (await driver.observe("live1"))?.ready);
    const healthy = await until("RuntimeHealthy True", () => {
      const s = sandbox("py-live1");
      return conditionOf(s, "RuntimeHealthy")?.status === "True" && s;
    });
    expect(conditionOf(healthy, "RuntimeHealthy")).toMatchObject({ reason: "RuntimeReady" });
    const podUid = (await podOf("live1")).metadata!.uid;

    kubelet.hold.add((await podOf("live1")).metadata!.name!);
    await runtimeStatus("live1", false, 1);
    const restarting = await until("RuntimeHealthy False", () => {
      const s = sandbox("py-live1");
      return conditionOf(s, "RuntimeHealthy")?.status === "False" && s;
    });
    expect(conditionOf(restarting, "RuntimeHealthy")).toMatchObject({ reason: "RuntimeRestarting", message: expect.stringMatching(/^agent-runtime is being restarted \(CrashLoopBackOff\): its liveness probe failed or it exited, 1 restart; last exit: Error, code 137/) });
    expect(conditionOf(restarting, "Ready")?.status).toBe("False");
    expect((await driver.observe("live1"))?.ready).toBe(false);
    const events = () => kubectlOk(["-n", ns, "get", "events", "--field-selector", "involvedObject.kind=Sandbox,involvedObject.name=py-live1", "-o", "jsonpath={.items[*].reason}"]);
    await until("RuntimeRestarted event", () => events().includes("RuntimeRestarted"));

    await runtimeStatus("live1", true, 1);
    const back = await until("RuntimeHealthy True again", () => {
      const s = sandbox("py-live1");
      return conditionOf(s, "RuntimeHealthy")?.status === "True" && s;
    });
    expect(conditionOf(back, "RuntimeHealthy")).toMatchObject({ reason: "RuntimeRecovered", message: expect.stringMatching(/^agent-runtime ready after 1 restart; last exit: Error, code 137/) });
    expect(conditionOf(back, "Ready")).toMatchObject({ status: "True", reason: "PodReady" });
    // The same Sandbox and the same pod: nothing was recreated.
    expect(back.metadata.uid).toBe(healthy.metadata.uid);
    expect((await podOf("live1")).metadata!.uid).toBe(podUid);
    expect((await driver.observe("live1"))?.ready).toBe(true);
  });
});
