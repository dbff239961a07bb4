// Observations carry error text of any length; the agent cuts it to the bounds the edge enforces.
import { describe, expect, it } from "vitest";
import { MAX_LIST_ITEMS, MAX_MESSAGE_LENGTH, MAX_NAME_LENGTH } from "../../../schema/api/limits.ts";
import { boundedObservation, ObservationSchema } from "../../../schema/protocol/observation.ts";

const base = { sandboxId: "sbxbounds1", generation: 1, phase: "Running" as const, ready: true, observedAt: 1 };

describe("observation bounds", () => {
  it("the schema refuses an unbounded message, reason and condition list", () => {
    expect(ObservationSchema.safeParse({ ...base, message: "m".repeat(MAX_MESSAGE_LENGTH + 1) }).success).toBe(false);
    expect(ObservationSchema.safeParse({ ...base, reason: "R".repeat(MAX_NAME_LENGTH + 1) }).success).toBe(false);
    expect(ObservationSchema.safeParse({ ...base, conditions: Array.from({ length: MAX_LIST_ITEMS + 1 }, () => ({ type: "T", status: "True" })) }).success).toBe(false);
    expect(ObservationSchema.safeParse({ ...base, message: "m".repeat(MAX_MESSAGE_LENGTH) }).success).toBe(true);
  });

  it("boundedObservation cuts what the agent sends so the edge takes it, and leaves short text alone", () => {
    const long = {
      ...base,
      reason: "R".repeat(1000),
      message: "an API server's error ".repeat(1000),
      conditions: Array.from({ length: 100 }, (_, i) => ({ type: `Cond${i}`, status: "False" as const, message: "z".repeat(10_000) })),
    };
    const cut = boundedObservation(long);
    expect(ObservationSchema.safeParse(cut).success).toBe(true);
    expect(cut.message!.length).toBe(MAX_MESSAGE_LENGTH);
    expect(cut.message!.endsWith("…")).toBe(true);
    expect(cut.conditions).toHaveLength(MAX_LIST_ITEMS);
    expect(boundedObservation({ ...base, message: "short" })).toEqual({ ...base, message: "short" });
  });
});
