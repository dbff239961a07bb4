// Pure construction of a sandbox's Pod and PVCs from its template (a SandboxSet's, or a plain
// image). The injection config's components are added (inject.ts): the agent-runtime as a sidecar
// sharing the pod's network and process namespace, so the edge reaches envd at <podIP>:49983
// whatever image the sandbox runs.
import { createHash } from "node:crypto";
import type { V1OwnerReference, V1PersistentVolumeClaim, V1Pod, V1PodSpec, V1PodTemplateSpec, V1Volume } from "@kubernetes/client-node";
import { BUILTIN_INJECTION, type InjectionConfig } from "../../../schema/crd/injection.ts";
import { ANNOTATION, GROUP, INTERPRETER_PORT, LABEL, RUNTIME_CONTAINER, RUNTIME_PORT } from "../../../schema/crd/labels.ts";
import { injectComponents } from "./inject.ts";
import { initCpuLimit, mainContainer, noLimit, podCost, statesNoResources } from "./pod-resources.ts";
import { injectTraffic } from "./traffic-pod.ts";
import { withRuntimeToken } from "./runtime-token.ts";

export interface VolumeClaimTemplate {
  metadata: { name: string; labels?: Record<string, string>; annotations?: Record<string, string> };
  spec?: Record<string, unknown>;
}

export interface PodInput {
  name: string;
  namespace: string;
  template: V1PodTemplateSpec;
  volumeClaimTemplates: VolumeClaimTemplate[];
  /** Labels every object of the sandbox carries (id, pool, claimed, hash). */
  labels: Record<string, string>;
  /** The user's annotations (the pod's own, not its PVCs'). */
  annotations?: Record<string, string>;
  owner: V1OwnerReference;
  /** Image of the agent-runtime where the injection config names none. */
  runtimeImage: string;
  /** The components in force (the built-in agent-runtime when absent). */
  injection?: InjectionConfig;
  /** The template's `runtimes`: which optional components it asks for. */
  runtimes?: { name?: string }[];
  /** A code-interpreter template's pod: its injected agent-runtime runs this image (the runtime
   * with Jupyter's Python kernel) and serves the interpreter on INTERPRETER_PORT. */
  interpreterImage?: string;
  resources: { cpuCount: number; memoryMB: number };
  /** The traffic-proxy pair (traffic-pod.ts) with its policy ConfigMap; `governed`: a policy
   * governs the sandbox now (else the pod's proxy starts open). */
  traffic?: { configMap: string; governed: boolean };
  /** With the agent's `--pod-runtime-tracing`: the runtime container keeps its spans for the agent
   * to collect (see `traceRuntime`). */
  runtimeSpans?: boolean;
  /** The cluster runs native sidecars (traffic-pod.ts nativeSidecarsFor): the proxy is one. */
  nativeSidecar?: boolean;
  /** The pod's Secret holding its runtime's token (runtime-token.ts). */
  runtimeTokenSecret?: string;
  /** The template's `nestedUserNamespaces` (the operator's opt-in): see `seccompFor`. */
  nestedUserNamespaces?: boolean;
}

/** Stable short hash of a template (FNV-1a would do; sha256 is at hand). */
export function templateHash(value: unknown): string {
  return createHash("sha256").update(JSON.stringify(value)).digest("hex").slice(0, 10);
}

/** The default template when a sandbox names an image rather than a SandboxSet. */
export function imageTemplate(image: string): V1PodTemplateSpec {
  return { metadata: {}, spec: { containers: [{ name: "sandbox", image }] } };
}

export function pvcName(vct: VolumeClaimTemplate, sandboxName: string): string {
  return `${vct.metadata.name}-${sandboxName}`.slice(0, 253);
}

export function buildPvc(vct: VolumeClaimTemplate, input: Pick<PodInput, "name" | "namespace" | "labels" | "owner">): V1PersistentVolumeClaim {
  const spec = { accessModes: ["ReadWriteOnce"], volumeMode: "Filesystem", ...(vct.spec ?? {}) } as V1PersistentVolumeClaim["spec"];
  return {
    apiVersion: "v1",
    kind: "PersistentVolumeClaim",
    metadata: {
      name: pvcName(vct, input.name),
      namespace: input.namespace,
      labels: { ...vct.metadata.labels, ...input.labels },
      annotations: vct.metadata.annotations,
      ownerReferences: [input.owner],
    },
    spec,
  };
}

