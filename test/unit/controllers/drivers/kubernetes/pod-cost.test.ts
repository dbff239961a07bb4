// What a SandboxSet's pod costs the team's quota (review 25 M2): every container, init containers
// as the kubelet sizes a pod, limits (or larger requests), and no default for what has no limit.
import { describe, expect, it, vi } from "vitest";
import { mainContainer, podCost, unsizedRuntimeProblems } from "../../../../../controllers/drivers/kubernetes/pod-resources.ts";
import { PodWriter } from "../../../../../controllers/drivers/kubernetes/pod-writer.ts";
import { LinkPoolSink, poolSpecOf, UncountableSandboxSet } from "../../../../../controllers/agent/kube-sync/sandboxset-sync.ts";
import { buildPod } from "../../../../../controllers/drivers/kubernetes/pod-spec.ts";
import { inplaceCpuCharge } from "../../../../../durable-objects/operations/inplace-charge.ts";

const GI = 2 ** 30;
const MI = 2 ** 20;
const lim = (cpu: string, memory: string) => ({ limits: { cpu, memory } });
type C = { name: string; image?: string; restartPolicy?: string; resources?: Record<string, Record<string, string>> };
const set = (containers: C[], initContainers?: C[]) => ({ metadata: { name: "s", generation: 1 }, spec: { replicas: 1, template: { spec: { containers, ...(initContainers ? { initContainers } : {}) } } } }) as never;

const podInput = (containers: C[], initContainers?: C[]) => ({
  name: "p",
  namespace: "ns",
  template: { spec: { containers, ...(initContainers ? { initContainers } : {}) } },
  volumeClaimTemplates: [],
  labels: {},
  owner: { apiVersion: "agents.kruise.io/v1alpha1", kind: "Sandbox", name: "p", uid: "u" },
  runtimeImage: "rt:1",
  resources: { cpuCount: 2, memoryMB: 1024 },
});

