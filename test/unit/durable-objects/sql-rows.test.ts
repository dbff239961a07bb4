import { describe, expect, it } from "vitest";
import { marks, rowMarks } from "../../../durable-objects/sql-rows.ts";

describe("sql-rows placeholder lists", () => {
  it("builds each shape exactly, asked once or many times and in any order", () => {
    const want = (n: number) => Array(n).fill("?").join(", ");
    // Interleaved shapes that would share a key if rows and columns were mixed up.
    for (let pass = 0; pass < 3; pass++) {
      expect(marks(1)).toBe("?");
      expect(marks(3)).toBe("?, ?, ?");
      expect(rowMarks(1, 3)).toBe("(?, ?, ?)");
      expect(rowMarks(3, 1)).toBe("(?), (?), (?)");
      expect(rowMarks(2, 6)).toBe(`(${want(6)}), (${want(6)})`);
      expect(rowMarks(0, 6)).toBe("");
      expect(marks(0)).toBe("");
      expect(marks(100)).toBe(want(100));
    }
  });

  it("builds shapes past the cached range too", () => {
    expect(marks(70_000).split(", ")).toHaveLength(70_000);
    expect(rowMarks(70_000, 1).split(", ")).toHaveLength(70_000);
    expect(rowMarks(1, 70_000)).toBe(`(${marks(70_000)})`);
  });
});
