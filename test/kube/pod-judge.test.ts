// Every sandbox pod the agent makes is judged, governed or not (review 25 H4, M5, L4, M2): the agent
// creates pods with its own rights from a template that anyone who may write a SandboxSet, or
// edit a Sandbox's `spec.template`, chose. Refused means: no pod, no PVC, a Ready=False
// UnsafePodSpec condition and Warning Events, as kubectl shows them. No egress rule or
// TrafficPolicy governs any sandbox here.
import { readFileSync } from "node:fs";
import { CoreV1Api, CustomObjectsApi, PatchStrategy, setHeaderOptions } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { KubernetesDriver, type KubeDesiredSandbox } from "../../controllers/drivers/kubernetes/kubernetes-driver.ts";
import { LABEL } from "../../schema/crd/labels.ts";
import { RESTORE_ANNOTATION, RESTORE_PENDING_ANNOTATION, SNAPSHOT_ANNOTATION } from "../../controllers/drivers/kubernetes/checkpoint/snapshots.ts";
import { TestKubelet } from "./support/kubelet.ts";
import { freshNamespace, kubeConfig, kubectlOk, until } from "./support/namespace.ts";

let ns: string;
let driver: KubernetesDriver;
let kubelet: TestKubelet;
let core: CoreV1Api;

function desired(id: string, pool: string, over: Partial<KubeDesiredSandbox> = {}): KubeDesiredSandbox {
  return { id, generation: 1, template: pool, pool, namespace: ns, state: "Running", pauseStrategy: "Stop", resources: { cpuCount: 1, memoryMB: 512 }, allowInternetAccess: true, claimed: true, ...over };
}
const set = (name: string, spec: string) => kubectlOk(["-n", ns, "apply", "-f", "-"], `apiVersion: agents.kruise.io/v1alpha1\nkind: SandboxSet\nmetadata: { name: ${name} }\nspec:\n  replicas: 0\n${spec}`);
const podsOf = async (id: string) => (await core.listNamespacedPod({ namespace: ns, labelSelector: `${LABEL.sandboxId}=${id}` })).items.filter((p) => !p.metadata?.deletionTimestamp);
const ready = (sandbox: string) =>
  (JSON.parse(kubectlOk(["-n", ns, "get", "sandbox", sandbox, "-o", "json"])) as { status?: { conditions?: { type: string; status: string; reason: string; message: string }[] } }).status?.conditions?.find((c) => c.type === "Ready");
const warnings = (kind: string, name: string) => kubectlOk(["-n", ns, "get", "events", "--field-selector", `involvedObject.kind=${kind},involvedObject.name=${name},reason=UnsafePodSpec,type=Warning`, "-o", "jsonpath={.items[*].message}"]);

/** Refused: the ensure fails UnsafePodSpec, no pod exists, and the condition names each field. */
async function refused(d: KubeDesiredSandbox, fields: string[]): Promise<void> {
  await expect(driver.ensure(d)).rejects.toMatchObject({ reason: "UnsafePodSpec" });
  expect(await podsOf(d.id)).toHaveLength(0);
  const sandbox = `${d.pool}-${d.id}`;
  expect(ready(sandbox)).toMatchObject({ status: "False", reason: "UnsafePodSpec" });
  for (const f of fields) expect(ready(sandbox)!.message).toContain(f);
  expect(warnings("Sandbox", sandbox)).toContain(fields[0]);
}