describe("podCost", () => {
  it.each<[string, C[], C[] | undefined, { cpu: number; memory: number; restCpu: number; initCpu: number }]>([
    ["a single container with nothing stated: the pool's default", [{ name: "main" }], undefined, { cpu: 1, memory: 512 * MI, restCpu: 0, initCpu: 0 }],
    ["exponent forms counted as the API server reads them", [{ name: "main", resources: lim("64e0", "64e9") }], undefined, { cpu: 64, memory: 64e9, restCpu: 0, initCpu: 0 }],
    ["every container, not the first only", [{ name: "main", resources: lim("1", "1Gi") }, { name: "side", resources: lim("32", "64Gi") }], undefined, { cpu: 33, memory: 65 * GI, restCpu: 32, initCpu: 0 }],
    ["a request above its limit counts", [{ name: "main", resources: { limits: { cpu: "1", memory: "1Gi" }, requests: { cpu: "3" } } }], undefined, { cpu: 3, memory: GI, restCpu: 0, initCpu: 0 }],
    ["a regular init container: the max, not the sum", [{ name: "main", resources: lim("2", "1Gi") }], [{ name: "a", resources: lim("4", "512Mi") }, { name: "b", resources: lim("1", "3Gi") }], { cpu: 4, memory: 3 * GI, restCpu: 0, initCpu: 4 }],
    [
      "a sidecar init container adds to the containers and to the inits after it",
      [{ name: "main", resources: lim("1", "1Gi") }],
      [{ name: "proxy", restartPolicy: "Always", resources: lim("2", "1Gi") }, { name: "fetch", resources: lim("2", "1Gi") }],
      { cpu: 4, memory: 2 * GI, restCpu: 2, initCpu: 4 },
    ],
    ["a regular init container with no limit: bounded by the pod's count (buildPod)", [{ name: "main" }], [{ name: "fetch" }], { cpu: 1, memory: 512 * MI, restCpu: 0, initCpu: 1 }],
    // buildPod gives it the count as its limit whatever it requests (initCpuLimit; review 27 final L5).
    ["a regular init container with a request and no limit holds the count, not its request", [{ name: "main", resources: lim("10", "1Gi") }], [{ name: "warm", resources: { requests: { cpu: "8" } } }], { cpu: 10, memory: GI, restCpu: 0, initCpu: 10 }],
    [
      "a regular init container with no limit holds the count beside the sidecars started before it",
      [{ name: "main", resources: lim("1", "1Gi") }],
      [{ name: "proxy", restartPolicy: "Always", resources: lim("2", "1Gi") }, { name: "fetch" }],
      { cpu: 3, memory: 2 * GI, restCpu: 2, initCpu: 5 },
    ],
    ["a template's own agent-runtime with no resources is sized by the injection config, not counted", [{ name: "main" }, { name: "agent-runtime" }], undefined, { cpu: 1, memory: 512 * MI, restCpu: 0, initCpu: 0 }],
    ["a template's own agent-runtime with resources is counted", [{ name: "main", resources: lim("1", "1Gi") }, { name: "agent-runtime", resources: lim("8", "8Gi") }], undefined, { cpu: 9, memory: 9 * GI, restCpu: 8, initCpu: 0 }],
  ])("%s", (_name, containers, inits, want) => {
    expect(podCost({ containers, ...(inits ? { initContainers: inits } : {}) })).toEqual({ ...want, problems: [] });
  });

  it.each<[string, C[], C[] | undefined, RegExp]>([
    ["requests only", [{ name: "main", resources: { requests: { cpu: "1", memory: "128Mi" } } }], undefined, /container "main": no cpu or memory limit/],
    ["a CPU limit but no memory limit", [{ name: "main", resources: { limits: { cpu: "1" } } }], undefined, /container "main": no memory limit/],
    ["a second container with nothing stated", [{ name: "main" }, { name: "side" }], undefined, /container "main": no cpu or memory limit.*container "side": no cpu or memory limit/],
    ["a sidecar init container without limits", [{ name: "main", resources: lim("1", "1Gi") }], [{ name: "proxy", restartPolicy: "Always" }], /container "proxy": no cpu or memory limit/],
    ["a value that is no quantity", [{ name: "main", resources: lim("lots", "1Gi") }], undefined, /resources\.limits\.cpu "lots" is not a quantity/],
    ["a negative value", [{ name: "main", resources: lim("1", "-1Gi") }], undefined, /resources\.limits\.memory "-1Gi" is not a quantity/],
    // H3 (review 26): the kubelet reads a zero limit as none; every spelling the API server takes.
    ...["0", "0Gi", "0e9", "-0", ".0", "0."].map((zero): [string, C[], C[] | undefined, RegExp] => [`a zero limit (${zero}) is no limit, never 0`, [{ name: "main", resources: lim("1", "1Gi") }, { name: "side", resources: lim(zero, zero) }], undefined, /container "side": no cpu or memory limit/]),
    ["a single container whose limits are zero is not the defaulted one", [{ name: "main", resources: lim("0", "0") }], undefined, /container "main": no cpu or memory limit/],
  ])("refused: %s", (_name, containers, inits, want) => {
    const cost = podCost({ containers, ...(inits ? { initContainers: inits } : {}) });
    expect("cpu" in cost).toBe(false);
    expect(cost.problems.join("; ")).toMatch(want);
  });
});

describe("a template-declared agent-runtime without resources (review 26 M2)", () => {
  const declared = { containers: [{ name: "main" }, { name: "agent-runtime", image: "mine:1" }] };
  it("is refused when the injection config gives the agent-runtime no CPU and memory limits: it would run unbounded and uncounted", () => {
    for (const configured of [undefined, { requests: { cpu: "1", memory: "1Gi" } }, { limits: { cpu: "500m" } }, { limits: { cpu: "0", memory: "0Gi" } }]) {
      expect(unsizedRuntimeProblems(declared, configured)).toEqual([expect.stringMatching(/container "agent-runtime" states no resources/)]);
    }
  });
  it("runs when the config bounds it, or when it states its own resources (then podCost counts it)", () => {
    expect(unsizedRuntimeProblems(declared, { limits: { cpu: "500m", memory: "256Mi" } })).toEqual([]);
    expect(unsizedRuntimeProblems({ containers: [{ name: "main" }, { name: "agent-runtime", resources: lim("1", "1Gi") }] }, undefined)).toEqual([]);
    expect(unsizedRuntimeProblems({ containers: [{ name: "main" }] }, undefined)).toEqual([]);
  });
});

