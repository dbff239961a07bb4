// The JavaScript kernel driver's line protocol, run by this Node (the sandbox runs it with its own
// node; the e2e tier covers that).
import { describe, expect, it } from "vitest";
import { JS_DRIVER_SOURCE } from "../../../../controllers/runtime/interpreter/js-driver-source.ts";
import { driver, error, result } from "./driver-harness.ts";

describe("JavaScript kernel driver", () => {
  it("keeps top-level declarations and awaited values across cells; the last value is the result", async () => {
    const { run } = await driver();
    expect(error(await run("const a = 41; function f(x) { return x + 1 }"))).toBeUndefined();
    expect(error(await run("let r = await Promise.resolve(1)"))).toBeUndefined();
    const lines = await run("console.log('hi', a); f(a) + r");
    expect(lines.filter((l) => l.type === "stdout").map((l) => (l as { text: string }).text)).toEqual(["hi 41\n"]);
    expect(result(lines)).toBe("43");
    expect(lines.map((l) => l.type)).toEqual(["number_of_executions", "stdout", "result", "end_of_execution"]);
    expect(result(await run("({ a: 1, b: 'x' })"))).toBe("{ a: 1, b: 'x' }");
  });

  it("reports thrown and rejected errors with name, message and the cell's frames only", async () => {
    const { run } = await driver();
    const thrown = error(await run("function g() { throw new TypeError('bad thing') }\ng()"));
    expect(thrown).toMatchObject({ name: "TypeError", value: "bad thing" });
    expect(thrown!.traceback).toContain("at g (<cell>");
    expect(thrown!.traceback).not.toMatch(/node:|\[eval\]/);
    expect(error(await run("await Promise.reject(new RangeError('later'))"))).toMatchObject({ name: "RangeError", value: "later" });
    expect(error(await run("a +"))?.name).toBe("SyntaxError");
    expect(result(await run("1 + 1"))).toBe("2");
  });

  it("sets env vars for one cell and restores them", async () => {
    const { run } = await driver();
    expect(result(await run("process.env.E2B_T", { E2B_T: "on" }))).toBe("on");
    expect(result(await run("process.env.E2B_T"))).toBeUndefined();
  });

  it("a string is its own text; arrays and plain objects add json; a Jupyter.display method gives its bundle", async () => {
    const { run } = await driver();
    expect(result(await run("'Hello, World!'"))).toBe("Hello, World!");
    const obj = (await run("({ a: 1, b: [1, 'x'], c: null })")).find((l) => l.type === "result");
    expect(obj).toMatchObject({ text: "{ a: 1, b: [ 1, 'x' ], c: null }", json: { a: 1, b: [1, "x"], c: null }, is_main_result: true });
    expect((await run("[1, 2, 3]")).find((l) => l.type === "result")).toMatchObject({ text: "[ 1, 2, 3 ]", json: [1, 2, 3] });
    // A class instance, a Map, a cyclic object: text only.
    expect((await run("new Map([[1, 2]])")).find((l) => l.type === "result")).not.toHaveProperty("json");
    expect((await run("const cyc = {}; cyc.self = cyc; cyc")).find((l) => l.type === "result")).not.toHaveProperty("json");
    const shown = (await run("({ [Symbol.for('Jupyter.display')]() { return { 'text/html': '<b>hi</b>', 'text/plain': 'hi', 'application/x-custom': 'c' } } })")).find((l) => l.type === "result");
    expect(shown).toMatchObject({ html: "<b>hi</b>", text: "hi", extra: { "application/x-custom": "c" } });
    const broken = await run("({ [Symbol.for('Jupyter.display')]() { throw new Error('no show') } })");
    expect(error(broken)?.value).toBe("no show");
  });

  it("TypeScript: types are stripped inside the driver, enums work, state persists; a type syntax error is the cell's error", async () => {
    const { run } = await driver(JS_DRIVER_SOURCE, ["typescript"]);
    expect(error(await run("interface P { x: number }\nconst p: P = { x: 40 };\nenum E { A, B, C }\nfunction add<T extends number>(a: T, b: number): number { return a + b }"))).toBeUndefined();
    expect(result(await run("add(p.x, E.C) as number"))).toBe("42");
    expect(result(await run("const s: string = await Promise.resolve('ok'); s"))).toBe("ok");
    expect(error(await run("let broken: = 1"))?.name).toBe("SyntaxError");
    expect(result(await run("p.x + 2"))).toBe("42");
  });

  it("SIGINT interrupts a busy loop and a pending await; between cells it is ignored", async () => {
    const { run, p } = await driver();
    await run("let n = 0");
    const busy = run("while (true) { n++ }");
    setTimeout(() => p.kill("SIGINT"), 300);
    expect(error(await busy)?.value).toMatch(/interrupted/);
    const stuck = run("await new Promise(() => {})");
    setTimeout(() => p.kill("SIGINT"), 300);
    expect(error(await stuck)?.value).toMatch(/interrupted/);
    p.kill("SIGINT");
    await new Promise((r) => setTimeout(r, 200)); // delivered before the next cell starts
    expect(result(await run("n > 0"))).toBe("true");
  });
});
