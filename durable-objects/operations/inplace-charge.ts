// Pure: the vCPUs a sandbox is charged when its create resizes the main container's CPU in place
// (E2B `e2b.agents.kruise.io/cpu-limit`, a SandboxClaim's `inplaceUpdate.resources`). The quota
// counts a member at its whole pod (controllers/drivers/kubernetes/pod-resources.ts), and the
// resize changes the main container only: a template of app 1 core + sidecar 2 cores claimed at
// 1 core still holds 3 (review 26 M3).
import type { TemplateSpec } from "../../schema/api/template.ts";

/**
 * `cpuCount − mainCpu + inplace` in whole cores, rounded up (the pod's limit is resized to the
 * exact value, so 1.999 is 2, never 1), in millicores so a sum of decimals does not round up a
 * core too many. `mainCpu` is clamped to `cpuCount`, so the charge is never below the in-place
 * value. Where the template states no `mainCpu`:
 * - a SandboxSet's (it has `sourceRevision`) sent by an agent that predates `mainCpu`: the main
 *   container's share is unknown and taken as none (the whole pod plus the in-place value: never
 *   less than the pod holds; an upgraded agent re-sends every SandboxSet when it starts);
 * - any other (admin API, builds): one container, the whole sandbox, so the in-place value alone.
 */
export function inplaceCpuCharge(spec: Pick<TemplateSpec, "cpuCount" | "mainCpu" | "sourceRevision">, inplace: number): number {
  const count = spec.cpuCount * 1000;
  const main = spec.mainCpu !== undefined ? Math.min(count, Math.floor(spec.mainCpu * 1000 + 1e-6)) : spec.sourceRevision === undefined ? count : 0;
  return Math.ceil((count - main + Math.ceil(inplace * 1000 - 1e-6)) / 1000);
}