describe("poolSpecOf counts the whole pod", () => {
  it("sums every container and rounds up", () => {
    const spec = poolSpecOf(set([{ name: "main", image: "python:3.12", resources: lim("1500m", "768Mi") }, { name: "side", resources: lim("32", "64Gi") }], [{ name: "init", resources: lim("40", "1Gi") }]), "c");
    expect(spec).toMatchObject({ image: "python:3.12", cpuCount: 40, memoryMB: 64 * 1024 + 768 });
  });

  it("a pod summing past what a template may have (or past any finite number) is refused as uncountable, not retried for ever (review 26 L2)", () => {
    expect(podCost({ containers: [{ name: "a", resources: lim("1.7e308", "1Gi") }, { name: "b", resources: lim("1.7e308", "1Gi") }] }).problems).toEqual(["the pod's cpu limits sum to more than can be counted"]);
    expect(() => poolSpecOf(set([{ name: "a", resources: lim("1.7e308", "1Gi") }, { name: "b", resources: lim("1.7e308", "1Gi") }]), "c")).toThrow(UncountableSandboxSet);
    expect(() => poolSpecOf(set([{ name: "main", resources: lim("200", "1Gi") }, { name: "side", resources: lim("57", "1Gi") }]), "c")).toThrow(/257 cores and 2048 MiB, more than a template may have \(256 cores, 1048576 MiB\)/);
    expect(() => poolSpecOf(set([{ name: "main", resources: lim("1", "1025Gi") }]), "c")).toThrow(UncountableSandboxSet);
    expect(poolSpecOf(set([{ name: "main", resources: lim("200", "512Gi") }, { name: "side", resources: lim("56", "512Gi") }]), "c")).toMatchObject({ cpuCount: 256, memoryMB: 1_048_576 });
  });

  it("sends the rest of the pod, which a claim's in-place CPU leaves as it is (review 26 M3)", () => {
    const sidecar = { name: "side", resources: lim("2", "1Gi") };
    expect(poolSpecOf(set([{ name: "app", resources: lim("1", "1Gi") }, sidecar]), "c")).toMatchObject({ cpuCount: 3, restCpu: 2, initCpu: 0 });
    expect(poolSpecOf(set([{ name: "app", resources: lim("500m", "1Gi") }, sidecar]), "c")).toMatchObject({ cpuCount: 3, restCpu: 2, initCpu: 0 });
    expect(poolSpecOf(set([{ name: "app", resources: lim("1", "1Gi") }], [{ ...sidecar, restartPolicy: "Always" }]), "c")).toMatchObject({ cpuCount: 3, restCpu: 2, initCpu: 0 });
    expect(poolSpecOf(set([{ name: "agent-runtime", resources: lim("250m", "1Gi") }, { name: "app", resources: lim("1", "1Gi") }]), "c")).toMatchObject({ cpuCount: 2, restCpu: 0.25, initCpu: 0 });
    // One container: nothing beside it.
    expect(poolSpecOf(set([{ name: "app" }]), "c")).toMatchObject({ cpuCount: 1, restCpu: 0, initCpu: 0 });
  });

  it("sends a regular init container's peak apart from the rest: the pod holds it before the app starts, never beside it (review 27 final M2)", () => {
    const app = { name: "app", resources: lim("100m", "1Gi") };
    expect(poolSpecOf(set([app], [{ name: "warm", resources: lim("64", "1Gi") }]), "c")).toMatchObject({ cpuCount: 64, restCpu: 0, initCpu: 64 });
    expect(poolSpecOf(set([app], [{ name: "warm", resources: { requests: { cpu: "8" } } }]), "c")).toMatchObject({ cpuCount: 8, restCpu: 0, initCpu: 8 });
    // An init container stating no CPU gets the count as its limit (initCpuLimit).
    expect(poolSpecOf(set([{ name: "app", resources: lim("1500m", "1Gi") }], [{ name: "fetch" }]), "c")).toMatchObject({ cpuCount: 2, restCpu: 0, initCpu: 2 });
    expect(poolSpecOf(set([{ name: "app", resources: lim("4", "1Gi") }, { name: "side", resources: lim("2", "1Gi") }], [{ name: "warm", resources: lim("1", "1Gi") }]), "c")).toMatchObject({ cpuCount: 6, restCpu: 2, initCpu: 1 });
  });

  // The charge checked against the pod made for the claim (buildPod with the claim's count, the
  // main container then resized in place), sized as the kubelet sizes it (podCost over the
  // template's containers; the injected ones are the operator's and not counted).
  it.each<[string, C[], C[] | undefined, number]>([
    ["one container + an init stating no CPU, claimed at 2", [{ name: "app" }], [{ name: "fetch" }], 2],
    ["app 4 + an init stating no CPU, claimed at 2", [{ name: "app", resources: lim("4", "1Gi") }], [{ name: "fetch" }], 2],
    ["app 4 + an init stating no CPU, claimed at 6", [{ name: "app", resources: lim("4", "1Gi") }], [{ name: "fetch" }], 6],
    ["app 1 + sidecar 2, claimed at 1", [{ name: "app", resources: lim("1", "1Gi") }, { name: "side", resources: lim("2", "1Gi") }], undefined, 1],
    ["app 1 + native sidecar 2 + init 3, claimed at 0.5", [{ name: "app", resources: lim("1", "1Gi") }], [{ name: "proxy", restartPolicy: "Always", resources: lim("2", "1Gi") }, { name: "fetch", resources: lim("3", "1Gi") }], 0.5],
    ["app 1 + native sidecar 2 + init 3, claimed at 1.5", [{ name: "app", resources: lim("1", "1Gi") }], [{ name: "proxy", restartPolicy: "Always", resources: lim("2", "1Gi") }, { name: "fetch", resources: lim("3", "1Gi") }], 1.5],
    ["app 100m + an init requesting 8, claimed at 1", [{ name: "app", resources: lim("100m", "1Gi") }], [{ name: "warm", resources: { requests: { cpu: "8" } } }], 1],
  ])("an in-place claim is charged what its pod holds: %s (review 27 final M2)", (_name, containers, inits, inplace) => {
    const charge = inplaceCpuCharge(poolSpecOf(set(containers, inits), "c"), inplace);
    const pod = buildPod({ ...podInput(containers, inits), resources: { cpuCount: inplace, memoryMB: 1024 } } as never);
    const main = mainContainer(pod.spec)!;
    main.resources = { ...main.resources, limits: { ...main.resources?.limits, cpu: String(inplace) }, requests: { ...main.resources?.requests, cpu: String(inplace) } };
    const own = new Set([...containers, ...(inits ?? [])].map((c) => c.name));
    const held = podCost({ containers: pod.spec!.containers.filter((c) => own.has(c.name)), initContainers: (pod.spec!.initContainers ?? []).filter((c) => own.has(c.name)) } as never);
    expect(held).toMatchObject({ problems: [] });
    expect(charge).toBe(Math.ceil((held as { cpu: number }).cpu - 1e-9));
  });

  it("restCpu and initCpu go only to an edge that lists them: an older edge's strict schema would refuse the whole SandboxSet", async () => {
    const spec = poolSpecOf(set([{ name: "app", resources: lim("1", "1Gi") }, { name: "side", resources: lim("2", "1Gi") }]), "c");
    for (const listed of [true, false]) {
      const sent: { spec: Record<string, unknown> }[] = [];
      const link = { supports: (f: string) => listed && f === "sandboxsetCpuShares", call: async (c: { item: { spec: Record<string, unknown> } }) => (sent.push(c.item), { id: "x", result: "applied" as const }) };
      await new LinkPoolSink(link as never).upsert({ namespace: "n", name: "s", uid: "u", generation: 1, spec });
      expect(sent[0]!.spec).toMatchObject({ cpuCount: 3 });
      expect("restCpu" in sent[0]!.spec).toBe(listed);
      expect("initCpu" in sent[0]!.spec).toBe(listed);
    }
  });

  it("a SandboxSet it cannot count is refused, never counted as the default", () => {
    expect(() => poolSpecOf(set([{ name: "main", resources: { requests: { cpu: "1", memory: "128Mi" } } }]), "c")).toThrow(UncountableSandboxSet);
    expect(() => poolSpecOf(set([{ name: "main", resources: lim("1", "1Gi") }, { name: "side", resources: { limits: { cpu: "32" } } }]), "c")).toThrow(/container "side": no memory limit/);
  });
});

