// The kubernetes driver against a real API server, with the agent's least-privilege identity and
// the test playing the kubelet: pool members, claim, Stop and Freeze pause, failures as conditions
// and Events, restart without duplicates or orphans, and what kubectl shows of all of it.
import { CoreV1Api, type V1Pod } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LABEL } from "../../schema/crd/labels.ts";
import { createRuntime } from "../../controllers/runtime/runtime.ts";
import { HostView } from "../../controllers/runtime/host-view.ts";
import { isTerminal, TerminalError } from "../../controllers/drivers/driver.ts";
import { KubernetesDriver, idLabel, type KubeDesiredSandbox, type SandboxRequest } from "../../controllers/drivers/kubernetes/kubernetes-driver.ts";
import { TestKubelet } from "./support/kubelet.ts";
import { freshNamespace, kubeConfig, kubectl, kubectlOk, table, until } from "./support/namespace.ts";

let ns: string;
let driver: KubernetesDriver;
let kubelet: TestKubelet;
let core: CoreV1Api;
let generation = 1;

const RUNTIME_IMAGE = "ghcr.io/kruise-edge/sandbox-agent:test";

/** What the driver would send the edge (the proposed `requests` message). */
const requests: SandboxRequest[] = [];

function newDriver(): KubernetesDriver {
  return new KubernetesDriver({ kubeConfig: kubeConfig("agent"), namespace: ns, runtimeImage: RUNTIME_IMAGE, onRequest: (r) => requests.push(r) });
}

function desired(id: string, over: Partial<KubeDesiredSandbox> = {}): KubeDesiredSandbox {
  return {
    id,
    generation: generation++,
    template: "python",
    state: "Running",
    pauseStrategy: "Stop",
    resources: { cpuCount: 1, memoryMB: 512 },
    allowInternetAccess: true,
    pool: "python",
    claimed: false,
    ...over,
  };
}

async function pods(): Promise<V1Pod[]> {
  return (await core.listNamespacedPod({ namespace: ns })).items;
}

function podOf(list: V1Pod[], id: string): V1Pod[] {
  return list.filter((p) => p.metadata?.labels?.[LABEL.sandboxId] === idLabel(id));
}

async function readyObservation(id: string) {
  return until(`${id} ready`, async () => {
    const o = await driver.observe(id);
    return o?.ready ? o : undefined;
  });
}

beforeAll(async () => {
  ns = await freshNamespace("driver");
  core = kubeConfig().makeApiClient(CoreV1Api);
  kubectlOk(["-n", ns, "apply", "-f", "-"], `
apiVersion: agents.kruise.io/v1alpha1
kind: SandboxSet
metadata: { name: python }
spec:
  replicas: 3
  template:
    metadata: { labels: { app: python } }
    spec:
      containers: [{ name: sandbox, image: python:3.12 }]
  volumeClaimTemplates:
    - metadata: { name: workspace }
      spec: { resources: { requests: { storage: 1Gi } } }
---
apiVersion: agents.kruise.io/v1alpha1
kind: SandboxSet
metadata: { name: broken }
spec:
  replicas: 0
  template:
    spec:
      containers: [{ name: sandbox, image: registry.example/pull-error:1 }]
---
apiVersion: agents.kruise.io/v1alpha1
kind: SandboxSet
metadata: { name: nowhere }
spec:
  template:
    spec:
      nodeSelector: { sandbox.test/unschedulable: "yes" }
      containers: [{ name: sandbox, image: python:3.12 }]
`);
  // The test kubelet's unschedulable node label is the operator's to allow (pod-policy, review 25 M5).
  kubectlOk(["-n", ns, "create", "configmap", "sandbox-injection-config-user", `--from-literal=pod-policy=${JSON.stringify({ nodeSelectorKeys: ["sandbox.test/unschedulable"] })}`]);
  kubelet = new TestKubelet(kubeConfig(), ns);
  await kubelet.start();
  driver = newDriver();
  await driver.start();
  await until("the pod-policy read", () => driver.injection.current()["pod-policy"]?.nodeSelectorKeys.includes("sandbox.test/unschedulable"));
});

afterAll(async () => {
  await driver?.stop();
  await kubelet?.stop();
});