beforeAll(async () => {
  ns = await freshNamespace("judge");
  core = kubeConfig().makeApiClient(CoreV1Api);
  kubectlOk(["-n", ns, "apply", "-f", "-"], readFileSync("k8s/injection-config.yaml", "utf8").replace("namespace: sandbox-system", `namespace: ${ns}`));
  set("plain", "  template: { spec: { containers: [{ name: sandbox, image: python:3.12 }] } }\n");
  // Node root for whoever may write a SandboxSet (review 25 H4 (a)).
  set("noderoot", "  template: { spec: { hostPID: true, hostNetwork: true, serviceAccountName: deployer, automountServiceAccountToken: true, volumes: [{ name: root, hostPath: { path: / } }], containers: [{ name: sandbox, image: python:3.12, securityContext: { privileged: true } }] } }\n");
  // Another pod's traffic Secret (CA key, secret values, profile literals), and no seccomp filter (H4 (b)).
  set("peek", "  template: { spec: { securityContext: { seccompProfile: { type: Unconfined } }, volumes: [{ name: peek, secret: { secretName: plain-other-traffic } }], containers: [{ name: sandbox, image: python:3.12, env: [{ name: L7, valueFrom: { secretKeyRef: { name: plain-other-traffic, key: l7.json } } }] }] } }\n");
  // The operator's placement fields (M5).
  set("pinned", "  template: { spec: { nodeName: judge-node, containers: [{ name: sandbox, image: python:3.12 }] } }\n");
  set("placed", "  template: { spec: { priorityClassName: platform-critical, runtimeClassName: runc, containers: [{ name: sandbox, image: python:3.12 }] } }\n");
  // A claim bound to a PersistentVolume by name, or filled from another namespace (L4).
  set("claims", "  template: { spec: { containers: [{ name: sandbox, image: python:3.12 }] } }\n  volumeClaimTemplates:\n    - metadata: { name: data }\n      spec: { volumeName: team-b-data, accessModes: [ReadWriteOnce], resources: { requests: { storage: 1Gi } } }\n    - metadata: { name: copy }\n      spec: { accessModes: [ReadWriteOnce], resources: { requests: { storage: 1Gi } }, dataSourceRef: { apiGroup: snapshot.storage.k8s.io, kind: VolumeSnapshot, name: s, namespace: team-b } }\n");
  // Placement (M5): every taint tolerated, another team's dedicated nodes, the control plane by
  // node affinity, and co-location with another namespace's pods.
  set("elsewhere", "  template: { spec: { tolerations: [{ operator: Exists }], nodeSelector: { tenant: team-b }, affinity: { nodeAffinity: { requiredDuringSchedulingIgnoredDuringExecution: { nodeSelectorTerms: [{ matchExpressions: [{ key: node-role.kubernetes.io/control-plane, operator: Exists }] }] } }, podAffinity: { requiredDuringSchedulingIgnoredDuringExecution: [{ topologyKey: kubernetes.io/hostname, namespaceSelector: {}, labelSelector: { matchLabels: { app: db } } }] } }, containers: [{ name: sandbox, image: python:3.12 }] } }\n");
  set("dedicated", "  template: { spec: { tolerations: [{ key: dedicated, operator: Equal, value: sandboxes, effect: NoSchedule }], nodeSelector: { pool: sandboxes }, containers: [{ name: sandbox, image: python:3.12 }] } }\n");
  // A second container with no limits: what the quota counts would not bound it (M2).
  set("unbounded", "  template: { spec: { containers: [{ name: sandbox, image: python:3.12, resources: { limits: { cpu: '1', memory: 1Gi } } }, { name: helper, image: python:3.12, resources: { requests: { cpu: '1' } } }] } }\n");
  // A second container whose limits are zero: the kubelet reads that as no limit (review 26 H3).
  set("zero", "  template: { spec: { containers: [{ name: sandbox, image: python:3.12, resources: { limits: { cpu: '1', memory: 1Gi } } }, { name: helper, image: python:3.12, resources: { limits: { cpu: '0', memory: 0Gi } } }] } }\n");
  // A second scheduler, which may ignore taints (review 26 M7).
  set("scheduled", "  template: { spec: { schedulerName: bin-packer, containers: [{ name: sandbox, image: python:3.12 }] } }\n");
  // Resources the quota does not count: a GPU, hugepages (node memory outside memory), a DRA claim (review 26 M7).
  set("gpu", "  template: { spec: { resourceClaims: [{ name: accel, resourceClaimTemplateName: accel }], containers: [{ name: sandbox, image: python:3.12, resources: { limits: { cpu: '1', memory: 1Gi, nvidia.com/gpu: '1', hugepages-2Mi: 64Mi }, claims: [{ name: accel }] } }] } }\n");
  // Pod-level requests the scheduler reserves beside 1-core containers (review 27 M2). A stated
  // overhead (L5) is unit-tested only: this cluster's RuntimeClass admission refuses it anyway.
  set("podlevel", "  template: { spec: { resources: { requests: { cpu: '64', memory: 256Gi } }, containers: [{ name: sandbox, image: python:3.12, resources: { limits: { cpu: '1', memory: 1Gi } } }] } }\n");
  // Its own agent-runtime, stating no resources: sized by the injection config, not counted (M2).
  set("ownrt", "  template: { spec: { containers: [{ name: sandbox, image: python:3.12 }, { name: agent-runtime, image: my-runtime:1 }] } }\n");
  kubelet = new TestKubelet(kubeConfig(), ns);
  await kubelet.start();
  driver = new KubernetesDriver({ kubeConfig: kubeConfig("agent"), namespace: ns, runtimeImage: "ghcr.io/kruise-edge/sandbox-agent:test" });
  await driver.start();
  await driver.setSecurityProfiles([]);
  await until("sets and injection config", () => ["plain", "noderoot", "peek", "pinned", "placed", "claims", "unbounded", "zero", "ownrt", "elsewhere", "dedicated", "scheduled", "gpu", "podlevel"].every((s) => driver.sandboxSets.get(s)) && driver.injection.current()["traffic-proxy"]);
});