describe("the pod as built stays within the count", () => {
  const input = podInput;

  it("the default goes to the container counted at it, not to a declared agent-runtime listed first", () => {
    const pod = buildPod(input([{ name: "agent-runtime", image: "rt" }, { name: "main", image: "x" }]) as never);
    expect(pod.spec!.containers.find((c) => c.name === "main")!.resources).toEqual({ requests: { cpu: "2", memory: "1024Mi" }, limits: { cpu: "2", memory: "1024Mi" } });
    expect(podCost({ containers: [{ name: "agent-runtime" }, { name: "main" }] })).toMatchObject({ cpu: 1 });
  });

  it("a regular init container without limits gets the pod's count as its limits; one with its own keeps them", () => {
    const pod = buildPod(input([{ name: "main", resources: lim("2", "1Gi") }], [{ name: "fetch" }, { name: "own", resources: { limits: { cpu: "1" } } }]) as never);
    const [fetch, own] = pod.spec!.initContainers!;
    expect(fetch!.resources).toEqual({ limits: { cpu: "2", memory: "1024Mi" } });
    expect(own!.resources).toEqual({ limits: { cpu: "1", memory: "1024Mi" } });
  });

  it("a regular init container's zero limit is replaced as a missing one (the kubelet reads it as none)", () => {
    const pod = buildPod(input([{ name: "main", resources: lim("2", "1Gi") }], [{ name: "zero", resources: lim("0", "-0") }, { name: "half", resources: lim("0Gi", "256Mi") }]) as never);
    const [zero, half] = pod.spec!.initContainers!;
    expect(zero!.resources).toEqual({ limits: { cpu: "2", memory: "1024Mi" } });
    expect(half!.resources).toEqual({ limits: { cpu: "2", memory: "256Mi" } });
    expect(podCost({ containers: [{ name: "main", resources: lim("2", "1Gi") }], initContainers: [{ name: "zero", resources: lim("0", "0") }] })).toEqual({ cpu: 2, memory: GI, restCpu: 0, initCpu: 2, problems: [] });
  });

  it("a regular init container's CPU limit is never below its request after an in-place decrease: a pod made again is not refused (review 26 L5)", () => {
    // The pool counts the init container's request (8); the claim resized the main container to 1.
    const pod = buildPod({ ...input([{ name: "main" }], [{ name: "warm", resources: { requests: { cpu: "8" } } }]), resources: { cpuCount: 1, memoryMB: 512 } } as never);
    expect(pod.spec!.initContainers![0]!.resources).toEqual({ requests: { cpu: "8" }, limits: { cpu: "8", memory: "512Mi" } });
    expect(pod.spec!.containers.find((c) => c.name === "main")!.resources!.limits).toEqual({ cpu: "1", memory: "512Mi" });
  });

});

