// The kubernetes driver's pure pieces: what a pod's status means, what a SandboxSet asks of the
// edge, and how quantities read. Table rows, no API server.
import type { V1Pod } from "@kubernetes/client-node";
import { describe, expect, it } from "vitest";
import { sandboxState } from "../../controllers/drivers/kubernetes/pod-state.ts";
import { poolSpecOf } from "../../controllers/agent/kube-sync/sandboxset-sync.ts";
import { buildPod } from "../../controllers/drivers/kubernetes/pod-spec.ts";
import { userLabels } from "../../schema/crd/user-metadata.ts";
import { claimMetadataProblem } from "../../controllers/agent/kube-sync/sandboxclaim-sync.ts";
import { podTracingFlag, watchNamespacesFlag } from "../../controllers/drivers/kubernetes/flags.ts";
import { WorkQueue } from "../../controllers/lib/work-queue.ts";
import { BUILTIN_INJECTION, mergeInjection, parseInjectionConfig } from "../../schema/crd/injection.ts";

const pod = (status: V1Pod["status"], meta: V1Pod["metadata"] = {}): V1Pod => ({ metadata: { name: "p", uid: "u1", ...meta }, status });
const ready = { phase: "Running", podIP: "10.0.0.1", conditions: [{ type: "Ready", status: "True" }] };
const waiting = (reason: string) => ({ phase: "Pending", containerStatuses: [{ name: "sandbox", image: "x", imageID: "", ready: false, restartCount: 0, state: { waiting: { reason } } }] });

describe("sandboxState", () => {
  const rows: [string, Parameters<typeof sandboxState>[0], { driverPhase: string; reason: string; ready: boolean }][] = [
    ["ready pod", { paused: false, pauseStrategy: "Stop", frozen: false, pod: pod(ready) }, { driverPhase: "Running", reason: "PodReady", ready: true }],
    ["no pod yet", { paused: false, pauseStrategy: "Stop", frozen: false, pod: undefined }, { driverPhase: "Pending", reason: "PodStarting", ready: false }],
    ["image pull", { paused: false, pauseStrategy: "Stop", frozen: false, pod: pod(waiting("ImagePullBackOff")) }, { driverPhase: "Pending", reason: "ImagePullFailed", ready: false }],
    ["crash loop", { paused: false, pauseStrategy: "Stop", frozen: false, pod: pod(waiting("CrashLoopBackOff")) }, { driverPhase: "Pending", reason: "StartContainerFailed", ready: false }],
    ["creating", { paused: false, pauseStrategy: "Stop", frozen: false, pod: pod(waiting("ContainerCreating")) }, { driverPhase: "Pending", reason: "PodStarting", ready: false }],
    [
      "unschedulable",
      { paused: false, pauseStrategy: "Stop", frozen: false, pod: pod({ phase: "Pending", conditions: [{ type: "PodScheduled", status: "False", reason: "Unschedulable" }] }) },
      { driverPhase: "Pending", reason: "Unschedulable", ready: false },
    ],
    ["stop-paused, pod gone", { paused: true, pauseStrategy: "Stop", frozen: false, pod: undefined }, { driverPhase: "Stopped", reason: "Paused", ready: false }],
    ["stop-pausing, pod still there", { paused: true, pauseStrategy: "Stop", frozen: false, pod: pod(ready) }, { driverPhase: "Running", reason: "Paused", ready: false }],
    ["frozen", { paused: true, pauseStrategy: "Freeze", frozen: true, pod: pod(ready) }, { driverPhase: "Paused", reason: "Paused", ready: false }],
    ["frozen by freeze() without a pause intent", { paused: false, pauseStrategy: "Stop", frozen: true, pod: pod(ready) }, { driverPhase: "Paused", reason: "Paused", ready: false }],
    ["pod failed", { paused: false, pauseStrategy: "Stop", frozen: false, pod: pod({ phase: "Failed", message: "OOMKilled" }) }, { driverPhase: "Failed", reason: "StartContainerFailed", ready: false }],
  ];
  it.each(rows)("%s", (_name, facts, want) => {
    expect(sandboxState(facts)).toMatchObject(want);
  });
});

