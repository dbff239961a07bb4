// seriesKey is a lookup after the first time: the key it hands back must be the one built from the
// labels, whatever was asked before (label order, names that equal values, prefixes, the bound).
import { describe, expect, it } from "vitest";
import { seriesKey } from "../../../durable-objects/metrics/counts.ts";

describe("seriesKey", () => {
  it("hands back the key of exactly the labels asked for, asked once or many times", () => {
    for (let pass = 0; pass < 2; pass++) {
      expect(seriesKey("m")).toBe("m");
      expect(seriesKey("m", {})).toBe("m");
      expect(seriesKey("m", { a: "b" })).toBe('m{a="b"}');
      expect(seriesKey("m", { b: "a" })).toBe('m{b="a"}');
      expect(seriesKey("m", { a: "a" })).toBe('m{a="a"}');
      expect(seriesKey("m", { a: "b", b: "a" })).toBe('m{a="b",b="a"}');
      expect(seriesKey("m", { b: "a", a: "b" })).toBe('m{a="b",b="a"}');
      expect(seriesKey("m", { a: "1", b: "2" })).toBe('m{a="1",b="2"}');
      expect(seriesKey("m", { a: "1" })).toBe('m{a="1"}');
      expect(seriesKey("n", { a: "1" })).toBe('n{a="1"}');
      expect(seriesKey("m", { a: 'x"\n' })).toBe('m{a="x\\"\\n"}');
      expect(seriesKey('m{a="1"}')).toBe('m{a="1"}');
    }
  });

  it("stays right past its bound on remembered keys", () => {
    for (let i = 0; i < 20_000; i++) expect(seriesKey("m", { i: String(i), j: "x" })).toBe(`m{i="${i}",j="x"}`);
    expect(seriesKey("m", { a: "b" })).toBe('m{a="b"}');
  });
});
