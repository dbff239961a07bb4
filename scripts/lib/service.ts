// A local server process (sqld, workerd) started by the launcher, tests or benchmarks: spawned
// directly (never through a shell, so the pid is the server's own), ready once GET /health
// answers, stopped with SIGTERM and, after 5 s, SIGKILL.
import { spawn } from "node:child_process";
import { openSync } from "node:fs";

export interface Service {
  url: string;
  pid: number;
  stop(): Promise<void>;
}

export async function startService(opts: { name: string; bin: string; args: string[]; url: string; logFile: string; readyWithinMs: number }): Promise<Service> {
  const log = openSync(opts.logFile, "a");
  const child = spawn(opts.bin, opts.args, { stdio: ["ignore", log, log] });
  const exited = new Promise<void>((ok) => child.once("exit", () => ok()));
  const deadline = Date.now() + opts.readyWithinMs;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`${opts.name} exited with ${child.exitCode}; see ${opts.logFile}`);
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
  return {
    url: opts.url,
    pid: child.pid!,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), 5_000);
      await exited;
      clearTimeout(timer);
    },
  };
}