export function buildPod(input: PodInput): V1Pod {
  const spec = structuredClone(input.template.spec ?? { containers: [] });
  const seccomp = seccompFor(spec, input.nestedUserNamespaces ?? false);
  if (seccomp) spec.securityContext = { ...spec.securityContext, seccompProfile: { type: seccomp } };
  // The container pod-resources.ts counts at the default (a declared agent-runtime is sized by
  // inject.ts or by its own resources, never given the default).
  const main = mainContainer(spec);
  const cpu = String(input.resources.cpuCount);
  const memory = `${input.resources.memoryMB}Mi`;
  if (main && statesNoResources(main)) main.resources = { requests: { cpu, memory }, limits: { cpu, memory } };
  // A regular init container without a limit runs alone, bounded by what the pod is counted
  // (initCpuLimit in pod-resources.ts, the rule podCost charges by), so an unbounded one costs no
  // more than the count. A zero limit is none to the kubelet (pod-resources.ts), so it is
  // replaced as a missing one.
  const inits = (spec.initContainers ?? []).filter((c) => c.restartPolicy !== "Always");
  const pool = inits.length ? podCost(input.template.spec ?? { containers: [] }) : { problems: [] };
  // An uncountable pool (a pod not judged by the pool: an image template) is the sandbox's count.
  const poolCpu = "cpu" in pool ? pool.cpu : 0;
  for (const c of inits) {
    const stated = c.resources?.limits ?? {};
    const cpuLimit = initCpuLimit(c, poolCpu, input.resources.cpuCount);
    const noMemory = noLimit(stated.memory);
    if (cpuLimit !== undefined || noMemory) c.resources = { ...c.resources, limits: { ...stated, ...(cpuLimit !== undefined ? { cpu: String(cpuLimit) } : {}), ...(noMemory ? { memory } : {}) } };
  }
  const injection = input.injection ?? BUILTIN_INJECTION;
  const ownRuntime = spec.containers.some((c) => c.name === RUNTIME_CONTAINER);
  injectComponents(spec, injection, input.runtimes, input.runtimeImage);
  // A runtime the template declares itself is the template's, interpreter flags included.
  if (input.interpreterImage && !ownRuntime) serveInterpreter(spec, input.interpreterImage);
  const proxy = injection["traffic-proxy"];
  const proxied = input.traffic !== undefined && proxy?.image !== undefined;
  if (input.runtimeSpans) traceRuntime(spec);
  if (input.runtimeTokenSecret) withRuntimeToken(spec, input.runtimeTokenSecret);
  if (proxied) injectTraffic(spec, proxy, input.traffic!.configMap, input.nativeSidecar);
  spec.shareProcessNamespace ??= true;
  spec.automountServiceAccountToken ??= false;
  const claimVolumes: V1Volume[] = input.volumeClaimTemplates.map((vct) => ({
    name: vct.metadata.name,
    persistentVolumeClaim: { claimName: pvcName(vct, input.name) },
  }));
  const named = new Set(claimVolumes.map((v) => v.name));
  spec.volumes = [...(spec.volumes ?? []).filter((v) => !named.has(v.name)), ...claimVolumes];
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: {
      name: input.name,
      namespace: input.namespace,
      labels: { ...templateLabels(input.template), ...input.labels, [LABEL.createdBy]: "sandbox", ...(proxied ? { [LABEL.trafficProxy]: input.traffic!.governed ? "governed" : "open" } : {}) },
      annotations: input.annotations && Object.keys(input.annotations).length ? { ...templateAnnotations(input.template), ...input.annotations } : templateAnnotations(input.template),
      ownerReferences: [input.owner],
    },
    spec,
  };
}

/**
 * The pod's seccomp profile where the template names none (for the pod or any of its containers),
 * so a template's `nestedUserNamespaces` means on this driver what it means on the local one
 * (../local/README.md, "Seccomp"): without it, `RuntimeDefault`, the container runtime's profile,
 * which (as Docker's, whose rules containerd and CRI-O ship) refuses `unshare` and `clone` with
 * CLONE_NEWUSER to a container without CAP_SYS_ADMIN, where the kubelet's default (no
 * `--seccomp-default`) is no filter at all; with it, `Unconfined`. That gives more than the local
 * driver's opt-in, which keeps the rest of its denylist: the cluster has no profile of ours
 * installed, and Unconfined is what Pod Security Admission lets a namespace allow or refuse (a
 * `baseline` or `restricted` namespace refuses such a pod, and its sandbox says so). A template
 * that names a profile itself (a `Localhost` one allowing user namespaces, say) keeps it: the
 * SandboxSet's author chose (its own `Unconfined` is refused earlier: traffic-pod.ts
 * unsafePodSpec). Not `allowPrivilegeEscalation: false`, which would stop sudo in the sandbox.
 * Undefined: leave the spec as it is.
 */
