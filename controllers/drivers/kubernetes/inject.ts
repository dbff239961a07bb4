// Pure: adds the injection config's components (schema/crd/injection.ts) to a pod spec. The
// agent-runtime always (this platform reaches every sandbox through it); `csi` and `traffic-proxy`
// only when the template's `runtimes` names them. Init components go after the template's init
// containers, sidecars after its containers, both in INJECTION_COMPONENTS order, so pods built
// under any config or `runtimes` order list them the same way. A component the template declares
// itself (same container name) keeps the template's fields; only the probes (and resources) it
// lacks are added, so a probe the template declares is never overwritten.
import type { V1Container, V1PodSpec, V1Probe } from "@kubernetes/client-node";
import { INJECTION_COMPONENTS, type InjectionComponent, type InjectionComponentName, type InjectionConfig } from "../../../schema/crd/injection.ts";
import { RUNTIME_CONTAINER } from "../../../schema/crd/labels.ts";

const PROBES = ["readinessProbe", "startupProbe", "livenessProbe"] as const;

/** The components a template gets, in injection order. */
export function wantedComponents(runtimes: { name?: string }[] | undefined): InjectionComponentName[] {
  const named = new Set((runtimes ?? []).map((r) => r.name));
  // The traffic-proxy is not a container of its own here: a governed sandbox's pod gets the
  // redirect and the proxy together (traffic-pod.ts), whatever `runtimes` says.
  return INJECTION_COMPONENTS.filter((c) => c !== "traffic-proxy" && (c === RUNTIME_CONTAINER || named.has(c)));
}

function container(name: string, c: InjectionComponent, runtimeImage: string): V1Container {
  const out: V1Container = { name, image: c.image ?? runtimeImage };
  for (const k of ["command", "args", "env", "ports", "volumeMounts", ...PROBES] as const) {
    if (c[k] !== undefined) (out as unknown as Record<string, unknown>)[k] = structuredClone(c[k]);
  }
  // Requests and limits as injected: the claim-time resize patches the main container only.
  if (c.resources) out.resources = structuredClone(c.resources) as V1Container["resources"];
  return out;
}

/** Adds the wanted components of `config` to `spec` (mutated on purpose: the caller's own copy). */
export function injectComponents(spec: V1PodSpec, config: InjectionConfig, runtimes: { name?: string }[] | undefined, runtimeImage: string): void {
  for (const name of wantedComponents(runtimes)) {
    const c = config[name];
    if (!c) continue;
    const declared = [...spec.containers, ...(spec.initContainers ?? [])].find((x) => x.name === name);
    if (declared) {
      for (const p of PROBES) if (!declared[p] && c[p]) declared[p] = structuredClone(c[p]) as V1Probe;
      // One that states no resources is sized as an injected one, and not counted against the
      // team (pod-resources.ts); one that states them is the template's, and counted.
      if (!declared.resources && c.resources) declared.resources = structuredClone(c.resources) as V1Container["resources"];
    } else if (c.kind === "init") {
      (spec.initContainers ??= []).push(container(name, c, runtimeImage));
    } else {
      spec.containers.push(container(name, c, runtimeImage));
    }
    for (const v of c.volumes ?? []) {
      if (!(spec.volumes ?? []).some((x) => x.name === v.name)) (spec.volumes ??= []).push(structuredClone(v));
    }
  }
}
