// A local server process (sqld, workerd) started by the launcher, tests or benchmarks: spawned
// directly (never through a shell, so the pid is the server's own) in a process group of its own
// (a terminal's Ctrl-C reaches the launcher only, which stops the parts in order), ready once GET
// /health answers, stopped with SIGTERM and, after 5 s, SIGKILL.
import { spawn, type ChildProcess } from "node:child_process";
import { openSync } from "node:fs";
import type { Exit, Running } from "./supervisor.ts";

export interface Service extends Running {
  url: string;
}

/** Resolves when `child` exits, with its code or signal. */
export function exitOf(child: ChildProcess): Promise<Exit> {
  return new Promise((ok) => child.once("exit", (code, signal) => ok({ code, signal })));
}

/** Sends `signal` (SIGTERM by default) and, if it is still there after `graceMs`, SIGKILL. */
export async function stopChild(child: ChildProcess, exited: Promise<Exit>, signal: NodeJS.Signals = "SIGTERM", graceMs = 5_000): Promise<void> {
  if (child.exitCode === null && child.signalCode === null) child.kill(signal);
  const timer = setTimeout(() => child.kill("SIGKILL"), graceMs);
  await exited;
  clearTimeout(timer);
}

export async function startService(opts: { name: string; bin: string; args: string[]; url: string; logFile: string; readyWithinMs: number }): Promise<Service> {
  const log = openSync(opts.logFile, "a");
  const child = spawn(opts.bin, opts.args, { stdio: ["ignore", log, log], detached: true });
  const exited = exitOf(child);
  const deadline = Date.now() + opts.readyWithinMs;
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null) throw new Error(`${opts.name} exited (${child.signalCode ?? `exit code ${child.exitCode}`}); see ${opts.logFile}`);
    try {
      if ((await fetch(`${opts.url}/health`)).ok) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      child.kill("SIGKILL");
      throw new Error(`${opts.name} did not answer /health within ${opts.readyWithinMs} ms; see ${opts.logFile}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  return { url: opts.url, pid: child.pid!, exited, stop: (signal) => stopChild(child, exited, signal) };
}
