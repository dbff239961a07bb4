// Drives a kernel driver's line protocol as the runtime does (JSON lines on stdin, SIGINT to
// interrupt), run by this Node: the drivers are scripts, not modules.
import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { createInterface } from "node:readline";
import { afterEach } from "vitest";
import { JS_DRIVER_SOURCE } from "../../../../controllers/runtime/interpreter/js-driver-source.ts";
import { parseDriverLine, type OutputLine } from "../../../../schema/interpreter/http.ts";

let proc: ChildProcessWithoutNullStreams | undefined;
afterEach(() => void proc?.kill("SIGKILL"));

/** Starts a driver; `run` sends one cell and resolves with its output lines once it is done. */
export async function driver(source = JS_DRIVER_SOURCE, args: string[] = []) {
  const p = spawn(process.execPath, ["-e", source, ...args], { stdio: "pipe" });
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

export const result = (lines: OutputLine[]) => lines.find((l) => l.type === "result")?.text;
export const error = (lines: OutputLine[]) => lines.find((l) => l.type === "error") as Extract<OutputLine, { type: "error" }> | undefined;