export function seccompFor(spec: V1PodSpec, nestedUserNamespaces: boolean): "RuntimeDefault" | "Unconfined" | undefined {
  const containers = [...spec.containers, ...(spec.initContainers ?? []), ...(spec.ephemeralContainers ?? [])];
  if (spec.securityContext?.seccompProfile || containers.some((c) => c.securityContext?.seccompProfile)) return undefined;
  return nestedUserNamespaces ? "Unconfined" : "RuntimeDefault";
}

/** The runtime container keeps its spans for the agent to collect (RUNTIME_TRACING=agent:
 * controllers/runtime/agent-spans.ts, controllers/agent/pod-spans.ts), unless the template set its
 * own tracing. The agent pulls them over the connection it opens to the pod, so a pod with the
 * traffic-proxy pair (governed now or later) is traced too: nothing in it connects out for its
 * spans, and no collector address is given to the pod. (Before, the runtime exported to the
 * collector itself: unauthenticated, and impossible through a governed pod's own proxy.) */
function traceRuntime(spec: V1PodSpec): void {
  const rt = spec.containers.find((c) => c.name === RUNTIME_CONTAINER);
  if (!rt || rt.env?.some((e) => e.name === RUNTIME_TRACING_ENV || e.name === OTLP_ENDPOINT_ENV)) return;
  (rt.env ??= []).push({ name: RUNTIME_TRACING_ENV, value: "agent" });
}

/** The variables the runtime reads its tracing from (controllers/runtime/cli.ts). */
export const RUNTIME_TRACING_ENV = "RUNTIME_TRACING";
export const OTLP_ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT";

/** The injected agent-runtime of a code-interpreter pod: the interpreter image, serving port 49999
 * beside envd's (controllers/runtime/cli.ts `--interpreter-port`); the agent's ingress sends a
 * pod's 49999 to the pod like any port. */
function serveInterpreter(spec: V1PodSpec, image: string): void {
  const rt = spec.containers.find((c) => c.name === RUNTIME_CONTAINER);
  if (!rt) return;
  rt.image = image;
  if (!rt.args?.includes("--interpreter-port")) rt.args = [...(rt.args ?? []), "--interpreter-port", String(INTERPRETER_PORT)];
  if (!rt.ports?.some((p) => p.containerPort === INTERPRETER_PORT)) rt.ports = [...(rt.ports ?? []), { name: "interpreter", containerPort: INTERPRETER_PORT }];
}

/**
 * The template's own pod labels without the agent's reserved `agents.kruise.io/` keys: those say
 * what the agent made (the traffic-proxy marker, pool, claim, id), so a template cannot fake them
 * (a `traffic-proxy: governed` from the template would pass a pod without the proxy as governed).
 */
function templateLabels(template: V1PodTemplateSpec): Record<string, string> {
  return Object.fromEntries(Object.entries(template.metadata?.labels ?? {}).filter(([k]) => !k.startsWith(`${GROUP}/`)));
}

/**
 * The runtime-url annotation is honoured only where a test kubelet runs each pod's runtime as a
 * host process and says where (`KRUISE_TEST_RUNTIME_URL_ANNOTATION=1`: the kube tier and its
 * bench). Anywhere else the agent would send a sandbox's token, env and every ingress request to
 * an address that anyone who may annotate the pod (or write its template) chose: a request forgery
 * from the agent's network position. Read once, at the first use: it is the process's deployment,
 * not a setting.
 */
let trustRuntimeUrlAnnotation: boolean | undefined;

/** The template's own pod annotations without the runtime-url one, which only a test kubelet
 * writes (see runtimeUrl). */
function templateAnnotations(template: V1PodTemplateSpec): Record<string, string> | undefined {
  const a = template.metadata?.annotations;
  if (!a || !(ANNOTATION.runtimeUrl in a)) return a;
  const { [ANNOTATION.runtimeUrl]: _dropped, ...rest } = a;
  return rest;
}

/** Where a pod's runtime answers: `http://<podIP>:49983` (the runtime-url annotation instead, under
 * a test kubelet only). */
export function runtimeUrl(pod: V1Pod | undefined): string | undefined {
  if (!pod) return undefined;
  trustRuntimeUrlAnnotation ??= process.env.KRUISE_TEST_RUNTIME_URL_ANNOTATION === "1";
  const annotated = trustRuntimeUrlAnnotation ? pod.metadata?.annotations?.[ANNOTATION.runtimeUrl] : undefined;
  return annotated ?? (pod.status?.podIP ? `http://${pod.status.podIP}:${RUNTIME_PORT}` : undefined);
}
