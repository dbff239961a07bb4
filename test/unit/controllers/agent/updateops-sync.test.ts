// The SandboxUpdateOps CRD ↔ edge mapping (pure): the spec the edge's schema takes (patch refused,
// bad values said by field), the status the object shows (lines, counts, the condition with the
// edge's transition time), and Event names that are stable per event and valid object names.
import { describe, expect, it } from "vitest";
import { opsEvents, opsRefusedStatusOf, opsSpecOf, opsStatusOf, type UpdateOpsObject } from "../../../../controllers/agent/kube-sync/updateops-sync.ts";
import type { UpdateOpsStatusReply } from "../../../../schema/protocol/index.ts";

const suo = (spec: Partial<UpdateOpsObject["spec"]>): UpdateOpsObject => ({
  apiVersion: "agents.kruise.io/v1alpha1",
  kind: "SandboxUpdateOps",
  metadata: { name: "up", uid: "u1", generation: 1 },
  spec: { selector: { matchLabels: { app: "web" } }, ...spec },
});

const edge: UpdateOpsStatusReply = {
  phase: "Updating",
  replicas: 2,
  updatedReplicas: 1,
  failedReplicas: 0,
  updatingReplicas: 1,
  conditions: [{ type: "Progressing", status: "True", reason: "Updating", message: "1 upgrading", lastTransitionTime: Date.parse("2026-12-01T10:00:00Z") }],
  sandboxes: [
    { id: "sbxA" as never, status: "Succeeded", from: "r1", to: "r2", paused: false, attempt: 1 },
    { id: "sbxB" as never, status: "Updating", from: "r1", to: "r2", paused: true, attempt: 1, message: "recreating" },
  ],
  events: [{ at: Date.parse("2026-12-01T10:00:01Z"), type: "Normal", reason: "UpgradeStarted", sandboxId: "sbxB_Z" as never, message: "to r2" }],
};

describe("opsSpecOf", () => {
  it("takes the CRD's fields with their defaults", () => {
    const r = opsSpecOf(suo({ updateStrategy: { type: "Recreate", maxUnavailable: "10%" }, paused: true, stateFilter: { states: ["Running", "Paused"] } }));
    expect(r).toEqual({ spec: { selector: { matchLabels: { app: "web" } }, updateStrategy: { type: "Recreate", maxUnavailable: "10%" }, paused: true, stateFilter: { states: ["Running", "Paused"] } } });
    expect(opsSpecOf(suo({}))).toMatchObject({ spec: { updateStrategy: { type: "Recreate", maxUnavailable: 1 }, paused: false, stateFilter: { states: ["Running"] } } });
  });

  it("passes the run's lifecycle hooks (the CRD's exec hooks)", () => {
    const r = opsSpecOf(suo({ lifecycle: { preUpgrade: { exec: { command: ["sh", "-c", "sync"] }, timeoutSeconds: 30 } } }));
    expect(r).toMatchObject({ spec: { lifecycle: { preUpgrade: { exec: { command: ["sh", "-c", "sync"] }, timeoutSeconds: 30, failurePolicy: "Fail" } } } });
  });

  it("refuses patch, and says which field is bad", () => {
    expect(opsSpecOf(suo({ patch: { spec: {} } }))).toEqual({ problem: expect.stringContaining("spec.patch is not supported") });
    expect(opsSpecOf(suo({ stateFilter: { states: ["Sleeping"] } }))).toEqual({ problem: expect.stringContaining("spec.stateFilter.states") });
  });
});

describe("opsStatusOf", () => {
  it("shows the counts, one line per sandbox and the condition at the edge's transition time", () => {
    const s = opsStatusOf(undefined, 3, edge);
    expect(s).toMatchObject({ observedGeneration: 3, phase: "Updating", replicas: 2, updatedReplicas: 1, updatingReplicas: 1, failedReplicas: 0 });
    expect(s.sandboxes).toEqual([
      { sandboxID: "sbxA", status: "Succeeded", fromRevision: "r1", toRevision: "r2", paused: false, attempt: 1 },
      { sandboxID: "sbxB", status: "Updating", fromRevision: "r1", toRevision: "r2", paused: true, attempt: 1, message: "recreating" },
    ]);
    expect(s.conditions).toEqual([{ type: "Progressing", status: "True", reason: "Updating", message: "1 upgrading", observedGeneration: 3, lastTransitionTime: "2026-12-01T10:00:00.000Z" }]);
  });

  it("a refusal is a Progressing=False condition; bad_request is InvalidSpec", () => {
    const s = opsRefusedStatusOf({ phase: "Updating" }, 2, { code: "bad_request", message: "spec.patch is not supported" }, "2026-12-01T11:00:00.000Z");
    expect(s).toMatchObject({ phase: "Updating", observedGeneration: 2, conditions: [{ type: "Progressing", status: "False", reason: "InvalidSpec" }] });
  });
});

describe("opsEvents", () => {
  it("names each event stably, as a valid object name, and says which sandbox", () => {
    const [a] = opsEvents("up", edge);
    expect(a).toMatchObject({ type: "Normal", reason: "UpgradeStarted", message: "sbxB_Z: to r2" });
    expect(a!.name).toMatch(/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/);
    expect(opsEvents("up", edge)[0]!.name).toBe(a!.name);
    expect(opsEvents("up", undefined)).toEqual([]);
  });

  it("puts an event about a sandbox on its Sandbox object too, when the Sandbox is known", () => {
    const ref = { apiVersion: "agents.kruise.io/v1alpha1", kind: "Sandbox", name: "app-sbxb_z", uid: "s1" };
    const [run, onSandbox] = opsEvents("up", edge, (id) => (id === "sbxB_Z" ? ref : undefined));
    expect(onSandbox).toMatchObject({ reason: "UpgradeStarted", type: "Normal", about: ref, message: "SandboxUpdateOps up: to r2" });
    expect(onSandbox!.name).not.toBe(run!.name);
    expect(onSandbox!.name).toMatch(/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/);
    expect(opsEvents("up", edge, () => undefined)).toHaveLength(opsEvents("up", edge).length);
  });
});
