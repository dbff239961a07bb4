// Kubernetes quantities as the API server reads them (review 25 M2: "64e0" cores read as unknown
// and counted as 1). One table; anything the API server would not store is undefined.
import { describe, expect, it } from "vitest";
import { parseQuantity } from "../../../schema/crd/quantity.ts";

describe("parseQuantity", () => {
  it.each([
    ["500m", 0.5],
    ["2", 2],
    ["1.5", 1.5],
    [".5", 0.5],
    ["2.", 2],
    ["+3", 3],
    ["1Gi", 2 ** 30],
    ["2Ki", 2048],
    ["1Ei", 2 ** 60],
    ["512M", 512e6],
    ["1k", 1000],
    ["1e3", 1000],
    ["64e0", 64],
    ["64e9", 64e9],
    ["1E3", 1000],
    ["1E", 1e18],
    ["5e-1", 0.5],
    ["100u", 1e-4],
    ["250n", 2.5e-7],
    ["3P", 3e15],
    [7, 7],
    ["-1", -1],
  ])("%s", (q, want) => expect(parseQuantity(q)).toBeCloseTo(want as number, 12));

  it.each([["bogus"], [""], ["1K"], ["1 Gi"], ["1Gib"], ["e3"], ["1e"], ["1.2.3"], ["0x10"], [" 1"], ["1".repeat(65)], [Number.NaN], [Infinity], [null], [{}], [undefined]])("refuses %j", (q) =>
    expect(parseQuantity(q)).toBeUndefined(),
  );
});
