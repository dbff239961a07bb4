// A pod's agent-runtime joins the traces when the agent traces and opts in (--pod-runtime-tracing,
// issue 15): the driver sets RUNTIME_TRACING=agent on the runtime container of each pod it creates,
// one with the traffic-proxy pair too, and the runtime keeps its spans for the agent to collect
// (controllers/agent/pod-spans.ts; the spans reaching a real collector through the agent:
// test/runtime/pod-spans.test.ts). No pod is given the collector's address (review M6: tenants'
// code would write to it). An agent without the opt-in leaves the pod as it was.
import { CoreV1Api, type V1Pod } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { kubernetesDriverFromFlags } from "../../controllers/drivers/kubernetes/from-flags.ts";
import { KubernetesDriver, idLabel } from "../../controllers/drivers/kubernetes/kubernetes-driver.ts";
import { LABEL, RUNTIME_CONTAINER } from "../../schema/crd/labels.ts";
import { SYSTEM_INJECTION_CONFIGMAP } from "../../schema/crd/injection.ts";
import { freshNamespace, kubeConfig, kubectlOk } from "./support/namespace.ts";
import { kubeDesired } from "./support/desired.ts";

const ENDPOINT = "http://otel-collector.observability:4318";
let ns: string;
let core: CoreV1Api;
const drivers: KubernetesDriver[] = [];

const desired = (id: string) => kubeDesired(id);

async function runtimeEnv(id: string): Promise<Record<string, string | undefined>> {
  const pods: V1Pod[] = (await core.listNamespacedPod({ namespace: ns, labelSelector: `${LABEL.sandboxId}=${idLabel(id)}` })).items;
  expect(pods).toHaveLength(1);
  const rt = pods[0]!.spec!.containers.find((c) => c.name === RUNTIME_CONTAINER);
  expect(rt).toBeDefined();
  return Object.fromEntries((rt!.env ?? []).map((e) => [e.name, e.value]));
}

async function driver(podRuntimeTracing?: boolean): Promise<KubernetesDriver> {
  const d = new KubernetesDriver({ kubeConfig: kubeConfig("agent"), namespace: ns, runtimeImage: "ghcr.io/kruise-edge/sandbox-agent:test", podRuntimeTracing });
  drivers.push(d);
  await d.start();
  return d;
}

/** The driver as the agent builds it from its command line (alone: the others stop first). */
async function driverFromFlags(flags: { "otlp-endpoint"?: string; "pod-runtime-tracing"?: boolean }): Promise<KubernetesDriver> {
  for (const d of drivers.splice(0)) await d.stop();
  const d = await kubernetesDriverFromFlags({ kubeconfig: inject("kube").agentKubeconfig, namespace: ns, "runtime-image": "ghcr.io/kruise-edge/sandbox-agent:test", ...flags });
  drivers.push(d);
  return d;
}

beforeAll(async () => {
  ns = await freshNamespace("rttrace");
  core = kubeConfig().makeApiClient(CoreV1Api);
  kubectlOk(["-n", ns, "apply", "-f", "-"], "apiVersion: agents.kruise.io/v1alpha1\nkind: SandboxSet\nmetadata: { name: py }\nspec:\n  replicas: 0\n  template: { spec: { containers: [{ name: sandbox, image: python:3.12 }] } }\n");
});

afterAll(async () => {
  for (const d of drivers) await d.stop();
});

describe("the runtime container's tracing", () => {
  it("is the agent's: a pod made by a tracing agent's driver keeps its runtime's spans for the agent, with no collector address", async () => {
    const d = await driver(true);
    await d.ensure(desired("trace1"));
    const env = await runtimeEnv("trace1");
    expect(env.RUNTIME_TRACING).toBe("agent");
    expect(env.OTEL_EXPORTER_OTLP_ENDPOINT).toBeUndefined();
    await d.stop();
    drivers.pop();
  });

  it("is off where the agent does not trace its pods", async () => {
    const d = await driver();
    await d.ensure(desired("trace2"));
    expect((await runtimeEnv("trace2")).RUNTIME_TRACING).toBeUndefined();
  });

  it("is not turned on by --otlp-endpoint alone: the agent traces, its pods' runtimes do not", async () => {
    const d = await driverFromFlags({ "otlp-endpoint": ENDPOINT });
    await d.ensure(desired("trace3"));
    const env = await runtimeEnv("trace3");
    expect(env.RUNTIME_TRACING).toBeUndefined();
    expect(env.OTEL_EXPORTER_OTLP_ENDPOINT).toBeUndefined();
  });

  it("is on with the opt-in, --pod-runtime-tracing, in a pod with the traffic-proxy pair too", async () => {
    kubectlOk(["-n", ns, "create", "configmap", SYSTEM_INJECTION_CONFIGMAP, `--from-literal=traffic-proxy={"image":"tp:1"}`]);
    const d = await driverFromFlags({ "otlp-endpoint": ENDPOINT, "pod-runtime-tracing": true });
    // Governed: its egress rules go through the pod's own traffic-proxy.
    await d.ensure(kubeDesired("trace4", { allowInternetAccess: false, egress: { allowOut: ["pypi.org"], denyOut: [] } }));
    const pods: V1Pod[] = (await core.listNamespacedPod({ namespace: ns, labelSelector: `${LABEL.sandboxId}=${idLabel("trace4")}` })).items;
    // The proxy is a container, or a native sidecar (an init container) where the cluster has them.
    const spec = pods[0]!.spec!;
    expect([...spec.containers, ...(spec.initContainers ?? [])].map((c) => c.name)).toContain("traffic-proxy");
    const env = await runtimeEnv("trace4");
    expect(env.RUNTIME_TRACING).toBe("agent");
    expect(env.OTEL_EXPORTER_OTLP_ENDPOINT).toBeUndefined();
  });
});