describe("one main container (review 26 L3, M3)", () => {
  const containers: C[] = [
    { name: "agent-runtime", image: "my-runtime:1", resources: lim("500m", "256Mi") },
    { name: "app", image: "python:3.12", resources: lim("2", "1Gi") },
  ];

  it("the edge's image and the in-place image and CPU patch name the same container, not a declared agent-runtime listed first", async () => {
    expect(mainContainer({ containers })?.name).toBe("app");
    expect(poolSpecOf(set(containers), "c")).toMatchObject({ image: "python:3.12" });
    const patched: string[] = [];
    const pod = (body: { spec: { containers: { name: string }[] } }) => {
      patched.push(body.spec.containers[0]!.name);
      return { metadata: { name: "p" } };
    };
    const ctx = {
      count: () => {},
      core: { patchNamespacedPod: vi.fn(async ({ body }) => pod(body)), patchNamespacedPodResize: vi.fn(async ({ body }) => pod(body)) },
      custom: { patchNamespacedCustomObject: vi.fn(async () => ({ metadata: { name: "s" } })) },
    };
    const writer = new PodWriter(ctx as never, { event: async () => {} } as never, "rt:1", () => ({}), "ci:1", {} as never);
    const sc = { namespace: "ns", pods: { remember: () => {} }, sandboxes: { remember: (x: unknown) => x } };
    await writer.inplace(sc as never, { metadata: { name: "s" }, spec: { template: { spec: { containers } } } } as never, { metadata: { name: "p", uid: "u" } }, { image: "python:3.13", cpuCount: 4 });
    expect(patched).toEqual(["app", "app"]);
  });
});
