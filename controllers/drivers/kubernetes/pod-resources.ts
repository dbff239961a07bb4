// Pure: the CPU and memory a pod template costs, as the quota counts it (review 25, M2). The
// kubelet sizes a pod as the larger of (its containers' sum plus its sidecar init containers')
// and (each regular init container plus the sidecars started before it), so that is the sum
// counted here, over every container the template declares, not the first one only.
//
// What a container costs: its limit, or its request where that is larger (the API server refuses
// such a pod, so the count never drops below what it would be given). A limit is what bounds a
// container; one without a limit is unbounded, and an unbounded container cannot be counted:
// - The first container with no resources at all, when it is the pod's only long-running one,
//   costs the pool's default (1 core, 512 MiB): buildPod gives it the counted values as its
//   limits and requests (as it always did). A single-container template keeps working unchanged.
// - A regular init container runs alone before the others: one with no limit for a resource is
//   given the pod's counted value as its limit (buildPod), so it adds nothing beyond the count.
//   Known gap (review 27 final, not fixed): sidecar init containers started before it run beside
//   it, so the kubelet sizes that phase at the count plus those sidecars, which the count (the
//   charge without an in-place value) leaves out; `initCpu` includes them.
// - A template-declared agent-runtime with no resources gets the injection config's (inject.ts),
//   as an injected one does: not counted. When the config gives it no CPU and memory limits it
//   would run unbounded: the driver refuses such a pod (unsizedRuntimeProblems; review 26 M2).
// - Any other container without a CPU or memory limit (a second container, a sidecar init
//   container, one with requests only), or a value that is no quantity: the template is refused
//   (the caller says why), never counted as a default.
// - A limit of zero (`0`, `0Gi`, `-0`, `.0`) is no limit: the kubelet reads a zero limit as none
//   (no CFS quota, no memory limit), so it is treated as missing, never counted as 0.
// - A sum that is not a finite number is refused; one above what an edge template may have is
//   refused by poolSpecOf (sandboxset-sync.ts).
// The injected components (agent-runtime, csi, traffic-proxy and its init containers) are the
// platform's, sized by the operator's injection config, and are not counted against the team.
import { RUNTIME_CONTAINER } from "../../../schema/crd/labels.ts";
import { parseQuantity } from "../../../schema/crd/quantity.ts";

/** What a pool member costs when its only container states nothing (cores; bytes). */
export const DEFAULT_CPU = 1;
export const DEFAULT_MEMORY = 512 * 2 ** 20;

type Resources = { limits?: Record<string, unknown>; requests?: Record<string, unknown> };
type Container = { name?: string; restartPolicy?: string; resources?: Resources };
type Spec = { containers?: Container[]; initContainers?: Container[] };
const KEYS = ["cpu", "memory"] as const;

/** `restCpu`: the CPU of every long-running container but the main one (sidecar init containers
 * included), which an in-place resize of the main container leaves as it is (review 26 M3).
 * `initCpu`: the largest CPU a regular init container (with the sidecars started before it) holds;
 * one that states no CPU limit holds what initCpuLimit gives it. The kubelet sizes the pod at the
 * larger of the two phases, so a claim resized in place holds `max(initCpu, restCpu + its value)`
 * (inplace-charge.ts; review 27 final M2). */
export type PodCost = { cpu: number; memory: number; restCpu: number; initCpu: number; problems: [] } | { problems: string[] };

/** The template's main container: its first that is not an agent-runtime. The one whose image
 * and env the edge's template names (sandboxset-sync.ts), that a single-container template's
 * default goes to (buildPod) and that an in-place image or CPU change patches (pod-writer.ts):
 * one definition, so these never name different containers (review 26 L3, M3). */
export function mainContainer<C extends { name?: string }>(spec: { containers?: C[] } | undefined): C | undefined {
  return spec?.containers?.find((c) => c.name !== RUNTIME_CONTAINER);
}

/** The CPU limit buildPod gives a regular init container that states none (a zero is none, see
 * above), or undefined when it states its own: the larger of the sandbox's count and the pool's
 * (`poolCpu`, the template's whole pod, which counts the init container's request), in whole
 * cores. One rule for the pod made and the pod counted (podCost's `initCpu`; review 27 final L5):
 * a claim's in-place CPU below the init container's request would otherwise give a pod made
 * again (a resume after a Stop pause) a limit under its request, which the API server refuses
 * (review 26 L5). */
export function initCpuLimit(c: Container, poolCpu: number, sandboxCpu = 0): number | undefined {
  return noLimit(c.resources?.limits?.cpu) ? Math.max(sandboxCpu, wholeCores(poolCpu)) : undefined;
}

