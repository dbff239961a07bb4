// E2B snapshots on Kubernetes are Checkpoint objects (issue 18.4, 11.5) against the real API
// server: the driver (the agent's identity) records each snapshot as a Checkpoint and waits for
// the cluster's checkpoint engine, names the checkpoint on a sandbox made from it, deletes it with
// the snapshot; the agent's Checkpoint controller rebuilds an unhealthy one every minute up to 6
// times, then fails it, and leaves a Failed one without a remote id as the engine wrote it. The
// test plays the checkpoint engine (the node-level component), the named boundary.
import { CoreV1Api, CustomObjectsApi, PatchStrategy, setHeaderOptions } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CheckpointController } from "../../controllers/drivers/kubernetes/checkpoint/checkpoint-controller.ts";
import { MAX_REBUILDS, REBUILD_EVERY_MS, REBUILDS_ANNOTATION } from "../../controllers/drivers/kubernetes/checkpoint/machine.ts";
import { checkpointName, RESTORE_ANNOTATION, SNAPSHOT_ANNOTATION } from "../../controllers/drivers/kubernetes/checkpoint/snapshots.ts";
import { KubernetesDriver, idLabel, type KubeDesiredSandbox } from "../../controllers/drivers/kubernetes/kubernetes-driver.ts";
import { isTerminal } from "../../controllers/drivers/driver.ts";
import { LABEL } from "../../schema/crd/labels.ts";
import { TestKubelet } from "./support/kubelet.ts";
import { freshNamespace, kubeConfig, kubectlOk, until } from "./support/namespace.ts";
import { kubeDesired } from "./support/desired.ts";

let ns: string;
let driver: KubernetesDriver;
let kubelet: TestKubelet;
let controller: CheckpointController;
let skew = 0;
let generation = 1;
let engine: NodeJS.Timeout | undefined;
const custom = () => kubeConfig().makeApiClient(CustomObjectsApi);
const target = (name: string) => ({ group: "agents.kruise.io", version: "v1alpha1", namespace: ns, plural: "checkpoints", name });

interface Cp {
  metadata: { name: string; labels?: Record<string, string>; annotations?: Record<string, string> };
  spec?: Record<string, unknown>;
  status?: { phase?: string; message?: string; checkpointId?: string; conditions?: { type: string; status: string; reason: string; message?: string }[] };
}
const getCp = async (name: string) => (await custom().getNamespacedCustomObject(target(name))) as Cp;
const mergePatch = setHeaderOptions("Content-Type", PatchStrategy.MergePatch);
const setStatus = (name: string, status: object) => custom().patchNamespacedCustomObjectStatus({ ...target(name), body: { status } }, mergePatch);

const desired = (id: string, over: Partial<KubeDesiredSandbox> = {}) => kubeDesired(id, { generation: generation++, claimed: true, ...over });

/** Snapshots the engine never takes (the timeout and failure cases). */
const IGNORED = new Set(["c1-never", "c1-fails"]);

/** The checkpoint engine: every Checkpoint Pending or Creating gets Succeeded with an id. */
async function engineTick(): Promise<void> {
  const list = (await custom().listNamespacedCustomObject({ group: "agents.kruise.io", version: "v1alpha1", namespace: ns, plural: "checkpoints" })) as { items: Cp[] };
  for (const cp of list.items) {
    const phase = cp.status?.phase;
    if (phase && phase !== "Pending" && phase !== "Creating") continue;
    if (cp.metadata.labels?.["test/engine"] === "skip" || IGNORED.has(cp.metadata.annotations?.[SNAPSHOT_ANNOTATION] ?? "")) continue;
    await setStatus(cp.metadata.name, { phase: "Succeeded", checkpointId: `ckpt-${cp.metadata.name}` }).catch(() => {});
  }
}

