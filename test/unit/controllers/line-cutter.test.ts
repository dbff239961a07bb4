// LineCutter: a process's output as log lines, with lines past the bound cut into pieces (build
// steps and start commands: tenant output).
import { describe, expect, it } from "vitest";
import { LineCutter } from "../../../controllers/lib/line-cutter.ts";

function cut(chunks: string[], max = 8): string[] {
  const out: string[] = [];
  const c = new LineCutter((l) => out.push(l), max);
  for (const ch of chunks) c.push(ch);
  c.end();
  return out;
}

describe("LineCutter", () => {
  it("gives each line once, across chunk boundaries, and the last line without its newline", () => {
    expect(cut(["a\nb", "c\n", "\nd"])).toEqual(["a", "bc", "", "d"]);
    expect(cut(["x\n"])).toEqual(["x"]);
  });

  it("cuts a line longer than the bound into pieces of the bound, in order, whether or not a newline ends it", () => {
    expect(cut(["0123456789ab\n", "cd"], 4)).toEqual(["0123", "4567", "89ab", "cd"]);
    expect(cut(["0123", "45", "6789a"], 4)).toEqual(["0123", "4567", "89a"]);
  });

  it("keeps under the bound between chunks for output without any newline (a build step's `yes | tr -d '\\n'`)", () => {
    const out: string[] = [];
    const c = new LineCutter((l) => out.push(l), 8192);
    const chunk = "y".repeat(65536);
    for (let i = 0; i < 1024; i++) c.push(chunk); // 64 MiB
    c.end();
    expect(out.length).toBe((65536 * 1024) / 8192);
    expect(out.every((l) => l.length === 8192)).toBe(true);
  });

  it("never splits a surrogate pair: astral characters at every offset against the bound and every chunk split", () => {
    const astral = "\u{1F600}\u{10FFFF}\u{20000}"; // three pairs: 😀, the last code point, a CJK ext-B ideograph
    for (let max = 2; max <= 6; max++) {
      for (let lead = 0; lead <= max; lead++) {
        for (const tail of ["", "\n", "b\n"]) {
          const text = "a".repeat(lead) + astral + "z" + astral + tail + astral;
          for (let at = 0; at <= text.length; at++) {
            const out = cut([text.slice(0, at), text.slice(at)], max);
            for (const piece of out) {
              // A lone surrogate (half a pair) is the only code point of category Cs under /u.
              expect(/\p{Cs}/u.test(piece), JSON.stringify({ max, lead, at, piece })).toBe(false);
              expect(piece.length).toBeLessThanOrEqual(max);
            }
            // Nothing lost or reordered: the pieces of each line join back to it.
            expect(out.join(""), JSON.stringify({ max, lead, at })).toBe(text.replace(/\n/g, ""));
          }
        }
      }
    }
  });

  it("still cuts a line of only astral characters into full pieces where a pair fits (odd bound: one unit short)", () => {
    expect(cut(["\u{1F600}".repeat(4)], 4)).toEqual(["\u{1F600}".repeat(2), "\u{1F600}".repeat(2)]);
    expect(cut(["\u{1F600}".repeat(3)], 3)).toEqual(["\u{1F600}", "\u{1F600}", "\u{1F600}"]);
  });
});