/** True when buildPod gives the container the counted values as limits (it states none). */
export function statesNoResources(c: Container | undefined): boolean {
  return !!c && !c.resources?.limits && !c.resources?.requests;
}

/** The pod template's cost in cores and bytes, or why it cannot be counted. */
export function podCost(spec: Spec): PodCost {
  const problems: string[] = [];
  /** container → the resources it states no limit for */
  const unlimited = new Map<Container, string[]>();
  const containers = (spec.containers ?? []).filter((c) => !(c.name === RUNTIME_CONTAINER && !c.resources));
  const inits = spec.initContainers ?? [];
  const sidecar = (c: Container) => c.restartPolicy === "Always";
  const first = mainContainer(spec);
  const defaulted = statesNoResources(first) && containers.length === 1 && !inits.some(sidecar);
  const cost = (c: Container, key: (typeof KEYS)[number], regularInit: boolean): number => {
    const what = `container ${JSON.stringify(c.name ?? "?")}`;
    const read = (kind: "limits" | "requests") => {
      const raw = c.resources?.[kind]?.[key];
      if (raw === undefined) return undefined;
      const n = parseQuantity(raw);
      if (n === undefined || n < 0) problems.push(`${what}: resources.${kind}.${key} ${JSON.stringify(raw).slice(0, 70)} is not a quantity`);
      return n ?? 0;
    };
    const limit = read("limits");
    const request = read("requests") ?? 0;
    // `!limit`: a zero limit is none to the kubelet (see above).
    if (limit) return Math.max(limit, request);
    if (regularInit) return request;
    if (c === first && defaulted) return key === "cpu" ? DEFAULT_CPU : DEFAULT_MEMORY;
    unlimited.set(c, [...(unlimited.get(c) ?? []), key]);
    return 0;
  };
  const total = { cpu: 0, memory: 0 };
  let restCpu = 0;
  let initPeak = 0;
  /** each regular init container with the CPU of the sidecars started before it */
  const regularInits: [Container, number][] = [];
  for (const key of KEYS) {
    let sidecars = 0;
    let peak = 0;
    for (const c of inits) {
      if (sidecar(c)) sidecars += cost(c, key, false);
      else {
        peak = Math.max(peak, cost(c, key, true) + sidecars);
        if (key === "cpu") regularInits.push([c, sidecars]);
      }
    }
    let running = sidecars;
    let main = 0;
    for (const c of containers) {
      const n = cost(c, key, false);
      running += n;
      if (c === first) main = n;
    }
    total[key] = Math.max(running, peak);
    if (key === "cpu") {
      restCpu = running - main;
      initPeak = peak;
    }
  }
  // An init container stating no CPU limit holds the limit buildPod gives it (the sandbox's own
  // count, which the in-place value stands for, is taken as 0: the charge adds restCpu + it).
  const initCpu = Math.max(initPeak, ...regularInits.map(([c, before]) => (initCpuLimit(c, total.cpu) ?? 0) + before));
  // Limits near the largest double sum to Infinity: no count (review 26 L2).
  for (const key of KEYS) if (!Number.isFinite(total[key])) problems.push(`the pod's ${key} limits sum to more than can be counted`);
  for (const [c, keys] of unlimited) {
    problems.push(`container ${JSON.stringify(c.name ?? "?")}: no ${keys.join(" or ")} limit (the quota counts every container's CPU and memory limits; only a template's single container may state neither, and gets the pool's default)`);
  }
  return problems.length ? { problems } : { ...total, restCpu, initCpu, problems: [] };
}

/** A pod's CPU as the pool counts it (its template's `cpuCount`): whole cores, rounded up (a pod
 * of 1.5 cores is 2, never 1), at least one. */
export function wholeCores(cpu: number): number {
  return Math.max(1, Math.ceil(cpu - 1e-9));
}

/** True when a stated limit is none to the kubelet: absent, or zero in any spelling. */
export function noLimit(raw: unknown): boolean {
  return raw === undefined || parseQuantity(raw) === 0;
}

/** Why a template-declared agent-runtime that states no resources cannot run: inject.ts gives it
 * the injection config's `resources`, and podCost does not count it, so unless those bound both
 * CPU and memory it would run unbounded and uncounted. Judged when a pod is made (the config is
 * the cluster's, read then), not when the SandboxSet is counted. */
export function unsizedRuntimeProblems(spec: Spec, configured: Resources | undefined): string[] {
  if (!noLimit(configured?.limits?.cpu) && !noLimit(configured?.limits?.memory)) return [];
  if (!(spec.containers ?? []).some((c) => c.name === RUNTIME_CONTAINER && !c.resources)) return [];
  return [`container "${RUNTIME_CONTAINER}" states no resources and the injection config gives the agent-runtime no CPU and memory limits (it would run unbounded and uncounted): state its limits`];
}
