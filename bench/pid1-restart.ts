// What the local driver's watch of its own sandboxes' pid 1s costs an idle agent, and how late a
// sandbox whose pid 1 was killed runs commands again, for two checkouts (A and B) in turn: each
// side, in a process of its own, makes N sandboxes, sits (its own CPU, utime + stime, over a
// quiet window), then kills the pid 1 of K of them one at a time and reruns what an agent runs
// when its driver tells it (a pass: ensure until Running) while it tries `echo` in the sandbox
// every 20 ms: the time from the kill to the first `echo` that answers. Sandboxes the side made
// itself (not adopted: bench/pid1-watch.ts measures those), each killed once (no backoff).
// Usage (as root, under the machine's test lock):
//   node bench/pid1-restart.ts <checkout A> <checkout B> [sandboxes=40] [rounds=4] [kills=4] [windowS=20]
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { median } from "./stats.ts";

const role = process.env.PID1_RESTART_ROLE;
// A side gets the sizes from its environment (its arguments are its own).
const [a = "", b = "", n = "40", rounds = "4", kills = "4", windowS = "20"] = role ? ["", "", ...role.split(" ")] : process.argv.slice(2);

/** User + system CPU of this process so far, in µs. */
function cpuUs(): number {
  const u = process.cpuUsage();
  return u.user + u.system;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const desired = (id: string) => ({ id, generation: 1, template: "base", state: "Running", pauseStrategy: "Freeze", resources: { cpuCount: 1, memoryMB: 128 }, allowInternetAccess: false });

if (role) {
  const [checkout, dataDir, cgroupName, side] = process.argv.slice(2) as [string, string, string, string];
  const { LocalDriver } = await import(pathToFileURL(join(checkout, "controllers/drivers/local/local-driver.ts")).href);
  const { layoutFor } = await import(pathToFileURL(join(checkout, "controllers/drivers/local/layout.ts")).href);
  const { readRecord } = await import(pathToFileURL(join(checkout, "controllers/drivers/local/records.ts")).href);
  const driver = new LocalDriver({ dataDir, cgroupName });
  // What the agent does when told: a pass, again after its retryAfterMs, until it runs.
  driver.onChange((id: string) => {
    void (async () => {
      for (let i = 0; i < 100; i++) {
        const obs = await driver.ensure(desired(id));
        if (obs.phase === "Running") return;
        await sleep(obs.retryAfterMs ?? 250);
      }
    })();
  });
  const ids = Array.from({ length: Number(n) }, (_, i) => `pr${side}${i}`);
  for (let i = 0; i < ids.length; i += 8) await Promise.all(ids.slice(i, i + 8).map((id) => driver.ensure(desired(id))));
  const running = (await driver.list()).filter((s: { phase: string }) => s.phase === "Running").length;
  await sleep(10_000);
  const t0 = cpuUs();
  const w0 = performance.now();
  await sleep(Number(windowS) * 1000);
  const cpuMsPerS = (cpuUs() - t0) / (performance.now() - w0);
  const user = { name: "root", uid: 0, gid: 0, home: "/root", shell: "/bin/bash" };
  const echo = (id: string) =>
    driver.exec(id, { cmd: "/bin/echo", args: ["alive"], cwd: "/", env: { PATH: "/usr/bin:/bin" }, user }, { timeoutMs: 5000 }).then((r: { stdout: string }) => r.stdout, () => "");
  const delays: number[] = [];
  for (let k = 0; k < Number(kills); k++) {
    const id = ids[k]!;
    if ((await echo(id)) !== "alive\n") throw new Error(`${id}: no echo before the kill`);
    // A random phase against any timer: the pause spans a whole period of the base's 5 s look
    // (PID1_CHECK_MS), since the previous kill's restart came right after one of its ticks.
    await sleep(Math.random() * 5000);
    const pid = readRecord(layoutFor(dataDir, id).record).nsInit.pid;
    const k0 = performance.now();
    process.kill(pid, "SIGKILL");
    for (;;) {
      const rec = readRecord(layoutFor(dataDir, id).record);
      if (rec?.nsInit && rec.nsInit.pid !== pid && (await echo(id)) === "alive\n") break;
      if (performance.now() - k0 > 30_000) throw new Error(`${id}: not running again within 30 s`);
      await sleep(20);
    }
    delays.push(performance.now() - k0);
  }
  for (const id of ids) await driver.destroy(id);
  await driver.dispose();
  process.stdout.write(`${JSON.stringify({ running, cpuMsPerS, delays })}\n`);
  process.exit(0);
}

const fmt = (v: number[], d = 2) => v.map((x) => x.toFixed(d)).join(" ");
const out: Record<string, { cpu: number[]; delays: number[] }> = { A: { cpu: [], delays: [] }, B: { cpu: [], delays: [] } };
for (let r = 0; r < Number(rounds); r++) {
  for (const [name, checkout] of r % 2 ? ([["B", b], ["A", a]] as const) : ([["A", a], ["B", b]] as const)) {
    const dataDir = mkdtempSync(join(tmpdir(), "pid1-restart-"));
    try {
      const line = execFileSync(process.execPath, [process.argv[1]!, resolve(checkout!), dataDir, `kruise-bench-${process.pid}-pr`, `${name.toLowerCase()}${r}`], {
        env: { ...process.env, PID1_RESTART_ROLE: `${n} ${rounds} ${kills} ${windowS}` },
        encoding: "utf8",
        stdio: ["ignore", "pipe", "inherit"],
      });
      const m = JSON.parse(line.trim().split("\n").pop()!) as { running: number; cpuMsPerS: number; delays: number[] };
      if (m.running !== Number(n)) throw new Error(`${name}: ${m.running} of ${n} sandboxes running`);
      out[name]!.cpu.push(m.cpuMsPerS);
      out[name]!.delays.push(...m.delays);
      console.log(`round ${r} ${name}: idle ${m.cpuMsPerS.toFixed(2)} ms/s, kill to echo ${fmt(m.delays, 0)} ms`);
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  }
}
for (const [name, v] of Object.entries(out)) {
  const d = [...v.delays].sort((x, y) => x - y);
  console.log(`${name}: idle CPU ms/s median ${median(v.cpu).toFixed(2)} (runs ${fmt(v.cpu)}); kill to echo median ${median(d).toFixed(0)} ms (min ${d[0]!.toFixed(0)}, max ${d.at(-1)!.toFixed(0)}, n ${d.length})`);
}
