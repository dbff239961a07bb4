import { describe, expect, it } from "vitest";
import { acceptsIdentity, chooseEncoding, parseRange } from "../../../controllers/runtime/http/content-negotiation.ts";

describe("chooseEncoding", () => {
  it.each([
    [undefined, "identity"],
    ["gzip", "gzip"],
    ["gzip, deflate, br", "gzip"],
    ["br", "identity"],
    ["gzip;q=0", "identity"],
    ["br, identity;q=0", undefined],
    ["*;q=0", undefined],
  ])("%s → %s", (header, want) => {
    expect(chooseEncoding(header)).toBe(want);
  });
});

describe("acceptsIdentity", () => {
  it.each([
    [undefined, true],
    ["gzip", true],
    ["gzip, identity;q=0", false],
    ["gzip, *;q=0", false],
    ["gzip, *;q=0, identity", true],
  ])("%s → %s", (header, want) => {
    expect(acceptsIdentity(header)).toBe(want);
  });
});

describe("parseRange", () => {
  it.each([
    [undefined, 100, undefined],
    ["bytes=0-9", 100, { start: 0, end: 9 }],
    ["bytes=90-", 100, { start: 90, end: 99 }],
    ["bytes=-10", 100, { start: 90, end: 99 }],
    ["bytes=50-500", 100, { start: 50, end: 99 }],
    ["bytes=100-", 100, "unsatisfiable"],
    ["bytes=5-1", 100, undefined],
    ["items=0-1", 100, undefined],
  ])("%s of %i", (header, size, want) => {
    expect(parseRange(header, size)).toEqual(want);
  });
});
