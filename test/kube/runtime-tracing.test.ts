// A pod's agent-runtime joins the traces when the agent traces (issue 15): the driver, given the
// agent's collector (--otlp-endpoint), sets OTEL_EXPORTER_OTLP_ENDPOINT on the runtime container
// of each pod it creates, which the runtime reads (controllers/runtime/cli.ts; its spans reaching
// a real collector: test/runtime/pod-tracing.test.ts). An agent without one leaves the pod as it was.
import { CoreV1Api, type V1Pod } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { KubernetesDriver, idLabel, type KubeDesiredSandbox } from "../../controllers/drivers/kubernetes/kubernetes-driver.ts";
import { LABEL, RUNTIME_CONTAINER } from "../../schema/crd/labels.ts";
import { freshNamespace, kubeConfig, kubectlOk } from "./support/namespace.ts";

const ENDPOINT = "http://otel-collector.observability:4318";
let ns: string;
let core: CoreV1Api;
const drivers: KubernetesDriver[] = [];

const desired = (id: string): KubeDesiredSandbox => ({
  id,
  generation: 1,
  template: "py",
  state: "Running",
  pauseStrategy: "Stop",
  resources: { cpuCount: 1, memoryMB: 512 },
  allowInternetAccess: true,
  pool: "py",
  claimed: false,
});

async function runtimeEnv(id: string): Promise<Record<string, string | undefined>> {
  const pods: V1Pod[] = (await core.listNamespacedPod({ namespace: ns, labelSelector: `${LABEL.sandboxId}=${idLabel(id)}` })).items;
  expect(pods).toHaveLength(1);
  const rt = pods[0]!.spec!.containers.find((c) => c.name === RUNTIME_CONTAINER);
  expect(rt).toBeDefined();
  return Object.fromEntries((rt!.env ?? []).map((e) => [e.name, e.value]));
}

async function driver(otlpEndpoint?: string): Promise<KubernetesDriver> {
  const d = new KubernetesDriver({ kubeConfig: kubeConfig("agent"), namespace: ns, runtimeImage: "ghcr.io/kruise-edge/sandbox-agent:test", ...(otlpEndpoint ? { otlpEndpoint } : {}) });
  drivers.push(d);
  await d.start();
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

describe("the runtime container's collector", () => {
  it("is the agent's: a pod made by a tracing agent's driver has OTEL_EXPORTER_OTLP_ENDPOINT on its agent-runtime", async () => {
    const d = await driver(ENDPOINT);
    await d.ensure(desired("trace1"));
    expect((await runtimeEnv("trace1")).OTEL_EXPORTER_OTLP_ENDPOINT).toBe(ENDPOINT);
    await d.stop();
    drivers.pop();
  });

  it("is unset where the agent does not trace", async () => {
    const d = await driver();
    await d.ensure(desired("trace2"));
    expect((await runtimeEnv("trace2")).OTEL_EXPORTER_OTLP_ENDPOINT).toBeUndefined();
  });
});