describe("poolSpecOf", () => {
  it("maps the first non-runtime container's image and env, the pod's limits and the strategies", () => {
    const spec = poolSpecOf(
      {
        metadata: { name: "s", generation: 3 },
        spec: {
          replicas: 7,
          pauseStrategy: { type: "Freeze" },
          scaleStrategy: { maxUnavailable: "50%" },
          template: {
            spec: {
              containers: [
                { name: "agent-runtime", image: "rt" },
                { name: "main", image: "python:3.12", env: [{ name: "A", value: "1" }, { name: "B" }], resources: { limits: { cpu: "1500m", memory: "768Mi" } } },
              ],
            },
          },
        },
      } as never,
      "c1",
    );
    expect(spec).toEqual({
      cluster: "c1",
      replicas: 7,
      image: "python:3.12",
      cpuCount: 2,
      restCpu: 0,
      initCpu: 0,
      memoryMB: 768,
      env: { A: "1" },
      pauseStrategy: "Freeze",
      scaleStrategy: { maxUnavailable: "50%" },
      updateStrategy: { maxUnavailable: "20%" },
      sourceRevision: expect.stringMatching(/^[0-9a-f]{10}$/),
    });
  });

});

/** A one-container template's pod, for the injection and tracing rows. */
const PLAIN_POD = {
  name: "p",
  namespace: "ns",
  template: { spec: { containers: [{ name: "main", image: "img" }] } },
  volumeClaimTemplates: [],
  labels: {},
  owner: { apiVersion: "agents.kruise.io/v1alpha1", kind: "Sandbox", name: "p", uid: "u" },
  runtimeImage: "rt:1",
  resources: { cpuCount: 1, memoryMB: 512 },
} satisfies Parameters<typeof buildPod>[0];

describe("buildPod", () => {
  it("injects the runtime once, keeps the template's own containers and volumes, mounts claims by template name", () => {
    const p = buildPod({
      name: "pool-abc",
      namespace: "ns",
      template: { metadata: { labels: { app: "a" } }, spec: { containers: [{ name: "main", image: "img", resources: { limits: { cpu: "3" } } }], volumes: [{ name: "workspace", emptyDir: {} }, { name: "cache", emptyDir: {} }] } },
      volumeClaimTemplates: [{ metadata: { name: "workspace" } }],
      labels: { "agents.kruise.io/sandbox-id": "abc" },
      owner: { apiVersion: "agents.kruise.io/v1alpha1", kind: "Sandbox", name: "pool-abc", uid: "u" },
      runtimeImage: "rt:1",
      resources: { cpuCount: 1, memoryMB: 512 },
    });
    expect(p.spec!.containers.map((c) => c.name)).toEqual(["main", "agent-runtime"]);
    expect(p.spec!.containers[0]!.resources).toEqual({ limits: { cpu: "3" } }); // the template's own resources win
    expect(p.spec!.volumes).toEqual([{ name: "cache", emptyDir: {} }, { name: "workspace", persistentVolumeClaim: { claimName: "workspace-pool-abc" } }]);
    expect(p.metadata!.labels).toEqual({ app: "a", "agents.kruise.io/sandbox-id": "abc", "agents.kruise.io/created-by": "sandbox" });
    expect(p.metadata!.annotations).toBeUndefined();
  });

  it("puts the user's annotations beside the template's (the user's win)", () => {
    const p = buildPod({
      name: "pool-abc",
      namespace: "ns",
      template: { metadata: { annotations: { from: "template", shared: "template" } }, spec: { containers: [{ name: "main", image: "img" }] } },
      volumeClaimTemplates: [],
      labels: {},
      annotations: { owner: "ci", shared: "user" },
      owner: { apiVersion: "agents.kruise.io/v1alpha1", kind: "Sandbox", name: "pool-abc", uid: "u" },
      runtimeImage: "rt:1",
      resources: { cpuCount: 1, memoryMB: 512 },
    });
    expect(p.metadata!.annotations).toEqual({ from: "template", shared: "user", owner: "ci" });
  });
});

