// Where the local driver's CPU per create + first command + destroy goes (issue 16, section 1):
// each phase's CPU in this process (the driver's JS) and in its spawner, the spawner's reaped
// children (the helpers it execs), and, with DRIVER_PROFILE_STRACE=1, every exec of the spawner's
// descendants counted by program (strace -f). Run as root:
//   node --cpu-prof --cpu-prof-dir=/tmp/prof bench/driver-profile.ts [rounds]
// DRIVER_PROFILE_ROOTFS=off: the host view instead of the `base` template's root.
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { Session } from "node:inspector/promises";
import { LocalDriver } from "../controllers/drivers/local/local-driver.ts";
import type { DesiredSandbox } from "../controllers/drivers/driver.ts";
import { median, procCpuMs, round, schedMs, spawnerOf } from "./stats.ts";
import { IsolationFloor } from "./isolation-floor.ts";

const ROUNDS = Number(process.argv[2] ?? 15);
const USER = { name: "user", uid: 1000, gid: 1000, home: "/home/user", shell: "/bin/bash" };

const selfMs = () => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
};

async function main(): Promise<void> {
  const dataDir = mkdtempSync(join(tmpdir(), "bench-drvprof-"));
  const driver = new LocalDriver({ dataDir, cgroupName: `kruise-bench-${process.pid}-prof`, rootfs: process.env.DRIVER_PROFILE_ROOTFS === "off" ? false : undefined });
  const phases = { ensure: [] as number[], exec: [] as number[], destroy: [] as number[], spawner: [] as number[], children: [] as number[], total: [] as number[], floor: [] as number[] };
  // The same sandbox made by a plain script, a round after each of the driver's (isolation-floor.sh).
  const floor = process.env.DRIVER_PROFILE_FLOOR === "off" ? undefined : new IsolationFloor({ userns: !driver.capabilities.notes.some((n) => n.startsWith("no user namespace")) });
  let strace: ReturnType<typeof spawn> | undefined;
  const traceFile = join(dataDir, "strace.out");
  try {
    // Warm: the spawner and the relay start with the first create.
    const warm: DesiredSandbox = { id: `dpw${process.pid}`, generation: 1, template: "base", state: "Running", pauseStrategy: "Freeze", resources: { cpuCount: 1, memoryMB: 512 }, allowInternetAccess: true };
    await driver.ensure(warm);
    await driver.exec(warm.id, { cmd: "/bin/true", args: [], cwd: "/", env: {}, user: USER });
    await driver.destroy(warm.id);
    const sp = spawnerOf(process.pid);
    if (process.env.DRIVER_PROFILE_STRACE && sp) {
      strace = spawn("strace", ["-f", "-qq", "-s", "300", "-e", "trace=execve", "-e", "signal=none", "-o", traceFile, "-p", String(sp)], { stdio: "ignore" });
      await sleep(500);
    }
    // DRIVER_PROFILE_CPU=<file>: a V8 profile of this process over the rounds only.
    const session = process.env.DRIVER_PROFILE_CPU ? new Session() : undefined;
    if (session) {
      session.connect();
      await session.post("Profiler.enable");
      await session.post("Profiler.setSamplingInterval", { interval: 100 });
      await session.post("Profiler.start");
    }
    for (let i = 0; i < ROUNDS; i++) {
      const d: DesiredSandbox = { ...warm, id: `dp${process.pid}x${i}` };
      const [s0, c0] = [schedMs(sp), procCpuMs(sp).children];
      let t = selfMs();
      await driver.ensure(d);
      phases.ensure.push(selfMs() - t);
      t = selfMs();
      await driver.exec(d.id, { cmd: "/bin/true", args: [], cwd: "/", env: {}, user: USER });
      phases.exec.push(selfMs() - t);
      t = selfMs();
      await driver.destroy(d.id);
      phases.destroy.push(selfMs() - t);
      phases.spawner.push(schedMs(sp) - s0);
      phases.children.push(procCpuMs(sp).children - c0);
      phases.total.push(phases.ensure.at(-1)! + phases.exec.at(-1)! + phases.destroy.at(-1)! + phases.spawner.at(-1)! + phases.children.at(-1)!);
      if (floor) phases.floor.push(floor.round());
    }
    if (session) writeFileSync(process.env.DRIVER_PROFILE_CPU!, JSON.stringify((await session.post("Profiler.stop")).profile));
    const out: Record<string, unknown> = { rounds: ROUNDS, load: readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ") };
    out.raw = { total: phases.total.map((x) => round(x)), floor: phases.floor.map((x) => round(x)), own: phases.ensure.map((x, i) => round(x + phases.exec[i]! + phases.destroy[i]!)), spawner: phases.spawner.map((x) => round(x)), children: phases.children };
    if (floor) out.driver_vs_floor_ratio = round(median(phases.total) / median(phases.floor));
    for (const [k, xs] of Object.entries(phases)) if (xs.length) out[`${k}_ms`] = { median: round(median(xs)), min: round(Math.min(...xs)), max: round(Math.max(...xs)), mean: round(xs.reduce((a, b) => a + b, 0) / xs.length) };
    if (strace) {
      strace.kill("SIGINT");
      await new Promise((r) => strace!.once("exit", r));
      const counts = new Map<string, number>();
      for (const line of readFileSync(traceFile, "utf8").split("\n")) {
        const m = /execve\("([^"]+)"(?:, \["[^"]*"(?:, "([^"]*)")?)?/.exec(line);
        if (!m || line.includes("= -1")) continue;
        const prog = m[1]!.endsWith("perl") && m[2] ? `perl ${m[2].split("/").at(-1)}` : m[1]!;
        counts.set(prog, (counts.get(prog) ?? 0) + 1);
      }
      out.execs_per_round = Object.fromEntries([...counts].sort((a, b) => b[1] - a[1]).map(([k, n]) => [k, round(n / ROUNDS)]));
      out.execs_total_per_round = round([...counts.values()].reduce((a, b) => a + b, 0) / ROUNDS);
    }
    console.log(JSON.stringify(out, null, 2));
  } finally {
    strace?.kill("SIGKILL");
    floor?.dispose();
    for (const s of await driver.list()) await driver.destroy(s.id).catch(() => {});
    await driver.dispose();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

await main();
