// The Checkpoint machine (controllers/drivers/kubernetes/checkpoint/machine.ts): rebuilds of an
// unhealthy checkpoint, once a minute, at most 6; a Failed one is never touched.
import { describe, expect, it } from "vitest";
import { decideCheckpoint, MAX_REBUILDS, REBUILD_EVERY_MS, REBUILDS_ANNOTATION, type CheckpointStatus } from "../../../../controllers/drivers/kubernetes/checkpoint/machine.ts";

const NOW = Date.parse("2026-12-01T12:00:00Z");
const sick: CheckpointStatus = { phase: "Succeeded", checkpointId: "r1", conditions: [{ type: "Healthy", status: "False", reason: "Corrupt", message: "bad chunk", lastTransitionTime: "2026-12-01T11:00:00Z" }] };

describe("decideCheckpoint", () => {
  it("leaves healthy, in-progress and failed checkpoints alone", () => {
    expect(decideCheckpoint({ status: { phase: "Succeeded", checkpointId: "r1" }, rebuilds: 0, generation: 1, now: NOW })).toEqual({});
    expect(decideCheckpoint({ status: { ...sick, phase: "Creating" }, rebuilds: 0, generation: 1, now: NOW })).toEqual({});
    expect(decideCheckpoint({ status: { phase: "Failed", message: "no remote id", conditions: sick.conditions }, rebuilds: 0, generation: 1, now: NOW })).toEqual({});
  });

  it("rebuilds an unhealthy one, counting, at most once a minute", () => {
    const d = decideCheckpoint({ status: sick, rebuilds: 0, generation: 1, now: NOW });
    expect(d.status).toMatchObject({ phase: "Creating", checkpointId: "r1", message: "rebuild 1 of 6: bad chunk" });
    expect(d.annotations?.[REBUILDS_ANNOTATION]).toBe("1");
    expect(d.event?.reason).toBe("CheckpointRebuilding");
    expect(decideCheckpoint({ status: sick, rebuilds: 1, rebuiltAt: NOW - 10_000, generation: 1, now: NOW })).toEqual({ requeueAfterMs: REBUILD_EVERY_MS - 10_000 });
    expect(decideCheckpoint({ status: sick, rebuilds: 1, rebuiltAt: NOW - REBUILD_EVERY_MS, generation: 1, now: NOW }).annotations?.[REBUILDS_ANNOTATION]).toBe("2");
  });

  it(`fails after ${MAX_REBUILDS} rebuilds with the last reason`, () => {
    const d = decideCheckpoint({ status: sick, rebuilds: MAX_REBUILDS, rebuiltAt: NOW - REBUILD_EVERY_MS, generation: 2, now: NOW });
    expect(d.status).toMatchObject({ phase: "Failed", message: "unhealthy after 6 rebuilds: bad chunk", observedGeneration: 2 });
    expect(d.status?.conditions?.find((c) => c.type === "Rebuilding")).toMatchObject({ status: "False", reason: "RebuildLimitReached" });
    expect(d.annotations).toBeUndefined();
  });
});
