// The JavaScript kernel driver's line protocol, run by this Node (the sandbox runs it with its own
// node; the e2e tier covers that).
import { describe, expect, it } from "vitest";
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
    expect(result(await run("process.env.E2B_T", { E2B_T: "on" }))).toBe("'on'");
    expect(result(await run("process.env.E2B_T"))).toBeUndefined();
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
