// What the local driver's watch of its sandboxes' pid 1s (local-driver.ts #checkWatched, one
// /proc/<pid>/stat read per running sandbox every PID1_CHECK_MS, 5 s; 1 s until session 32) costs an idle agent: N sandboxes made
// once, then drivers of two checkouts (A and B) adopt them in turn (a list and a pass each), each
// in a process of its own that measures its own CPU (utime + stime) over a quiet window.
// Usage (as root, under the machine's test lock):
//   node bench/pid1-watch.ts <checkout A> <checkout B> [sandboxes=50] [rounds=5] [windowS=10]
// PID1_WATCH_SETTLE_S (default 10): the wait before the window. A fresh process's CPU is still
// settling (compilation, collection) seconds after its adoption pass: with 2 s, no sandboxes and
// the same code on both sides, rounds differed by up to 8 ms/s (session 32). Even with 10 s and
// 20 s windows some runs read ~5 ms/s with or without a watch (unexplained, README "Cost"):
// compare paired rounds, not one median.
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";

const [a = "", b = "", n = "50", rounds = "5", windowS = "10"] = process.argv.slice(2);
const role = process.env.PID1_WATCH_ROLE;

/** User + system CPU of this process so far, in µs (getrusage: finer than /proc's 10 ms ticks). */
function cpuUs(): number {
  const u = process.cpuUsage();
  return u.user + u.system;
}

async function driverFrom(checkout: string, dataDir: string, cgroupName: string) {
  const { LocalDriver } = await import(pathToFileURL(join(checkout, "controllers/drivers/local/local-driver.ts")).href);
  return new LocalDriver({ dataDir, cgroupName });
}

const desired = (i: number) => ({ id: `pw${i}`, generation: 1, template: "base", state: "Running", pauseStrategy: "Freeze", resources: { cpuCount: 1, memoryMB: 128 }, allowInternetAccess: false });

if (role) {
  // One side: adopt every sandbox (one observation each, as an agent's restart does), then sit.
  const [checkout, dataDir, cgroupName, what] = process.argv.slice(2) as [string, string, string, string];
  const driver = await driverFrom(checkout, dataDir, cgroupName);
  if (what === "make") {
    await Promise.all(Array.from({ length: Number(process.env.PID1_WATCH_N) }, (_, i) =>
      driver.ensure(desired(i))));
  } else if (what === "destroy") {
    for (const s of await driver.list()) await driver.destroy(s.id);
  } else {
    // A pass each, as an agent's inventory runs: the watch is armed under the sandbox's lock.
    for (let i = 0; i < Number(process.env.PID1_WATCH_N); i++) await driver.ensure(desired(i));
    const running = (await driver.list()).filter((s: { phase: string }) => s.phase === "Running").length;
    await new Promise((r) => setTimeout(r, Number(process.env.PID1_WATCH_SETTLE_S ?? 10) * 1000));
    const t0 = cpuUs();
    const w0 = performance.now();
    await new Promise((r) => setTimeout(r, Number(process.env.PID1_WATCH_WINDOW_S) * 1000));
    const ms = (cpuUs() - t0) / (performance.now() - w0);
    process.stdout.write(`${JSON.stringify({ running, cpuMsPerS: ms })}\n`);
  }
  await driver.dispose();
  process.exit(0);
}

const dataDir = mkdtempSync(join(tmpdir(), "pid1-watch-"));
const cgroupName = `kruise-bench-${process.pid}-pid1`;
const side = (checkout: string, what: string) =>
  execFileSync(process.execPath, [process.argv[1]!, resolve(checkout), dataDir, cgroupName, what], {
    env: { ...process.env, PID1_WATCH_ROLE: "1", PID1_WATCH_N: n, PID1_WATCH_WINDOW_S: windowS },
    encoding: "utf8",
  });
try {
  side(b, "make");
  const out: Record<string, number[]> = { A: [], B: [] };
  for (let r = 0; r < Number(rounds); r++) {
    for (const [name, checkout] of r % 2 ? ([["B", b], ["A", a]] as const) : ([["A", a], ["B", b]] as const)) {
      const m = JSON.parse(side(checkout!, "idle").trim().split("\n").pop()!) as { running: number; cpuMsPerS: number };
      if (m.running !== Number(n)) throw new Error(`${name}: ${m.running} of ${n} sandboxes running`);
      out[name]!.push(m.cpuMsPerS);
    }
  }
  const median = (v: number[]) => [...v].sort((x, y) => x - y)[Math.floor(v.length / 2)]!;
  for (const [name, v] of Object.entries(out)) console.log(`${name}: idle CPU ms/s median ${median(v).toFixed(2)} (runs ${v.map((x) => x.toFixed(2)).join(" ")})`);
} finally {
  side(b, "destroy");
  rmSync(dataDir, { recursive: true, force: true });
}
