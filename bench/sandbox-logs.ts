// The agent's sandbox logs on disk, before and after batching (issue 15.3): the CPU the agent's
// event loop spends per command (two entries: process started, process exited) over many
// sandboxes, measured interleaved in one run as the process's CPU time (user + system; wall time
// on a shared machine counts the other tenants).
//   git show 2ae23d0:controllers/agent/sandbox-logs.ts > controllers/agent/sandbox-logs-before.ts
//   node bench/sandbox-logs.ts controllers/agent/sandbox-logs-before.ts [rounds]   prints JSON
// The old module is the file as of the commit before the batching (git show <rev>:...), copied
// beside the new one. "after" includes its flushes (one append per sandbox per flush).
import { mkdtempSync, rmSync } from "node:fs";
import { join, resolve } from "node:path";
import { SandboxLogs } from "../controllers/agent/sandbox-logs.ts";
import { round } from "./stats.ts";

const OLD = resolve(process.argv[2] ?? "controllers/agent/sandbox-logs-before.ts");
const ROUNDS = Number(process.argv[3] ?? 10);
const SANDBOXES = 20;
const COMMANDS = 100; // per sandbox per round
const { SandboxLogs: OldLogs } = (await import(OLD)) as { SandboxLogs: new (per?: number, dir?: string) => Pick<SandboxLogs, "append"> };
const base = mkdtempSync(join(process.env.BENCH_DIR ?? "/var/tmp", "sbx-logs-bench-"));
const ids = Array.from({ length: SANDBOXES }, (_, i) => String(i).padStart(20, "a"));

const cpuMs = (fn: () => void): number => {
  const t = process.cpuUsage();
  fn();
  const d = process.cpuUsage(t);
  return (d.user + d.system) / 1000;
};
/** A command's two entries, as the runtime logs them. */
const command = (logs: Pick<SandboxLogs, "append">, id: string, n: number) => {
  logs.append(id, "info", "process started", { component: "runtime", pid: 1000 + n, cmd: `/bin/bash -l -c "echo ${n}"`, user: "user" });
  logs.append(id, "info", "process exited", { component: "runtime", pid: 1000 + n, exitCode: 0 });
};

const before: number[] = [];
const after: number[] = [];
for (let r = 0; r < ROUNDS; r++) {
  const oldLogs = new OldLogs(undefined, join(base, `old-${r}`));
  before.push(cpuMs(() => {
    for (let n = 0; n < COMMANDS; n++) for (const id of ids) command(oldLogs, id, n);
  }));
  // The batched store flushes on its timer; here every 10 commands per sandbox (about what a
  // 200 ms flush sees from a busy agent), each flush counted.
  const newLogs = new SandboxLogs({ dir: join(base, `new-${r}`), flushMs: 60_000 });
  after.push(cpuMs(() => {
    for (let n = 0; n < COMMANDS; n++) {
      for (const id of ids) command(newLogs, id, n);
      if (n % 10 === 9) newLogs.flush();
    }
    newLogs.flush();
  }));
}
rmSync(base, { recursive: true, force: true });
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const perCommand = (xs: number[]) => round((median(xs) * 1000) / (SANDBOXES * COMMANDS), 2);
console.log(JSON.stringify({ "obs.sandbox_logs_us_per_command_before": perCommand(before), "obs.sandbox_logs_us_per_command_after": perCommand(after), rounds: ROUNDS, sandboxes: SANDBOXES, commandsPerSandbox: COMMANDS }, null, 1));
