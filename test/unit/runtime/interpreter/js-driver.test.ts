// The JavaScript kernel driver's line protocol, driven as the runtime drives it (JSON lines on
// stdin, SIGINT to interrupt), run by this Node (the sandbox runs it with its own node; the e2e
// tier covers that). A real process: the driver is a script, not a module.
import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { createInterface } from "node:readline";
import { afterEach, describe, expect, it } from "vitest";
import { JS_DRIVER_SOURCE } from "../../../../controllers/runtime/interpreter/js-driver-source.ts";
import { parseDriverLine, type OutputLine } from "../../../../schema/interpreter/http.ts";

let proc: ChildProcessWithoutNullStreams | undefined;
afterEach(() => void proc?.kill("SIGKILL"));

/** Starts a driver; `run` sends one cell and resolves with its output lines once it is done. */
async function driver() {
  const p = spawn(process.execPath, ["-e", JS_DRIVER_SOURCE], { stdio: "pipe" });
  proc = p;
  const waiting = new Map<number, { lines: OutputLine[]; done: (l: OutputLine[]) => void }>();
  let ready!: () => void;
  const started = new Promise<void>((r) => (ready = r));
  createInterface({ input: p.stdout }).on("line", (text) => {
    const msg = parseDriverLine(text);
    if (!msg) return;
    if ("ready" in msg) return ready();
    const w = waiting.get(msg.id)!;
    if ("done" in msg) w.done(w.lines);
    else w.lines.push(msg.line);
  });
  await started;
  let next = 0;
  const run = (code: string, env?: Record<string, string>) => {
    const id = ++next;
    const out = new Promise<OutputLine[]>((done) => waiting.set(id, { lines: [], done }));
    p.stdin.write(`${JSON.stringify({ op: "execute", id, code, env })}\n`);
    return out;
  };
  return { run, p };
}

const result = (lines: OutputLine[]) => lines.find((l) => l.type === "result")?.text;
const error = (lines: OutputLine[]) => lines.find((l) => l.type === "error") as Extract<OutputLine, { type: "error" }> | undefined;

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
