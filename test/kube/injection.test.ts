// The injection config against the real API server (issue 18.1, 18.2): the agent namespace's
// system ConfigMap (the one k8s/ installs) and the user's `sandbox-injection-config-user` decide
// which containers a sandbox pod gets beside its template's, read through an informer. Each
// override case, refusal of an invalid user config (Event, last good config kept) and its fix,
// probes merged without overwriting, a stable injection order, and a claim-time CPU resize that
// keeps the injected containers' resources.
import { readFileSync } from "node:fs";
import { CoreV1Api, PatchStrategy, setHeaderOptions, type V1Pod } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { KubernetesDriver, type KubeDesiredSandbox } from "../../controllers/drivers/kubernetes/kubernetes-driver.ts";
import { LABEL } from "../../schema/crd/labels.ts";
import { KUBERNETES_FLAGS } from "../../controllers/drivers/kubernetes/flags.ts";
import { TestKubelet } from "./support/kubelet.ts";
import { freshNamespace, kubeConfig, kubectlOk, until } from "./support/namespace.ts";

const RUNTIME_IMAGE = "ghcr.io/kruise-edge/sandbox-agent:test";
const USER_CM = "sandbox-injection-config-user";
let ns: string;
let driver: KubernetesDriver;
let kubelet: TestKubelet;
let core: CoreV1Api;

function desired(id: string, pool: string, over: Partial<KubeDesiredSandbox> = {}): KubeDesiredSandbox {
  return { id, generation: 1, template: pool, state: "Running", pauseStrategy: "Stop", resources: { cpuCount: 1, memoryMB: 512 }, allowInternetAccess: true, pool, claimed: false, ...over };
}

async function podOf(id: string): Promise<V1Pod> {
  const pods = (await core.listNamespacedPod({ namespace: ns, labelSelector: `${LABEL.sandboxId}=${id}` })).items;
  expect(pods).toHaveLength(1);
  return pods[0]!;
}

function applySet(name: string, spec: string): void {
  kubectlOk(["-n", ns, "apply", "-f", "-"], `apiVersion: agents.kruise.io/v1alpha1\nkind: SandboxSet\nmetadata: { name: ${name} }\nspec:\n  replicas: 0\n${spec}`);
}

function applyUserConfig(data: Record<string, unknown>): void {
  const body = { apiVersion: "v1", kind: "ConfigMap", metadata: { name: USER_CM, namespace: ns }, data: Object.fromEntries(Object.entries(data).map(([k, v]) => [k, typeof v === "string" ? v : JSON.stringify(v)])) };
  kubectlOk(["apply", "-f", "-"], JSON.stringify(body));
}

function eventReasons(name: string): string[] {
  return kubectlOk(["-n", ns, "get", "events", "--field-selector", `involvedObject.kind=ConfigMap,involvedObject.name=${name}`, "-o", "jsonpath={.items[*].reason}"]).split(" ").filter(Boolean);
}

const names = (cs: { name: string }[] | undefined) => (cs ?? []).map((c) => c.name);
const runtimeOf = (p: V1Pod) => p.spec!.containers.find((c) => c.name === "agent-runtime")!;
const system = JSON.parse(
  // The shipped system ConfigMap, its agent-runtime component (what the pods must carry).
  /agent-runtime: \|\n([\s\S]*?)\n {2}csi:/.exec(readFileSync("k8s/injection-config.yaml", "utf8"))![1]!,
) as { resources: object; startupProbe: object; livenessProbe: object };

beforeAll(async () => {
  ns = await freshNamespace("inject");
  core = kubeConfig().makeApiClient(CoreV1Api);
  // The shipped system ConfigMap, in this test's agent namespace.
  kubectlOk(["-n", ns, "apply", "-f", "-"], readFileSync("k8s/injection-config.yaml", "utf8").replace("namespace: sandbox-system", `namespace: ${ns}`));
  applySet("plain", "  template: { spec: { containers: [{ name: sandbox, image: python:3.12 }] } }\n");
  // runtimes listed in the reverse of the injection order.
  applySet("full", "  runtimes: [{ name: traffic-proxy }, { name: csi }]\n  template: { spec: { containers: [{ name: sandbox, image: python:3.12 }] } }\n");
  applySet(
    "probed",
    `  template:
    spec:
      containers:
        - { name: sandbox, image: python:3.12, livenessProbe: { exec: { command: [cat, /tmp/alive] }, periodSeconds: 7 } }
        - { name: agent-runtime, image: my-runtime:1, startupProbe: { tcpSocket: { port: 49983 }, failureThreshold: 9 } }
`,
  );
  kubelet = new TestKubelet(kubeConfig(), ns);
  await kubelet.start();
  driver = new KubernetesDriver({ kubeConfig: kubeConfig("agent"), namespace: ns, runtimeImage: RUNTIME_IMAGE });
  await driver.start();
  await until("sets in the cache", () => ["plain", "full", "probed"].every((s) => driver.sandboxSets.get(s)));
});

