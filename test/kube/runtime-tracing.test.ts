// A pod's agent-runtime joins the traces when the agent traces (issue 15): the driver, given the
// agent's collector (--otlp-endpoint), sets OTEL_EXPORTER_OTLP_ENDPOINT on the runtime container
// of each pod it creates, which the runtime reads (controllers/runtime/cli.ts; its spans reaching
// a real collector: test/runtime/pod-tracing.test.ts). An agent without one leaves the pod as it was.
// The agent hands its collector to pods only with --pod-runtime-tracing (review M6: the collector
// then takes writes from tenants' code too), never to pods with the traffic-proxy pair
// (test/kube/pure.test.ts "pod runtime tracing").
import { CoreV1Api, type V1Pod } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { kubernetesDriverFromFlags } from "../../controllers/drivers/kubernetes/from-flags.ts";
import { KubernetesDriver, idLabel } from "../../controllers/drivers/kubernetes/kubernetes-driver.ts";
import { LABEL, RUNTIME_CONTAINER } from "../../schema/crd/labels.ts";
import { SYSTEM_INJECTION_CONFIGMAP } from "../../schema/crd/injection.ts";
import { tapLogs } from "../../controllers/lib/log.ts";
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

async function driver(otlpEndpoint?: string): Promise<KubernetesDriver> {
  const d = new KubernetesDriver({ kubeConfig: kubeConfig("agent"), namespace: ns, runtimeImage: "ghcr.io/kruise-edge/sandbox-agent:test", ...(otlpEndpoint ? { otlpEndpoint } : {}) });
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

  it("is not handed on by --otlp-endpoint alone: the agent traces, its pods' runtimes do not", async () => {
    const d = await driverFromFlags({ "otlp-endpoint": ENDPOINT });
    await d.ensure(desired("trace3"));
    expect((await runtimeEnv("trace3")).OTEL_EXPORTER_OTLP_ENDPOINT).toBeUndefined();
  });

  it("is handed on with the opt-in, --pod-runtime-tracing", async () => {
    const d = await driverFromFlags({ "otlp-endpoint": ENDPOINT, "pod-runtime-tracing": true });
    await d.ensure(desired("trace4"));
    expect((await runtimeEnv("trace4")).OTEL_EXPORTER_OTLP_ENDPOINT).toBe(ENDPOINT);
  });

  it("with the traffic-proxy configured too, the agent says at start-up that those pods are not traced", async () => {
    kubectlOk(["-n", ns, "create", "configmap", SYSTEM_INJECTION_CONFIGMAP, `--from-literal=traffic-proxy={"image":"tp:1"}`]);
    const warnings: string[] = [];
    const untap = tapLogs((level, component, msg) => void (level === "warn" && component === "kubernetes" && warnings.push(msg)));
    try {
      await driverFromFlags({ "otlp-endpoint": ENDPOINT });
      expect(warnings).toEqual([]);
      await driverFromFlags({ "otlp-endpoint": ENDPOINT, "pod-runtime-tracing": true });
      expect(warnings).toEqual([expect.stringMatching(/pods with the traffic-proxy sidecar .* are not traced/)]);
    } finally {
      untap();
    }
  });
});