afterAll(async () => {
  await driver?.stop();
  await kubelet?.stop();
});

describe("every sandbox pod is judged, governed or not", () => {
  it("a template asking for the node (host namespaces, privileged, hostPath /, a service account's token) is refused with nothing governing it", async () => {
    await refused(desired("root1", "noderoot"), ["hostNetwork", "hostPID", 'containers "sandbox": privileged', 'hostPath "/"', 'serviceAccountName "deployer" with automountServiceAccountToken']);
    expect(warnings("SandboxSet", "noderoot")).toContain("hostNetwork");
  });

  it("a template mounting or reading another pod's traffic Secret, or asking for no seccomp filter, is refused", async () => {
    await refused(desired("peek1", "peek"), ['Secret "plain-other-traffic" is the platform\'s', 'env "L7" reads Secret "plain-other-traffic"', "seccompProfile Unconfined"]);
  });

  it("a kubectl edit of a running Sandbox's spec.template: its next pod is judged, not made", async () => {
    await driver.ensure(desired("edit1", "plain"));
    expect(await podsOf("edit1")).toHaveLength(1);
    const patch = { spec: { template: { spec: { hostPID: true, containers: [{ name: "sandbox", image: "python:3.12", securityContext: { privileged: true } }] } } } };
    kubectlOk(["-n", ns, "patch", "sandbox", "plain-edit1", "--type", "merge", "-p", JSON.stringify(patch)]);
    await until("the edit seen", () => driver.sandboxes.get("plain-edit1")?.spec.template?.spec?.hostPID === true);
    kubectlOk(["-n", ns, "delete", "pod", "plain-edit1", "--grace-period=0", "--force"]);
    await until("the pod gone", () => !driver.pods.get("plain-edit1"));
    await refused(desired("edit1", "plain"), ["hostPID", 'containers "sandbox": privileged']);
  });

  it("nodeName, priorityClassName and runtimeClassName are the operator's: refused unless the injection config's pod-policy allows them", async () => {
    await refused(desired("pin1", "pinned"), ['nodeName "judge-node"']);
    await refused(desired("place1", "placed"), ['priorityClassName "platform-critical"', 'runtimeClassName "runc"']);
    kubectlOk(["-n", ns, "create", "configmap", "sandbox-injection-config-user", `--from-literal=pod-policy=${JSON.stringify({ allow: ["nodeName"] })}`]);
    await until("the pod-policy read", () => driver.injection.current()["pod-policy"]?.allow.includes("nodeName"));
    await driver.ensure(desired("pin2", "pinned"));
    expect((await podsOf("pin2"))[0]!.spec!.nodeName).toBe("judge-node");
    await refused(desired("place2", "placed"), ['priorityClassName "platform-critical"']);
  });

  it("a template with a container the quota cannot count (no CPU or memory limit) is refused: its pods are not made on an older, smaller count", async () => {
    await refused(desired("unb1", "unbounded"), ['container "helper": no cpu or memory limit']);
    expect(warnings("SandboxSet", "unbounded")).toContain('container "helper"');
  });

  it("a container whose limits are zero (none to the kubelet) is refused, not counted at 0", async () => {
    await refused(desired("zero1", "zero"), ['container "helper": no cpu or memory limit']);
  });

  it("tolerations, nodeSelector and affinity are the operator's: refused unless pod-policy allows them, whole or by key", async () => {
    await refused(desired("far1", "elsewhere"), ['tolerations "(every taint)"', 'nodeSelector "tenant"', 'affinity.nodeAffinity "node-role.kubernetes.io/control-plane"', "affinity.podAffinity to other namespaces' pods"]);
    await refused(desired("ded1", "dedicated"), ['tolerations "dedicated"', 'nodeSelector "pool"']);
    // The operator allows its sandbox nodes' taint and label, not the rest.
    kubectlOk(["-n", ns, "apply", "-f", "-"], kubectlOk(["-n", ns, "create", "configmap", "sandbox-injection-config-user", "--dry-run=client", "-o", "yaml", `--from-literal=pod-policy=${JSON.stringify({ allow: ["nodeName"], tolerationKeys: ["dedicated"], nodeSelectorKeys: ["pool"] })}`]));
    await until("the keys read", () => driver.injection.current()["pod-policy"]?.tolerationKeys.includes("dedicated"));
    await driver.ensure(desired("ded2", "dedicated"));
    expect((await podsOf("ded2"))[0]!.spec!.nodeSelector).toEqual({ pool: "sandboxes" });
    await refused(desired("far2", "elsewhere"), ['tolerations "(every taint)"', 'nodeSelector "tenant"']);
  });

  it("a second scheduler and resources the quota does not count (a GPU, hugepages, a resource claim) are refused unless pod-policy allows them, key by key (review 26 M7)", async () => {
    await refused(desired("sched1", "scheduled"), ['schedulerName "bin-packer"']);
    await refused(desired("gpu1", "gpu"), ['container "sandbox": resources "nvidia.com/gpu"', 'container "sandbox": resources "hugepages-2Mi"', 'container "sandbox": resources.claims', 'resourceClaims "accel"']);
    expect(warnings("SandboxSet", "gpu")).toContain('resources "nvidia.com/gpu"');
    // The operator allows its scheduler and its GPUs, not hugepages nor claims.
    kubectlOk(["-n", ns, "apply", "-f", "-"], kubectlOk(["-n", ns, "create", "configmap", "sandbox-injection-config-user", "--dry-run=client", "-o", "yaml", `--from-literal=pod-policy=${JSON.stringify({ allow: ["schedulerName"], resourceKeys: ["nvidia.com/gpu"] })}`]));
    await until("the pod-policy read", () => driver.injection.current()["pod-policy"]?.resourceKeys.includes("nvidia.com/gpu"));
    await driver.ensure(desired("sched2", "scheduled"));
    expect((await podsOf("sched2"))[0]!.spec!.schedulerName).toBe("bin-packer");
    await refused(desired("gpu2", "gpu"), ['resources "hugepages-2Mi"', 'resourceClaims "accel"']);
    expect(ready("gpu-gpu2")!.message).not.toContain("nvidia.com/gpu");
  });

  it("pod-level requests, which the scheduler reserves and the quota does not count, are refused unless pod-policy allows them (review 27 M2)", async () => {
    await refused(desired("podlvl1", "podlevel"), ["resources (pod-level): the quota does not count it"]);
    expect(warnings("SandboxSet", "podlevel")).toContain("resources (pod-level)");
  });

  it("a claim template naming a PersistentVolume or another namespace's data source is refused before any PVC is made", async () => {
    await refused(desired("claim1", "claims"), ['volumeClaimTemplates "data": volumeName', 'volumeClaimTemplates "copy": dataSourceRef from namespace "team-b"']);
    expect(kubectlOk(["-n", ns, "get", "pvc", "-o", "name"])).not.toContain("claim1");
  });

  it("a declared agent-runtime without resources is refused while the injection config gives it no limits (it would run unbounded, uncounted), made once it does", async () => {
    const userConfig = (runtime: object) => {
      const policy = JSON.stringify({ allow: ["nodeName"], tolerationKeys: ["dedicated"], nodeSelectorKeys: ["pool"] });
      kubectlOk(["-n", ns, "apply", "-f", "-"], kubectlOk(["-n", ns, "create", "configmap", "sandbox-injection-config-user", "--dry-run=client", "-o", "yaml", `--from-literal=pod-policy=${policy}`, `--from-literal=agent-runtime=${JSON.stringify(runtime)}`]));
    };
    userConfig({ kind: "sidecar", args: ["--port", "49983"] });
    await until("the unsized runtime read", () => driver.injection.current()["agent-runtime"]?.args?.[0] === "--port" && !driver.injection.current()["agent-runtime"]?.resources);
    await refused(desired("rt1", "ownrt"), ['container "agent-runtime" states no resources']);
    const limits = { cpu: "500m", memory: "256Mi" };
    userConfig({ kind: "sidecar", args: ["--port", "49983"], resources: { limits } });
    await until("the sized runtime read", () => driver.injection.current()["agent-runtime"]?.resources?.limits?.cpu === "500m");
    await driver.ensure(desired("rt2", "ownrt"));
    expect((await podsOf("rt2"))[0]!.spec!.containers.find((c) => c.name === "agent-runtime")!.resources).toMatchObject({ limits });
  });
});

