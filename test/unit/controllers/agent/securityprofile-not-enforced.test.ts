// A cluster whose driver enforces no SecurityProfile (kubernetes) reports what the edge accepted
// as not Programmed, with a Warning Event, instead of claiming a proxy applies it
// (kube-sync/securityprofile-sync.ts, notEnforcedHere).
import { expect, it } from "vitest";
import { notEnforcedHere, securityProfileKind } from "../../../../controllers/agent/kube-sync/securityprofile-sync.ts";

const NOW = "2026-12-02T00:00:00.000Z";

it("Accepted True, Programmed False NotEnforcedByDriver, one Warning Event per profile; refusals unchanged", () => {
  const kind = notEnforcedHere(securityProfileKind);
  const st = kind.status(undefined, 3, { id: "1", result: "applied" }, NOW)!;
  expect(st.observedGeneration).toBe(3);
  expect(st.conditions!.map((c) => [c.type, c.status, c.reason, c.observedGeneration])).toEqual([
    ["Accepted", "True", "Accepted", 3],
    ["Programmed", "False", "NotEnforcedByDriver", 3],
  ]);
  const events = kind.events!("p", { id: "1", result: "applied" });
  expect(events.map((e) => [e.name, e.type, e.reason])).toEqual([["p.not-enforced", "Warning", "NotEnforcedByDriver"]]);
  expect(kind.refused(st, 4, { code: "bad_request", message: "spec.inputs: ..." }, NOW)).toEqual(securityProfileKind.refused(st, 4, { code: "bad_request", message: "spec.inputs: ..." }, NOW));
  expect(kind.upsert).toBe(securityProfileKind.upsert);
});
