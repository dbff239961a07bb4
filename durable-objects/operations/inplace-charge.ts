// Pure: the vCPUs a sandbox is charged when its create resizes the main container's CPU in place
// (E2B `e2b.agents.kruise.io/cpu-limit`, a SandboxClaim's `inplaceUpdate.resources`). The quota
// counts a member at its whole pod (controllers/drivers/kubernetes/pod-resources.ts), and the
// resize changes the main container only: a template of app 1 core + sidecar 2 cores claimed at
// 1 core still holds 3 (review 26 M3); a regular init container's peak is held apart from the
// running containers (the kubelet sizes a pod at the larger of the two), so it is not added to
// the in-place value (review 27 final M2).
import type { TemplateSpec } from "../../schema/api/template.ts";

/**
 * `max(initCpu, restCpu + inplace)` in whole cores, rounded up (the pod's limit is resized to the
 * exact value, so 1.999 is 2, never 1), in millicores so a sum of decimals does not round up a
 * core too many. Where the template states no `restCpu`:
 * - a SandboxSet's (it has `sourceRevision`) sent by an agent that predates `restCpu`: the rest
 *   of the pod is unknown and taken as the whole count (the whole pod plus the in-place value:
 *   never less than the pod holds; an upgraded agent re-sends every SandboxSet when it starts);
 * - any other (admin API, builds): one container, the whole sandbox, so the in-place value alone.
 */
export function inplaceCpuCharge(spec: Pick<TemplateSpec, "cpuCount" | "restCpu" | "initCpu" | "sourceRevision">, inplace: number): number {
  const milli = (cores: number) => Math.ceil(cores * 1000 - 1e-6);
  const rest = spec.restCpu !== undefined ? milli(spec.restCpu) : spec.sourceRevision === undefined ? 0 : spec.cpuCount * 1000;
  const init = spec.restCpu !== undefined ? milli(spec.initCpu ?? 0) : 0;
  return Math.ceil(Math.max(init, rest + milli(inplace)) / 1000);
}