describe("injection config", () => {
  const rt = JSON.stringify({ image: "rt:2" });
  it.each([
    ["an unknown key", { sidecar: rt }, /key "sidecar" is no component/],
    ["not JSON", { "agent-runtime": "{image: rt}" }, /agent-runtime: not JSON/],
    ["an unknown field", { "agent-runtime": JSON.stringify({ imag: "x" }) }, /agent-runtime: .*imag/],
    ["a bad quantity", { csi: JSON.stringify({ image: "c", resources: { requests: { memory: "lots" } } }) }, /csi: resources\.requests\.memory/],
    ["a probe with two handlers", { "agent-runtime": JSON.stringify({ livenessProbe: { httpGet: { path: "/health", port: 1 }, tcpSocket: { port: 1 } } }) }, /exactly one of/],
    ["csi without an image", { csi: JSON.stringify({ kind: "sidecar" }) }, /csi: image: required/],
    ["a pod-policy field that is not the operator's", { "pod-policy": JSON.stringify({ allow: ["hostNetwork"] }) }, /pod-policy: allow\.0/],
  ])("refuses %s", (_name, data, want) => {
    const r = parseInjectionConfig(data);
    expect(r.ok).toBe(false);
    expect(!r.ok && r.message).toMatch(want);
  });

  it("the pod-policy key lists the operator's fields a template may set; the user's replaces the system's", () => {
    const r = parseInjectionConfig({ "pod-policy": JSON.stringify({ allow: ["nodeName", "runtimeClassName"], tolerationKeys: ["dedicated"] }), csi: JSON.stringify({ image: "c" }) });
    expect(r).toEqual({ ok: true, config: { "pod-policy": { allow: ["nodeName", "runtimeClassName"], tolerationKeys: ["dedicated"], nodeSelectorKeys: [], resourceKeys: [], inplaceImages: [] }, csi: { kind: "sidecar", image: "c" } } });
    const none = { allow: [], tolerationKeys: [], nodeSelectorKeys: [], resourceKeys: [], inplaceImages: [] };
    expect(mergeInjection(r.ok ? r.config : {}, { "pod-policy": none })["pod-policy"]).toEqual(none);
    expect(parseInjectionConfig({ "pod-policy": JSON.stringify({ allow: ["hostNetwork"] }) }).ok).toBe(false);
    // Review 26 M7: a second scheduler, resource claims, and extended resources by name.
    const more = parseInjectionConfig({ "pod-policy": JSON.stringify({ allow: ["schedulerName", "resourceClaims"], resourceKeys: ["nvidia.com/gpu"] }) });
    expect(more.ok && more.config["pod-policy"]).toMatchObject({ allow: ["schedulerName", "resourceClaims"], resourceKeys: ["nvidia.com/gpu"] });
  });

  it("the user's components replace the system's by name; the built-in runtime stands where neither names one", () => {
    const system = { csi: { kind: "sidecar" as const, image: "csi:1" } };
    expect(mergeInjection(system, { "agent-runtime": { kind: "sidecar", image: "rt:2" } })).toEqual({ "agent-runtime": { kind: "sidecar", image: "rt:2" }, csi: system.csi });
    expect(mergeInjection(system, {})["agent-runtime"]).toEqual(BUILTIN_INJECTION["agent-runtime"]);
  });

  it("injects in one order whatever the order of runtimes and of the config's keys", () => {
    const config = parseInjectionConfig({ "traffic-proxy": JSON.stringify({ image: "tp" }), csi: JSON.stringify({ image: "c" }), "agent-runtime": rt });
    if (!config.ok) throw new Error(config.message);
    const build = (runtimes: { name: string }[], traffic?: { configMap: string; governed: boolean }) =>
      buildPod({ ...PLAIN_POD, injection: mergeInjection({}, config.config), runtimes, traffic }).spec!.containers.map((c) => c.name);
    // The traffic-proxy comes as the driver's pair (with its ConfigMap), not from `runtimes` alone.
    const traffic = { configMap: "p-traffic", governed: false };
    expect(build([{ name: "traffic-proxy" }, { name: "csi" }], traffic)).toEqual(["main", "agent-runtime", "csi", "traffic-proxy"]);
    expect(build([{ name: "csi" }, { name: "traffic-proxy" }], traffic)).toEqual(["main", "agent-runtime", "csi", "traffic-proxy"]);
    expect(build([{ name: "csi" }, { name: "traffic-proxy" }])).toEqual(["main", "agent-runtime", "csi"]);
    expect(build([])).toEqual(["main", "agent-runtime"]);
  });
});

