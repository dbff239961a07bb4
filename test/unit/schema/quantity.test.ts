// Kubernetes quantities as the API server reads them (review 25 M2: "64e0" cores read as unknown
// and counted as 1). One table; anything the API server would not store is undefined. E2B's CPU
// extensions read the same grammar (extensions.ts cpuQuantity), in their 1m..1024 range.
import { describe, expect, it } from "vitest";
import { parseQuantity } from "../../../schema/crd/quantity.ts";
import { cpuQuantity } from "../../../schema/api/extensions.ts";

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

it("reads a number and its exponent as one decimal: exact where the decimal is, so rounding up counts what was written", () => {
  expect(parseQuantity("0.07e2")).toBe(7);
  expect(parseQuantity("10000e-4")).toBe(1);
  expect(parseQuantity("9m")).toBe(0.009);
  expect(parseQuantity("1029.9k")).toBe(1029900);
  expect(parseQuantity("1.5Gi")).toBe(1.5 * 2 ** 30);
});

describe("cpuQuantity (E2B's cpu-limit / cpu-request extensions)", () => {
  const key = "e2b.agents.kruise.io/cpu-limit";
  it("reads the API server's grammar in cores", () => {
    expect(cpuQuantity("500m", key)).toBe(0.5);
    expect(cpuQuantity("0.07e2", key)).toBe(7);
    expect(cpuQuantity("250000u", key)).toBe(0.25);
    expect(cpuQuantity("0".repeat(63) + "1", key)).toBe(1);
  });
  it.each([["0".repeat(64) + "1"], ["0"], ["-1"], ["0.0001"], ["1025"], ["two"], ["1K"], [""]])("refuses %s with a 400 naming the key", (q) =>
    expect(() => cpuQuantity(q, key)).toThrow(expect.objectContaining({ code: "bad_request", message: expect.stringContaining(`metadata "${key}"`) })),
  );
});
