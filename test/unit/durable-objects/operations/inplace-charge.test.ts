// What a create that resizes the main container's CPU in place is charged (review 26 M3): the
// whole pod with the main container's share replaced, in whole cores, never less than the pod holds.
import { describe, expect, it } from "vitest";
import { inplaceCpuCharge } from "../../../../durable-objects/operations/inplace-charge.ts";
import { templateRevision, TemplateSpec } from "../../../../schema/api/template.ts";

describe("inplaceCpuCharge", () => {
  it.each<[string, { cpuCount: number; mainCpu?: number; sourceRevision?: string }, number, number]>([
    ["app 1 + sidecar 2 claimed at 1: the pod holds 3", { cpuCount: 3, mainCpu: 1, sourceRevision: "r1" }, 1, 3],
    ["claimed at 0.5: 2.5, rounded up", { cpuCount: 3, mainCpu: 1, sourceRevision: "r1" }, 0.5, 3],
    ["claimed at 1.999: 3.999 is 4, never 3", { cpuCount: 3, mainCpu: 1, sourceRevision: "r1" }, 1.999, 4],
    ["decimals do not round up a core too many (0.1 + 0.2)", { cpuCount: 2, mainCpu: 1.9, sourceRevision: "r1" }, 0.2, 1],
    ["a main share above the count is clamped: never less than the in-place value", { cpuCount: 1, mainCpu: 5, sourceRevision: "r1" }, 3, 3],
    ["one container (no sourceRevision: admin API, builds): the in-place value alone", { cpuCount: 4 }, 1.999, 2],
    ["a SandboxSet an older agent sent (no mainCpu): the whole pod plus the in-place value", { cpuCount: 3, sourceRevision: "r1" }, 1, 4],
  ])("%s", (_name, spec, inplace, want) => {
    expect(inplaceCpuCharge(spec, inplace)).toBe(want);
  });

  it("mainCpu is not part of the template's revision: an upgraded agent sending it does not roll the pool", () => {
    const synced = { cpuCount: 3, sourceRevision: "r1" };
    expect(templateRevision(TemplateSpec.parse({ ...synced, mainCpu: 1 }))).toBe(templateRevision(TemplateSpec.parse(synced)));
  });
});