beforeAll(async () => {
  ns = await freshNamespace("ckpt");
  kubectlOk(["-n", ns, "apply", "-f", "-"], "apiVersion: agents.kruise.io/v1alpha1\nkind: SandboxSet\nmetadata: { name: py }\nspec:\n  replicas: 0\n  template: { spec: { containers: [{ name: sandbox, image: python:3.12 }] } }\n");
  kubelet = new TestKubelet(kubeConfig(), ns);
  await kubelet.start();
  driver = new KubernetesDriver({ kubeConfig: kubeConfig("agent"), namespace: ns, runtimeImage: "ghcr.io/kruise-edge/sandbox-agent:test", checkpointWaitMs: 3000 });
  await driver.start();
  controller = new CheckpointController({ kubeConfig: kubeConfig("agent"), namespace: ns, now: () => Date.now() + skew });
  await controller.start();
  engine = setInterval(() => void engineTick().catch(() => {}), 100);
});

afterAll(async () => {
  clearInterval(engine);
  await controller?.stop();
  await driver?.stop();
  await kubelet?.stop();
});

describe("snapshots as Checkpoints", () => {
  it("records a snapshot as a Checkpoint and answers once the engine reports its id; again is the same one", async () => {
    await driver.ensure(desired("c1"));
    await until("ready", async () => (await driver.observe("c1"))?.ready);
    const ref = await driver.snapshotFs("c1", "team-a/dev:default");
    const name = checkpointName("team-a/dev:default");
    expect(ref).toMatchObject({ id: "team-a/dev:default", sandboxId: "c1", location: `checkpoint:${ns}/${name}/ckpt-${name}` });
    const cp = await getCp(name);
    expect(cp.metadata.annotations?.[SNAPSHOT_ANNOTATION]).toBe("team-a/dev:default");
    expect(cp.metadata.labels?.[LABEL.sandboxName]).toBe("py-c1");
    expect(cp.spec).toMatchObject({ sandboxName: "py-c1", keepRunning: true, persistentContents: ["filesystem"] });
    expect(kubectlOk(["-n", ns, "get", "cp", name, "-o", "jsonpath={.status.phase} {.status.checkpointId}"])).toBe(`Succeeded ckpt-${name}`);
    await driver.snapshotFs("c1", "team-a/dev:default");
    const all = (await custom().listNamespacedCustomObject({ group: "agents.kruise.io", version: "v1alpha1", namespace: ns, plural: "checkpoints" })) as { items: Cp[] };
    expect(all.items.filter((c) => c.metadata.annotations?.[SNAPSHOT_ANNOTATION] === "team-a/dev:default")).toHaveLength(1);
  });

  it("a sandbox from the snapshot names the checkpoint on its Sandbox and pod; an unknown snapshot fails it", async () => {
    await driver.ensure(desired("c2", { restoreFrom: { id: "team-a/dev:default" } }));
    const id = `ckpt-${checkpointName("team-a/dev:default")}`;
    const pod = await until("pod", async () => (await kubeConfig().makeApiClient(CoreV1Api).listNamespacedPod({ namespace: ns, labelSelector: `${LABEL.sandboxId}=${idLabel("c2")}` })).items[0]);
    expect(pod.metadata?.annotations?.[RESTORE_ANNOTATION]).toBe(id);
    expect(JSON.parse(kubectlOk(["-n", ns, "get", "sbx", "py-c2", "-o", "json"])).metadata.annotations[RESTORE_ANNOTATION]).toBe(id);
    const err = await driver.ensure(desired("c3", { restoreFrom: { id: "team-a/nope:default" } })).catch((e: unknown) => e);
    expect(isTerminal(err) && err.reason).toBe("SnapshotNotFound");
  });

  it("a snapshot the engine fails, or never takes, is an error that says so", async () => {
    {
      const slow = await driver.snapshotFs("c1", "c1-never").catch((e: unknown) => e);
      expect(isTerminal(slow) && slow.reason).toBe("CheckpointTimeout");
      expect((slow as Error).message).toMatch(/did not succeed within 3 s \(phase none: is a checkpoint engine running in the cluster\?\)/);
      const failing = driver.snapshotFs("c1", "c1-fails").catch((e: unknown) => e);
      await until("checkpoint made", () => getCp(checkpointName("c1-fails")).catch(() => undefined));
      await setStatus(checkpointName("c1-fails"), { phase: "Failed", message: "node out of disk" });
      const err = await failing;
      expect(isTerminal(err) && err.reason).toBe("CheckpointFailed");
      expect((err as Error).message).toContain("node out of disk");
    }
  });

  it("deleting the snapshot deletes its Checkpoint", async () => {
    await driver.deleteSnapshot({ id: "c1-never" });
    await until("gone", async () => (await getCp(checkpointName("c1-never")).catch(() => undefined)) === undefined);
  });
});

