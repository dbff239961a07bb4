// The kernel's reader of its driver's stdout (controllers/runtime/interpreter/kernel.ts): lines as
// the pipe cuts them (one line over many chunks, many lines in one chunk, a character cut between
// chunks) reach the cell whole, and a line over the bound ends the cell with the driver's error.
// The driver is a stream this test writes to: what is under test is the runtime's side of the pipe.
// The line is the tenant's (a cell's output, up to 64 MB) and the reader runs on the agent's one
// event loop, so its work must grow with the line, not with the line times its chunks: counted
// here as the characters searched for a line's end (no time is measured).
import { PassThrough } from "node:stream";
import { describe, expect, it } from "vitest";
import { Kernel, type KernelSpec } from "../../../../controllers/runtime/interpreter/kernel.ts";
import type { LaunchedPipes } from "../../../../controllers/runtime/process/launcher.ts";
import type { RuntimeSandbox } from "../../../../controllers/runtime/sandbox.ts";
import type { SandboxUser } from "../../../../controllers/runtime/sandbox-view.ts";
import type { OutputLine } from "../../../../schema/interpreter/http.ts";

const spec: KernelSpec = { language: "python", argv: ["/bin/true"], control: "line", requires: "nothing" };

async function started() {
  const stdout = new PassThrough();
  const stdin = new PassThrough();
  const proc: LaunchedPipes = { pid: 0, stdin, stdout, stderr: new PassThrough(), onExit: () => {} };
  const sbx = { envVars: {}, view: { command: () => ({}), launcher: { spawnPipes: async () => proc } } } as unknown as RuntimeSandbox;
  const user = { name: "user", home: "/home/user" } as SandboxUser;
  const kernel = new Kernel("k", spec, "/");
  const start = kernel.start(sbx, user);
  await new Promise((r) => setImmediate(r));
  stdout.write('{"rea');
  stdout.write('dy":true}\n');
  await start;
  return { kernel, stdout };
}

describe("Kernel's driver reader", () => {
  it("gives each line whole, however the pipe cuts it", async () => {
    const { kernel, stdout } = await started();
    const lines: OutputLine[] = [];
    const run = kernel.execute("x", undefined, (l) => lines.push(l));
    const long = "中é😀".repeat(100_000);
    const big = Buffer.from(`${JSON.stringify({ id: 1, line: { type: "stdout", text: long, timestamp: 1 } })}\n`);
    // 64 KB chunks, so UTF-8 sequences are cut too; then two lines and the end in one chunk.
    for (let i = 0; i < big.length; i += 65536) stdout.write(big.subarray(i, i + 65536));
    stdout.write('{"id":1,"line":{"type":"stderr","text":"a","timestamp":2}}\n{"id":1,"line":{"type":"stdout","text":"b","timestamp":3}}\n{"id":1,"do');
    stdout.write('ne":true}\n');
    await run.done;
    expect(lines).toEqual([
      { type: "stdout", text: long, timestamp: 1 },
      { type: "stderr", text: "a", timestamp: 2 },
      { type: "stdout", text: "b", timestamp: 3 },
    ]);
  });

  it("searches each character for a line's end about once, however many chunks the line takes", async () => {
    const { kernel, stdout } = await started();
    const lines: OutputLine[] = [];
    const run = kernel.execute("x", undefined, (l) => lines.push(l));
    const text = "x".repeat(4 << 20);
    const line = `${JSON.stringify({ id: 1, line: { type: "stdout", text, timestamp: 1 } })}\n`;
    let searched = 0;
    const indexOf = String.prototype.indexOf;
    String.prototype.indexOf = function (this: string, what: string, from?: number) {
      if (what === "\n") searched += this.length - (from ?? 0);
      return indexOf.call(this, what, from);
    };
    try {
      for (let i = 0; i < line.length; i += 65536) stdout.write(line.slice(i, i + 65536));
      stdout.write('{"id":1,"done":true}\n');
      await run.done;
    } finally {
      String.prototype.indexOf = indexOf;
    }
    expect(lines).toEqual([{ type: "stdout", text, timestamp: 1 }]);
    // Before, the whole held start was searched again at every chunk: ~32x the line here.
    expect(searched).toBeLessThan(2 * line.length);
  });

  it("ends the cell with the driver's error when a line grows past the bound, and reads on after it", async () => {
    const { kernel, stdout } = await started();
    const lines: OutputLine[] = [];
    const run = kernel.execute("x", undefined, (l) => lines.push(l));
    const chunk = "x".repeat(1 << 20);
    for (let i = 0; i <= 64; i++) stdout.write(chunk);
    await run.done;
    expect(lines).toEqual([{ type: "error", name: "KernelDriverError", value: expect.stringMatching(/line over/), traceback: "" }]);
    // The rest of the long line is dropped with its end; the next cell's lines arrive.
    const next: OutputLine[] = [];
    const second = kernel.execute("y", undefined, (l) => next.push(l));
    stdout.write('tail"}\n{"id":2,"line":{"type":"stdout","text":"ok","timestamp":4}}\n{"id":2,"done":true}\n');
    await second.done;
    expect(next).toEqual([{ type: "stdout", text: "ok", timestamp: 4 }]);
  });
});