describe("kubernetes driver", () => {
  it("creates pool members as Sandboxes owning Pods and PVCs, with the pool's labels", async () => {
    for (const id of ["poola", "poolb", "poolc"]) await driver.ensure(desired(id));
    const list = await pods();
    expect(list).toHaveLength(3);
    for (const pod of list) {
      const labels = pod.metadata!.labels!;
      expect(labels[LABEL.pool]).toBe("python");
      expect(labels[LABEL.template]).toBe("python");
      expect(labels[LABEL.claimed]).toBe("false");
      expect(labels[LABEL.templateHash]).toMatch(/^[0-9a-f]{10}$/);
      expect(labels[LABEL.sandboxId]).toMatch(/^pool[abc]$/);
      expect(labels.app).toBe("python"); // the template's own labels stay
      expect(pod.metadata!.ownerReferences).toEqual([expect.objectContaining({ kind: "Sandbox", name: pod.metadata!.name, controller: true })]);
      const containers = pod.spec!.containers.map((c) => c.name);
      expect(containers).toEqual(["sandbox", "agent-runtime"]);
      expect(pod.spec!.containers[0]!.resources!.limits).toEqual({ cpu: "1", memory: "512Mi" });
      expect(pod.spec!.volumes).toContainEqual({ name: "workspace", persistentVolumeClaim: { claimName: `workspace-${pod.metadata!.name}` } });
    }
    const pvcs = (await core.listNamespacedPersistentVolumeClaim({ namespace: ns })).items;
    expect(pvcs.map((p) => p.metadata!.name).sort()).toEqual(["workspace-python-poola", "workspace-python-poolb", "workspace-python-poolc"]);
    expect(pvcs[0]!.spec!.accessModes).toEqual(["ReadWriteOnce"]);

    const sbx = JSON.parse(kubectlOk(["-n", ns, "get", "sbx", "python-poola", "-o", "json"]));
    expect(sbx.metadata.ownerReferences).toEqual([expect.objectContaining({ kind: "SandboxSet", name: "python" })]);
    expect(sbx.metadata.finalizers).toEqual(["agents.kruise.io/sandbox"]);
  });

  it("reports readiness and the pod IP once the kubelet marks the pod Ready", async () => {
    const obs = await readyObservation("poola");
    expect(obs.phase).toBe("Running");
    expect(obs.endpoint).toMatch(/^http:\/\/10\.244\.\d+\.\d+:49983$/);
    await readyObservation("poolb");
    await readyObservation("poolc");
    const sbs = await until("sbs status", () => {
      const rows = table(kubectlOk(["-n", ns, "get", "sbs", "python"]));
      return rows[0]?.AVAILABLE === "3" ? rows[0] : undefined;
    });
    expect(sbs).toMatchObject({ NAME: "python", DESIRED: "3", REPLICAS: "3", AVAILABLE: "3", UPDATED: "3" });
    const sbx = await until("sbx status", () => {
      const s = JSON.parse(kubectlOk(["-n", ns, "get", "sbx", "python-poola", "-o", "json"]));
      return s.status?.phase === "Running" ? s : undefined;
    });
    expect(sbx.status.conditions).toContainEqual(expect.objectContaining({ type: "Ready", status: "True", reason: "PodReady" }));
    expect(sbx.status.sandboxIp).toBe(new URL(obs.endpoint!).hostname);
  });

  it("claim marks the sandbox and pod claimed, leaves the pool, and the pool counts one fewer", async () => {
    // A claim's labels (E2B metadata label:<k>) go on the Sandbox and its Pod; reserved keys never.
    const labels = { "team.example/owner": "alice", purpose: "eval", [LABEL.pool]: "forged", "e2b.agents.kruise.io/x": "y" };
    const claimedFrom = Date.now();
    const claimed = await driver.ensure(desired("poola", { claimed: true, labels }));
    const claimedBy = Date.now();
    // The claim does not wait for the API server: the sandbox is ready at once, the labels follow.
    expect(claimed).toMatchObject({ phase: "Running", ready: true });
    const sbx = await until("sandbox relabelled", () => {
      const s = JSON.parse(kubectlOk(["-n", ns, "get", "sbx", "python-poola", "-o", "json"]));
      return s.metadata.labels[LABEL.claimed] === "true" ? s : undefined;
    });
    expect(sbx.metadata.labels[LABEL.claimed]).toBe("true");
    expect(sbx.metadata.ownerReferences ?? []).toEqual([]);
    // The claim's time, not the write's: the relabel trails the claim (claim-writes.ts).
    const claimedAt = Date.parse(sbx.metadata.annotations["agents.kruise.io/claim-timestamp"]);
    expect(claimedAt).toBeGreaterThanOrEqual(claimedFrom);
    expect(claimedAt).toBeLessThanOrEqual(claimedBy);
    expect(sbx.metadata.labels).toMatchObject({ "team.example/owner": "alice", purpose: "eval", [LABEL.pool]: "python" });
    expect(sbx.metadata.labels["e2b.agents.kruise.io/x"]).toBeUndefined();
    const pod = await until("pod relabelled", async () => {
      const p = podOf(await pods(), "poola")[0];
      return p?.metadata?.labels?.[LABEL.claimed] === "true" ? p : undefined;
    });
    expect(pod.metadata!.labels).toMatchObject({ "team.example/owner": "alice", purpose: "eval", [LABEL.pool]: "python" });
    expect(kubectlOk(["-n", ns, "get", "pods", "-l", "purpose=eval", "-o", "name"]).trim()).toBe("pod/python-poola");
    await until("pool replicas 2", () => table(kubectlOk(["-n", ns, "get", "sbs", "python"]))[0]?.REPLICAS === "2");
    // The pool owner (the edge's PoolDO) refills with a new member; the set is whole again.
    await driver.ensure(desired("poold"));
    await readyObservation("poold");
    await until("pool available 3", () => table(kubectlOk(["-n", ns, "get", "sbs", "python"]))[0]?.AVAILABLE === "3");
    // The claimed sandbox kept its pod: claiming never restarts it.
    expect(podOf(await pods(), "poola")).toHaveLength(1);
  });

  it("kubectl get sbx shows status, claimed, shutdown and pause times and age", async () => {
    const out = kubectlOk(["-n", ns, "get", "sbx"]);
    expect(out.split("\n")[0]!.split(/\s+/).filter(Boolean)).toEqual(["NAME", "STATUS", "CLAIMED", "SHUTDOWN_TIME", "PAUSE_TIME", "AGE"]);
    const rows = Object.fromEntries(table(out).map((r) => [r.NAME, r]));
    expect(rows["python-poola"]).toMatchObject({ STATUS: "Running", CLAIMED: "true" });
    expect(rows["python-poolb"]).toMatchObject({ STATUS: "Running", CLAIMED: "false" });
    const wide = kubectlOk(["-n", ns, "get", "sbx", "-o", "wide"]).split("\n")[0]!;
    expect(wide).toMatch(/RECYCLED\s+MESSAGE/);
  });

  it("names longer than 63 characters work: objects are found by the sandbox-id label", async () => {
    const id = "x".repeat(64); // the protocol's longest id: the label holds a hash, the annotation the id
    await driver.ensure(desired(id, { pool: undefined, claimed: true, template: "python" }));
    const obs = await readyObservation(id);
    expect(obs.phase).toBe("Running");
    const [pod] = podOf(await pods(), id);
    expect(pod!.metadata!.name!.length).toBeGreaterThan(63);
    expect((await driver.list()).map((o) => o.id)).toContain(id);
    await driver.destroy(id);
    expect(podOf(await pods(), id)).toHaveLength(0);
  });

  it("Stop pause deletes the pod and keeps the PVC; resume recreates the pod on the same PVC", async () => {
    const before = podOf(await pods(), "poola")[0]!;
    const paused = await driver.ensure(desired("poola", { claimed: true, state: "Paused", pauseStrategy: "Stop" }));
    expect(paused.phase).toBe("Stopped");
    expect(podOf(await pods(), "poola")).toHaveLength(0);
    const pvc = await core.readNamespacedPersistentVolumeClaim({ name: "workspace-python-poola", namespace: ns });
    expect(pvc.metadata!.deletionTimestamp).toBeUndefined();
    const sbx = await until("sbx Paused", () => {
      const s = JSON.parse(kubectlOk(["-n", ns, "get", "sbx", "python-poola", "-o", "json"]));
      return s.status?.phase === "Paused" ? s : undefined;
    });
    expect(sbx.spec.paused).toBe(true);
    expect(sbx.status.conditions).toContainEqual(expect.objectContaining({ type: "SandboxPaused", status: "True", reason: "StopPauseSucceed" }));
    expect(sbx.status.conditions).toContainEqual(expect.objectContaining({ type: "Ready", status: "False", reason: "Paused" }));

    await driver.ensure(desired("poola", { claimed: true, state: "Running" }));
    const obs = await readyObservation("poola");
    const after = podOf(await pods(), "poola")[0]!;
    expect(after.metadata!.uid).not.toBe(before.metadata!.uid);
    expect(after.spec!.volumes).toContainEqual({ name: "workspace", persistentVolumeClaim: { claimName: "workspace-python-poola" } });
    expect((await core.readNamespacedPersistentVolumeClaim({ name: "workspace-python-poola", namespace: ns })).metadata!.uid).toBe(pvc.metadata!.uid);
    expect(obs.endpoint).toMatch(/:49983$/);
  });

  it("Freeze pause goes through the sandbox's agent-runtime and keeps the pod, with the claim's token an earlier agent's /init set", async () => {
    // The runtime holds the claim's token, set by an /init this driver never made (an agent
    // restart): the driver's first guess is the pod's own token, refused; the claim's is tried.
    const runtime = createRuntime({ single: { view: new HostView(), options: { accessToken: "claim-token" } } });
    const server = await runtime.listen({ port: 0, host: "127.0.0.1" });
    const port = (server.address() as { port: number }).port;
    try {
      await driver.ensure(desired("freezer", { claimed: true, pool: undefined, accessToken: "claim-token" }));
      await readyObservation("freezer");
      const [pod] = podOf(await pods(), "freezer");
      // Pod IPs are not routable here, so point the driver at a real runtime on loopback.
      await core.patchNamespacedPod(
        { name: pod!.metadata!.name!, namespace: ns, body: { metadata: { annotations: { "agents.kruise.io/runtime-url": `http://127.0.0.1:${port}` } } } },
        (await import("@kubernetes/client-node")).setHeaderOptions("Content-Type", "application/merge-patch+json"),
      );
      await until("annotation seen", async () => (await driver.observe("freezer"))?.endpoint === `http://127.0.0.1:${port}`);
      const frozen = await driver.ensure(desired("freezer", { claimed: true, pool: undefined, accessToken: "claim-token", state: "Paused", pauseStrategy: "Freeze" }));
      expect(frozen.phase).toBe("Paused");
      expect(podOf(await pods(), "freezer")[0]!.metadata!.uid).toBe(pod!.metadata!.uid);
      const sbx = await until("sbx frozen", () => {
        const s = JSON.parse(kubectlOk(["-n", ns, "get", "sbx", "python-freezer", "-o", "json"]));
        return s.status?.phase === "Paused" ? s : undefined;
      });
      expect(sbx.status.conditions).toContainEqual(expect.objectContaining({ type: "SandboxPaused", reason: "FreezePauseSucceed" }));
      const thawed = await driver.ensure(desired("freezer", { claimed: true, pool: undefined, accessToken: "claim-token", state: "Running" }));
      expect(thawed.phase).toBe("Running");
      expect(podOf(await pods(), "freezer")[0]!.metadata!.uid).toBe(pod!.metadata!.uid);
    } finally {
      await driver.destroy("freezer");
      await runtime.close();
    }
  });

  it("image pull errors and scheduling failures become Ready reasons and Kubernetes Events", async () => {
    await driver.ensure(desired("pullfail", { pool: "broken", template: "broken" }));
    const pull = await until("pull failure", async () => {
      const o = await driver.observe("pullfail");
      return o?.reason === "ImagePullFailed" ? o : undefined;
    });
    expect(pull.phase).toBe("Pending");
    expect(pull.message).toContain("ErrImagePull");

    await driver.ensure(desired("nonode", { pool: "nowhere", template: "nowhere" }));
    await until("unschedulable", async () => (await driver.observe("nonode"))?.reason === "Unschedulable");

    const sbx = await until("sbx condition", () => {
      const s = JSON.parse(kubectlOk(["-n", ns, "get", "sbx", "broken-pullfail", "-o", "json"]));
      return s.status?.conditions?.some((c: { reason: string }) => c.reason === "ImagePullFailed") ? s : undefined;
    });
    expect(sbx.status.conditions).toContainEqual(expect.objectContaining({ type: "Ready", status: "False", reason: "ImagePullFailed" }));
    const events = await until("events", () => {
      const list = JSON.parse(kubectlOk(["-n", ns, "get", "events", "-o", "json"])).items as { reason: string; type: string; involvedObject: { name: string; kind: string } }[];
      const pullEv = list.find((e) => e.reason === "ImagePullFailed" && e.involvedObject.name === "broken-pullfail");
      const schedEv = list.find((e) => e.reason === "FailedScheduling" && e.involvedObject.name === "nowhere-nonode");
      return pullEv && schedEv ? { pullEv, schedEv } : undefined;
    });
    expect(events.pullEv).toMatchObject({ type: "Warning", involvedObject: { kind: "Sandbox" } });
    expect(events.schedEv.type).toBe("Warning");
    await driver.destroy("pullfail");
    await driver.destroy("nonode");
  });

  it("a refused pod (quota) is a ReconcileError on the Sandbox while it is retried, not a failure; a later pass creates it", async () => {
    kubectlOk(["-n", ns, "apply", "-f", "-"], `
apiVersion: v1
kind: ResourceQuota
metadata: { name: no-pods }
spec: { hard: { pods: "0" } }
`);
    // No controller-manager here: the test writes the quota's status as its controller would
    // (admission enforces only a quota with one), then waits until admission has seen it.
    kubectlOk(["-n", ns, "patch", "resourcequota", "no-pods", "--subresource=status", "--type=merge", "-p", '{"status":{"hard":{"pods":"0"},"used":{"pods":"0"}}}']);
    await until("the quota refusing pods", () => kubectl(["-n", ns, "run", "quota-probe", "--image=python:3.12", "--dry-run=server"]).status !== 0);
    const d = desired("quota1");
    try {
      const err = await driver.ensure(d).then(() => undefined, (e: unknown) => e);
      expect(err).toBeInstanceOf(Error);
      expect(isTerminal(err)).toBe(false);
      const sbx = JSON.parse(kubectlOk(["-n", ns, "get", "sbx", "python-quota1", "-o", "json"]));
      expect(sbx.status.conditions).toContainEqual(expect.objectContaining({ type: "Ready", status: "False", reason: "ReconcileError", message: expect.stringMatching(/forbidden|quota/i) }));
      expect((err as Error).message).toBe(sbx.status.conditions.find((c: { type: string }) => c.type === "Ready").message);
      await until("a ReconcileError event", () =>
        (JSON.parse(kubectlOk(["-n", ns, "get", "events", "-o", "json"])).items as { reason: string; type: string; involvedObject: { name: string } }[]).some(
          (e) => e.reason === "ReconcileError" && e.type === "Warning" && e.involvedObject.name === "python-quota1",
        ),
      );
      kubectlOk(["-n", ns, "delete", "resourcequota", "no-pods"]);
      // The retry (the reconciler's next pass) succeeds once the API server takes the pod.
      await until("the pod, once the quota is gone", () => driver.ensure(d).then(() => true));
      const status = await until("Ready no longer ReconcileError", () => {
        const s = JSON.parse(kubectlOk(["-n", ns, "get", "sbx", "python-quota1", "-o", "json"]));
        const ready = s.status?.conditions?.find((c: { type: string }) => c.type === "Ready");
        return ready && ready.reason !== "ReconcileError" ? ready : undefined;
      });
      expect(status.reason).not.toBe("ReconcileError");
      expect(podOf(await pods(), "quota1")).toHaveLength(1);
    } finally {
      kubectl(["-n", ns, "delete", "resourcequota", "no-pods", "--ignore-not-found"]);
      await driver.destroy("quota1");
    }
  });

  it("a team that is no namespace name is a TerminalError (InvalidSpec)", async () => {
    const err = await driver.ensure(desired("badns", { namespace: "Not_A_Namespace", claimed: true })).then(() => undefined, (e: unknown) => e);
    expect(err).toBeInstanceOf(TerminalError);
    expect(err).toMatchObject({ reason: "InvalidSpec", message: expect.stringContaining("Not_A_Namespace") });
  });

  it("a restarted driver adopts every sandbox without duplicates and reports orphans for clean-up", async () => {
    const before = await pods();
    await driver.stop();
    // A pod left behind by a crash between pod create and Sandbox create.
    await core.createNamespacedPod({
      namespace: ns,
      body: { metadata: { name: "orphan-pod", labels: { [LABEL.sandboxId]: "orphan", [LABEL.createdBy]: "sandbox" } }, spec: { containers: [{ name: "c", image: "busybox" }] } },
    });
    driver = newDriver();
    await driver.start();
    const seen = Object.fromEntries((await driver.list()).map((o) => [o.id, o]));
    expect(Object.keys(seen).sort()).toEqual(["orphan", "poola", "poolb", "poolc", "poold"]);
    expect(seen.orphan!.phase).toBe("Failed");
    expect(seen.poolb!.phase).toBe("Running");
    // Re-applying every intent changes nothing; destroying the orphan leaves no trace.
    for (const id of ["poolb", "poolc", "poold"]) await driver.ensure(desired(id));
    await driver.ensure(desired("poola", { claimed: true }));
    await driver.destroy("orphan");
    await until("orphan gone", async () => podOf(await pods(), "orphan").length === 0);
    const after = await pods();
    expect(after.map((p) => p.metadata!.uid).sort()).toEqual(before.map((p) => p.metadata!.uid).sort());
  });

  it("kubectl patch of spec.paused becomes a request for the edge, and the edge's answer pauses it", async () => {
    // The restart above makes the driver's first look at each Sandbox (its resync requests, after
    // every watcher has listed) run late: let it finish, so only this patch's requests are counted.
    await driver.idle();
    requests.length = 0;
    kubectlOk(["-n", ns, "patch", "sbx", "python-poolb", "--type", "merge", "-p", '{"spec":{"paused":true}}']);
    const shown = JSON.parse(kubectlOk(["-n", ns, "get", "sbx", "python-poolb", "-o", "json"])).metadata.annotations["agents.kruise.io/edge-generation"];
    const req = await until("pause request", () => requests.find((r) => r.sandboxId === "poolb"));
    // The edge generation the edited Sandbox showed (not metadata.generation): the edge refuses stale edits by it.
    expect(req).toMatchObject({ action: "pause", generation: Number(shown) });
    // The agent does not act alone: the pod runs until the edge sends the pause intent.
    expect(podOf(await pods(), "poolb")).toHaveLength(1);
    await driver.ensure(desired("poolb", { state: "Paused", pauseStrategy: "Stop" }));
    expect(podOf(await pods(), "poolb")).toHaveLength(0);
    // Once the edge agrees, nothing more is asked.
    await new Promise((r) => setTimeout(r, 200));
    expect(requests.filter((r) => r.sandboxId === "poolb")).toHaveLength(1);
  });

  it("kubectl delete sbx becomes a kill request; the finalizer keeps the sandbox until the edge deletes it", async () => {
    requests.length = 0;
    const del = kubectl(["-n", ns, "delete", "sbx", "python-poold", "--wait=false"]);
    expect(del.status).toBe(0);
    await until("kill request", () => requests.find((r) => r.sandboxId === "poold" && r.action === "kill"));
    expect(podOf(await pods(), "poold")).toHaveLength(1);
    await driver.destroy("poold");
    await until("sbx gone", () => !kubectlOk(["-n", ns, "get", "sbx", "-o", "name"]).includes("python-poold"));
    expect(podOf(await pods(), "poold")).toHaveLength(0);
  });

  it("destroy removes the pod, the PVCs and the Sandbox (finalizer released)", async () => {
    await driver.destroy("poolc");
    expect(podOf(await pods(), "poolc")).toHaveLength(0);
    // Deleted; with no controller-manager here the pvc-protection finalizer is never released, so
    // the claim lingers marked for deletion (a real cluster removes it once no pod uses it).
    const pvc = (await core.listNamespacedPersistentVolumeClaim({ namespace: ns })).items.find((p) => p.metadata!.name === "workspace-python-poolc");
    expect(pvc === undefined || pvc.metadata!.deletionTimestamp !== undefined).toBe(true);
    await until("sbx gone", () => !kubectlOk(["-n", ns, "get", "sbx", "-o", "name"]).includes("python-poolc"));
    expect(await driver.observe("poolc")).toBeUndefined();
  });
});