describe("Checkpoint controller", () => {
  async function unhealthy(name: string, annotations: Record<string, string> = {}): Promise<void> {
    kubectlOk(["-n", ns, "apply", "-f", "-"], JSON.stringify({ apiVersion: "agents.kruise.io/v1alpha1", kind: "Checkpoint", metadata: { name, labels: { "test/engine": "skip" }, annotations }, spec: { sandboxName: "py-c1" } }));
    await setStatus(name, { phase: "Succeeded", checkpointId: "remote-1", conditions: [{ type: "Healthy", status: "False", reason: "Corrupted", message: "chunk 7 checksum mismatch", lastTransitionTime: new Date().toISOString() }] });
  }

  it("rebuilds an unhealthy checkpoint at most once a minute", async () => {
    await unhealthy("sick");
    const first = await until("rebuild 1", async () => {
      const c = await getCp("sick");
      // The count is written before the status: wait for both.
      return c.metadata.annotations?.[REBUILDS_ANNOTATION] === "1" && c.status?.phase === "Creating" && c;
    });
    expect(first.status?.phase).toBe("Creating");
    expect(first.status?.conditions?.find((c) => c.type === "Rebuilding")).toMatchObject({ status: "True", reason: "Unhealthy", message: "rebuild 1 of 6: chunk 7 checksum mismatch" });
    // The engine reports it again, still unhealthy: no second rebuild within the minute.
    await setStatus("sick", { phase: "Succeeded" });
    await new Promise((r) => setTimeout(r, 1500));
    expect((await getCp("sick")).metadata.annotations?.[REBUILDS_ANNOTATION]).toBe("1");
    skew = REBUILD_EVERY_MS + 1000;
    try {
      await controller.reconcile("sick");
      expect((await getCp("sick")).metadata.annotations?.[REBUILDS_ANNOTATION]).toBe("2");
    } finally {
      skew = 0;
    }
    await until("CheckpointRebuilding event", () => kubectlOk(["-n", ns, "get", "events", "--field-selector", "involvedObject.kind=Checkpoint,involvedObject.name=sick", "-o", "jsonpath={.items[*].reason}"]).includes("CheckpointRebuilding"));
  });

  it(`fails it with the reason after ${MAX_REBUILDS} rebuilds`, async () => {
    await unhealthy("dead", { [REBUILDS_ANNOTATION]: String(MAX_REBUILDS) });
    const c = await until("failed", async () => {
      const x = await getCp("dead");
      return x.status?.phase === "Failed" && x;
    });
    expect(c.status?.message).toBe("unhealthy after 6 rebuilds: chunk 7 checksum mismatch");
  });

  it("leaves a Failed checkpoint without a remote id as the engine wrote it", async () => {
    kubectlOk(["-n", ns, "apply", "-f", "-"], JSON.stringify({ apiVersion: "agents.kruise.io/v1alpha1", kind: "Checkpoint", metadata: { name: "noid", labels: { "test/engine": "skip" } }, spec: { sandboxName: "py-c1" } }));
    const status = { phase: "Failed", message: "remote store lost the upload", conditions: [{ type: "Healthy", status: "False", reason: "Missing", message: "no remote id", lastTransitionTime: new Date().toISOString() }] };
    await setStatus("noid", status);
    await controller.reconcile("noid");
    await new Promise((r) => setTimeout(r, 500));
    const c = await getCp("noid");
    expect(c.status).toMatchObject({ phase: "Failed", message: "remote store lost the upload" });
    expect(c.status?.checkpointId).toBeUndefined();
    expect(c.metadata.annotations?.[REBUILDS_ANNOTATION]).toBeUndefined();
  });
});
