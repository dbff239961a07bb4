// The code interpreter's request shapes and the kernel driver's lines (schema/interpreter/http.ts):
// bounds and refusals a client sees as a 400, and lines from inside the sandbox kept only when
// they are ours.
import { describe, expect, it } from "vitest";
import { INTERPRETER_LIMITS, outputLineText, parseCreateContextRequest, parseDriverLine, parseExecuteRequest } from "../../../schema/interpreter/http.ts";

describe("parseExecuteRequest", () => {
  it("takes the SDK's body (snake_case, nulls for absent fields)", () => {
    expect(parseExecuteRequest({ code: "1", context_id: null, language: null, env_vars: { A_1: "x" } })).toEqual({
      ok: true,
      value: { code: "1", contextId: undefined, language: undefined, envVars: { A_1: "x" } },
    });
  });
  it("refuses what it cannot run, saying why", () => {
    const error = (b: unknown) => (parseExecuteRequest(b) as { error: string }).error;
    expect(error([])).toMatch(/JSON object/);
    expect(error({})).toMatch(/code must be a string/);
    expect(error({ code: "x".repeat(INTERPRETER_LIMITS.codeBytes + 1) })).toMatch(/longer than/);
    expect(error({ code: "1", context_id: "a", language: "python" })).toMatch(/not both/);
    expect(error({ code: "1", env_vars: { "A=B": "x" } })).toMatch(/not a variable name/);
    expect(error({ code: "1", env_vars: { A: 1 } })).toMatch(/must be a string/);
    expect(error({ code: "1", env_vars: { A: "a\0b" } })).toMatch(/NUL/);
    const many = Object.fromEntries(Array.from({ length: INTERPRETER_LIMITS.envVars + 1 }, (_, i) => [`V${i}`, ""]));
    expect(error({ code: "1", env_vars: many })).toMatch(/more than/);
  });
});

describe("parseCreateContextRequest", () => {
  it("takes language and an absolute cwd", () => {
    expect(parseCreateContextRequest({ language: "python", cwd: "/tmp" })).toEqual({ ok: true, value: { language: "python", cwd: "/tmp" } });
    expect(parseCreateContextRequest({ cwd: "tmp" })).toMatchObject({ ok: false, error: expect.stringMatching(/absolute/) });
  });
});

describe("parseDriverLine", () => {
  it("keeps the driver's own shapes and drops everything else", () => {
    expect(parseDriverLine('{"ready":true,"pid":7}')).toEqual({ ready: true });
    expect(parseDriverLine('{"id":3,"done":true}')).toEqual({ id: 3, done: true });
    expect(parseDriverLine('{"id":3,"line":{"type":"stdout","text":"a","timestamp":1}}')).toEqual({ id: 3, line: { type: "stdout", text: "a", timestamp: 1 } });
    for (const junk of ["not json", "[]", '{"id":"3","done":true}', '{"id":3,"line":{"type":"shell"}}', '{"id":3}']) expect(parseDriverLine(junk)).toBeUndefined();
  });
});

describe("outputLineText", () => {
  it("writes a line as ASCII-only JSON (E2B's ensure_ascii) that reads back as the same line", () => {
    const line = { type: "stdout" as const, text: "é中😀 \u007f \"q\"\n", timestamp: 1 };
    const text = outputLineText(line);
    expect(text.endsWith("\n")).toBe(true);
    expect(/^[\x00-\x7f]*$/.test(text)).toBe(true);
    expect(text).toContain("\\u4e2d\\ud83d\\ude00");
    expect(JSON.parse(text)).toEqual(line);
  });
  it("escapes each UTF-16 unit: pairs, lone surrogates, controls, U+2028/2029, both ends of the range", () => {
    const cases: [string, string][] = [
      ["😀", "\\ud83d\\ude00"],
      ["a\ud800b", "a\\ud800b"],
      ["\udfffz", "\\udfffz"],
      ["\x00\x01\x1f", "\\u0000\\u0001\\u001f"],
      ["\u2028\u2029", "\\u2028\\u2029"],
      ["\x7f\x80\uffff", "\x7f\\u0080\\uffff"],
      ["\u00e9\u0100\u0fff\u1000", "\\u00e9\\u0100\\u0fff\\u1000"],
    ];
    for (const [text, escaped] of cases) {
      const line = { type: "stderr" as const, text, timestamp: 2 };
      const out = outputLineText(line);
      expect(out).toBe(`{"type":"stderr","text":"${escaped}","timestamp":2}\n`);
      expect(JSON.parse(out)).toEqual(line);
    }
  });
  it("gives a long line with non-ASCII spread through it back whole, and ASCII as JSON.stringify writes it", () => {
    const text = "ab\"\\\n中é😀\ud800\u2028\x01\x7f".repeat(5000);
    const line = { type: "result" as const, is_main_result: true, text, json: { k: text } };
    const out = outputLineText(line);
    expect(/^[\x00-\x7f]*$/.test(out)).toBe(true);
    expect(out.endsWith("}\n")).toBe(true);
    expect(JSON.parse(out)).toEqual(line);
    const ascii = { type: "stdout" as const, text: "plain \"ascii\" \x7f\n".repeat(100), timestamp: 3 };
    expect(outputLineText(ascii)).toBe(`${JSON.stringify(ascii)}\n`);
  });
});