/** A Checkpoint of snapshot `snap` in `namespace`, Succeeded with `checkpointId` (the test plays the engine). */
async function succeededCheckpoint(namespace: string, snap: string, checkpointId: string): Promise<void> {
  const custom = kubeConfig().makeApiClient(CustomObjectsApi);
  const target = { group: "agents.kruise.io", version: "v1alpha1", namespace, plural: "checkpoints" };
  await custom.createNamespacedCustomObject({ ...target, body: { apiVersion: "agents.kruise.io/v1alpha1", kind: "Checkpoint", metadata: { name: `cp-${snap}`, annotations: { [SNAPSHOT_ANNOTATION]: snap } }, spec: { podName: "gone" } } });
  await custom.patchNamespacedCustomObjectStatus({ ...target, name: `cp-${snap}`, body: { status: { phase: "Succeeded", checkpointId } } }, setHeaderOptions("Content-Type", PatchStrategy.MergePatch));
}

describe("a pending restore read back from the Sandbox (review 25 M1)", () => {
  it("a kubectl annotation naming another namespace's checkpoint, or none, makes no pod; one of the sandbox's own namespace is named on the new pod", async () => {
    const other = await freshNamespace("judge-other");
    await succeededCheckpoint(other, "theirs", "ckpt-theirs");
    await succeededCheckpoint(ns, "mine", "ckpt-mine");
    await driver.ensure(desired("rest1", "plain"));
    // Stop-paused: the pod goes; the next Running makes a new one.
    await driver.ensure(desired("rest1", "plain", { generation: 2, state: "Paused" }));
    await until("the pod gone", async () => (await podsOf("rest1")).length === 0);
    const annotate = async (id: string) => {
      kubectlOk(["-n", ns, "annotate", "sandbox", "plain-rest1", `${RESTORE_PENDING_ANNOTATION}=${id}`, "--overwrite"]);
      await until("the annotation seen", () => driver.sandboxes.get("plain-rest1")?.metadata?.annotations?.[RESTORE_PENDING_ANNOTATION] === id);
    };
    for (const [gen, id] of [[3, "ckpt-theirs"], [4, "ckpt-made-up"]] as const) {
      await annotate(id);
      await expect(driver.ensure(desired("rest1", "plain", { generation: gen }))).rejects.toMatchObject({ reason: "SnapshotNotFound", message: expect.stringContaining(`checkpoint "${id}", which is no Succeeded Checkpoint of a snapshot in namespace ${ns}`) });
      expect(await podsOf("rest1")).toHaveLength(0);
    }
    await annotate("ckpt-mine");
    await driver.ensure(desired("rest1", "plain", { generation: 5 }));
    expect((await podsOf("rest1"))[0]!.metadata!.annotations![RESTORE_ANNOTATION]).toBe("ckpt-mine");
  });
});