afterAll(async () => {
  await driver?.stop();
  await kubelet?.stop();
});

describe("injection config", () => {
  it("system only: the agent-runtime with the system's resources and probes; csi and traffic-proxy only when runtimes asks, in a fixed order", async () => {
    await driver.ensure(desired("plain1", "plain"));
    const plain = await podOf("plain1");
    expect(names(plain.spec!.containers)).toEqual(["sandbox", "agent-runtime"]);
    expect(plain.spec!.initContainers ?? []).toEqual([]);
    expect(runtimeOf(plain)).toMatchObject({ image: RUNTIME_IMAGE, resources: system.resources, startupProbe: system.startupProbe, livenessProbe: system.livenessProbe });

    await driver.ensure(desired("full1", "full"));
    const full = await podOf("full1");
    expect(names(full.spec!.containers)).toEqual(["sandbox", "agent-runtime", "csi"]);
    expect(names(full.spec!.initContainers)).toEqual(["traffic-redirect", "traffic-ca", "traffic-proxy"]);
    expect(full.spec!.containers[2]).toMatchObject({ image: "ghcr.io/kruise-edge/sandbox-csi:0.1.0", volumeMounts: [{ name: "sandbox-csi", mountPath: "/var/run/sandbox-csi" }, { name: "sandbox-ca", mountPath: "/run/kruise", readOnly: true }] });
    expect(full.spec!.volumes).toContainEqual({ name: "sandbox-csi", emptyDir: {} });
  });

  it("a code-interpreter template's pod: the injected agent-runtime runs the interpreter image and serves port 49999 beside envd's; a runtime the template declares stays as declared", async () => {
    await driver.ensure(desired("ci1", "plain", { codeInterpreter: true }));
    const pod = JSON.parse(kubectlOk(["-n", ns, "get", "pods", "-l", `${LABEL.sandboxId}=ci1`, "-o", "jsonpath={.items[0]}"])) as V1Pod;
    expect(names(pod.spec!.containers)).toEqual(["sandbox", "agent-runtime"]);
    expect(pod.spec!.containers[0]!.image).toBe("python:3.12"); // the template's own container is untouched
    const rt = runtimeOf(pod);
    expect(rt.image).toBe(KUBERNETES_FLAGS["interpreter-image"].default);
    expect(rt.args).toEqual(["--port", "49983", "--interpreter-port", "49999"]);
    expect(rt.ports).toEqual([{ name: "envd", containerPort: 49983, protocol: "TCP" }, { name: "interpreter", containerPort: 49999, protocol: "TCP" }]);
    expect(rt).toMatchObject({ resources: system.resources, startupProbe: system.startupProbe });
    // Not a code interpreter: the runtime image, envd's port only.
    expect(runtimeOf(await podOf("plain1"))).toMatchObject({ image: RUNTIME_IMAGE, args: ["--port", "49983"] });
    // The template's own agent-runtime container is the template's, flags included.
    await driver.ensure(desired("ci2", "probed", { codeInterpreter: true }));
    expect(runtimeOf(await podOf("ci2"))).toMatchObject({ image: "my-runtime:1" });
    expect(runtimeOf(await podOf("ci2")).args).toBeUndefined();
  });

  it("a user ConfigMap overrides the component it names; the others keep the system's; existing pods are left alone", async () => {
    const before = await podOf("full1");
    applyUserConfig({ "agent-runtime": { image: "registry.example/runtime:2", args: ["--port", "49983"], livenessProbe: { httpGet: { path: "/health", port: 49983 }, periodSeconds: 30 } } });
    await until("user config in force", () => driver.injection.current()["agent-runtime"]?.image === "registry.example/runtime:2");
    await driver.ensure(desired("full2", "full"));
    const pod = await podOf("full2");
    expect(names(pod.spec!.containers)).toEqual(["sandbox", "agent-runtime", "csi"]);
    expect(names(pod.spec!.initContainers)).toEqual(["traffic-redirect", "traffic-ca", "traffic-proxy"]);
    const rt = runtimeOf(pod);
    expect(rt).toMatchObject({ image: "registry.example/runtime:2", livenessProbe: { periodSeconds: 30 } });
    expect(rt.startupProbe).toBeUndefined(); // replaced whole: the user's component has none
    expect(pod.spec!.containers[2]!.image).toBe("ghcr.io/kruise-edge/sandbox-csi:0.1.0"); // csi: the system's
    // The pod built before the change is not touched.
    expect((await podOf("full1")).metadata!.resourceVersion).toBe(before.metadata!.resourceVersion);
  });

  it("an invalid user config is refused with an Event and the last good one stays in force; fixing it applies the fix", async () => {
    applyUserConfig({ "agent-runtime": { image: "registry.example/runtime:3", resources: { limits: { cpu: "lots" } } } });
    await until("refusal event", () => eventReasons(USER_CM).includes("InvalidInjectionConfig"));
    expect(driver.injection.condition).toMatchObject({ status: "False", reason: "InvalidInjectionConfig" });
    expect(driver.injection.condition.message).toContain("agent-runtime: resources.limits.cpu");
    await driver.ensure(desired("full3", "full"));
    expect(runtimeOf(await podOf("full3")).image).toBe("registry.example/runtime:2"); // the last good

    applyUserConfig({ sidecar: { image: "x" } }); // no such component
    await until("second refusal", () => eventReasons(USER_CM).filter((r) => r === "InvalidInjectionConfig").length === 2);

    applyUserConfig({ "agent-runtime": { image: "registry.example/runtime:3" } });
    await until("fix applied", () => eventReasons(USER_CM).includes("InjectionConfigApplied"));
    expect(driver.injection.condition.status).toBe("True");
    await driver.ensure(desired("full4", "full"));
    expect(runtimeOf(await podOf("full4")).image).toBe("registry.example/runtime:3");
    kubectlOk(["-n", ns, "delete", "configmap", USER_CM]);
    await until("back to the system's", () => driver.injection.current()["agent-runtime"]?.image === undefined);
  });

  it("probes are added to the runtime and never overwrite one the template declares", async () => {
    await driver.ensure(desired("probed1", "probed"));
    const pod = await podOf("probed1");
    expect(names(pod.spec!.containers)).toEqual(["sandbox", "agent-runtime"]);
    const [main, rt] = pod.spec!.containers;
    // The business container's own probe is as declared, and nothing is added to it.
    expect(main!.livenessProbe).toMatchObject({ exec: { command: ["cat", "/tmp/alive"] }, periodSeconds: 7 });
    expect(main!.startupProbe).toBeUndefined();
    // The template's own runtime container keeps its image and startup probe; the config adds the liveness probe.
    expect(rt).toMatchObject({ image: "my-runtime:1", startupProbe: { tcpSocket: { port: 49983 }, failureThreshold: 9 }, livenessProbe: system.livenessProbe });
  });

  it("a claim-time CPU resize keeps the injected containers' resources as injected", async () => {
    await driver.ensure(desired("warm1", "plain"));
    await until("member ready", async () => (await driver.observe("warm1"))?.ready);
    // The API server resizes only pods whose kubelet reports container resources (as in inplace.test.ts).
    const running = await podOf("warm1");
    const statuses = running.spec!.containers.map((c) => ({ name: c.name, image: c.image, imageID: "", ready: true, started: true, restartCount: 0, state: { running: { startedAt: new Date() } }, resources: c.resources }));
    await core.patchNamespacedPodStatus({ name: running.metadata!.name!, namespace: ns, body: { status: { containerStatuses: statuses } } }, setHeaderOptions("Content-Type", PatchStrategy.MergePatch));
    await driver.ensure(desired("warm1", "plain", { generation: 2, claimed: true, inplaceUpdate: { cpuCount: 2 } }));
    const after = await podOf("warm1");
    expect(after.metadata!.uid).toBe(running.metadata!.uid);
    expect(after.spec!.containers[0]!.resources).toMatchObject({ requests: { cpu: "2" }, limits: { cpu: "2" } });
    expect(runtimeOf(after).resources).toEqual(system.resources);
  });
});