describe("pod runtime tracing (issue 15: the agent collects)", () => {
  const config = parseInjectionConfig({ "traffic-proxy": JSON.stringify({ image: "tp" }) });
  if (!config.ok) throw new Error(config.message);
  const runtimeEnv = (traffic?: { configMap: string; governed: boolean }) =>
    Object.fromEntries((buildPod({ ...PLAIN_POD, injection: mergeInjection({}, config.config), runtimeSpans: true, traffic }).spec!.containers.find((c) => c.name === "agent-runtime")!.env ?? []).map((e) => [e.name, e.value]));

  it("every pod's runtime keeps its spans for the agent, one with the traffic-proxy pair (governed or open) too; no pod is given a collector's address", () => {
    for (const traffic of [{ configMap: "p-traffic", governed: true }, { configMap: "p-traffic", governed: false }, undefined]) {
      const env = runtimeEnv(traffic);
      expect(env.RUNTIME_TRACING, JSON.stringify(traffic)).toBe("agent");
      expect(env.OTEL_EXPORTER_OTLP_ENDPOINT).toBeUndefined();
    }
  });

  it("is the agent's opt-in: off by default, even with --otlp-endpoint; refused without a collector to forward to", () => {
    expect(podTracingFlag({ "otlp-endpoint": "http://c:4318" })).toBe(false);
    expect(podTracingFlag({ "otlp-endpoint": "http://c:4318", "pod-runtime-tracing": true })).toBe(true);
    expect(() => podTracingFlag({ "pod-runtime-tracing": true })).toThrow(/needs --otlp-endpoint/);
  });
});

describe("claimMetadataProblem", () => {
  it("refuses a claim whose labels or annotations the API server would refuse on a Sandbox, or that use reserved keys", () => {
    expect(claimMetadataProblem({ labels: { purpose: "kube-test" }, annotations: { owner: "ci", "example.com/note": "any text: at all" } })).toBeUndefined();
    expect(claimMetadataProblem({})).toBeUndefined();
    expect(claimMetadataProblem({ labels: { purpose: "has spaces" } })).toMatch(/^spec\.labels: .*not a valid label value/);
    expect(claimMetadataProblem({ labels: { "agents.kruise.io/sandbox-claimed": "false" } })).toMatch(/^spec\.labels: .*reserved/);
    expect(claimMetadataProblem({ annotations: { "agents.kruise.io/edge-generation": "999" } })).toMatch(/^spec\.annotations: .*reserved/);
    expect(claimMetadataProblem({ annotations: { "not valid": "x" } })).toMatch(/^spec\.annotations: .*not a valid annotation key/);
  });
});

describe("userLabels", () => {
  it("keeps valid user labels, drops the agents.kruise.io prefixes and what the API server would refuse", () => {
    expect(
      userLabels({
        purpose: "eval",
        "team.example/owner": "alice",
        empty: "",
        "agents.kruise.io/sandbox-pool": "t/python",
        "e2b.agents.kruise.io/image": "x",
        "bad key": "v",
        long: "v".repeat(64),
        slash: "a/b",
      }),
    ).toEqual({ purpose: "eval", "team.example/owner": "alice", empty: "" });
  });
});

describe("watchNamespacesFlag", () => {
  it("reads --watch-namespaces as a list and --all-namespaces as all; both at once is an error", () => {
    expect(watchNamespacesFlag({})).toBeUndefined();
    expect(watchNamespacesFlag({ "watch-namespaces": "team-a, team-b,," })).toEqual(["team-a", "team-b"]);
    expect(watchNamespacesFlag({ "all-namespaces": true })).toBe("all");
    expect(() => watchNamespacesFlag({ "all-namespaces": true, "watch-namespaces": "a" })).toThrow(/exclude each other/);
  });
});

describe("the agent's urgent lane (claims on pods wait on their runtime's /init)", () => {
  it("runs as many urgent keys at once as urgentConcurrency allows, beside a normal lane of its own size", async () => {
    const started: string[] = [];
    const gates: (() => void)[] = [];
    const work = (key: string) => new Promise<void>((ok) => (started.push(key), gates.push(ok)));
    const q = new WorkQueue({ work, concurrency: 2, urgentConcurrency: 20 });
    for (let i = 0; i < 5; i++) q.add(`warm${i}`);
    for (let i = 0; i < 30; i++) q.add(`claim${i}`, { urgent: true });
    await Promise.resolve();
    expect(started.filter((k) => k.startsWith("claim"))).toHaveLength(20);
    expect(started.filter((k) => k.startsWith("warm"))).toHaveLength(2);
    while (gates.length) {
      for (const release of gates.splice(0)) release();
      await new Promise((r) => setTimeout(r, 0));
    }
    await q.idle();
    expect(new Set(started).size).toBe(35);
  });
});
