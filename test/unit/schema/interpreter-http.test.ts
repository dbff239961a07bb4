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
});
