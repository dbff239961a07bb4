// What a create that resizes the main container's CPU in place is charged (review 26 M3, review
// 27 final M2): what the pod then holds, the larger of a regular init container's peak and the
// other containers plus the in-place value, in whole cores, never less than the pod holds.
import { describe, expect, it } from "vitest";
import { inplaceCpuCharge } from "../../../../durable-objects/operations/inplace-charge.ts";
import { templateRevision, TemplateSpec } from "../../../../schema/api/template.ts";

describe("inplaceCpuCharge", () => {
  it.each<[string, { cpuCount: number; restCpu?: number; initCpu?: number; sourceRevision?: string }, number, number]>([
    ["app 1 + sidecar 2 claimed at 1: the pod holds 3", { cpuCount: 3, restCpu: 2, initCpu: 0, sourceRevision: "r1" }, 1, 3],
    ["claimed at 0.5: 2.5, rounded up", { cpuCount: 3, restCpu: 2, initCpu: 0, sourceRevision: "r1" }, 0.5, 3],
    ["claimed at 1.999: 3.999 is 4, never 3", { cpuCount: 3, restCpu: 2, initCpu: 0, sourceRevision: "r1" }, 1.999, 4],
    ["decimals do not round up a core too many (0.1 + 0.2)", { cpuCount: 2, restCpu: 0.1, initCpu: 0, sourceRevision: "r1" }, 0.2, 1],
    // An init container stating no CPU is given the pool's count (pod-spec.ts), held before the
    // app starts, never beside it.
    ["one container + an init stating no CPU, claimed at 2: the pod holds max(init 1, 2) = 2", { cpuCount: 1, restCpu: 0, initCpu: 1, sourceRevision: "r1" }, 2, 2],
    ["app 4 + an init stating no CPU, claimed at 2: the init's 4, as without in-place", { cpuCount: 4, restCpu: 0, initCpu: 4, sourceRevision: "r1" }, 2, 4],
    ["an init peak below the claim: the claim", { cpuCount: 3, restCpu: 0, initCpu: 3, sourceRevision: "r1" }, 5, 5],
    ["sidecar 2 + init peak 3, claimed at 0.5: the init's 3", { cpuCount: 3, restCpu: 2, initCpu: 3, sourceRevision: "r1" }, 0.5, 3],
    ["sidecar 2 + init peak 3, claimed at 1.5: 3.5 is 4", { cpuCount: 3, restCpu: 2, initCpu: 3, sourceRevision: "r1" }, 1.5, 4],
    ["one container (no sourceRevision: admin API, builds): the in-place value alone", { cpuCount: 4 }, 1.999, 2],
    ["a SandboxSet an older agent sent (no restCpu): the whole pod plus the in-place value", { cpuCount: 3, sourceRevision: "r1" }, 1, 4],
  ])("%s", (_name, spec, inplace, want) => {
    expect(inplaceCpuCharge(spec, inplace)).toBe(want);
  });

  it("restCpu and initCpu are not part of the template's revision: an upgraded agent sending them does not roll the pool", () => {
    const synced = { cpuCount: 3, sourceRevision: "r1" };
    expect(templateRevision(TemplateSpec.parse({ ...synced, restCpu: 2, initCpu: 1 }))).toBe(templateRevision(TemplateSpec.parse(synced)));
  });
});
