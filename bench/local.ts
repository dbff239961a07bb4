// Local driver figures: sandbox start, freeze/thaw, command() spawn overhead, snapshots (snapshots.ts), memory per idle
// sandbox over 50 (the holders only: e2e.idle_sandbox_overhead_mb's driver part), and what the
// runtime costs per sandbox when shared versus one Node process per sandbox.
//   node bench/local.ts            prints the figures as JSON
//   node bench/local.ts --own-network   only the figures of sandbox networks (veth + NAT vs host)
//   node bench/local.ts --disk          only the figures of a disk per sandbox (disk.ts) vs none
//   node bench/local.ts --seccomp       only the figures of the seccomp filter (seccomp.ts) vs none
// The root filesystem figures (rooted vs host view) are bench/rootfs.ts's.
// `run(ctx)` is what bench/run.ts calls.
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { request } from "node:http";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { setTimeout as sleep } from "node:timers/promises";
import type { DesiredSandbox } from "../controllers/drivers/driver.ts";
import { cgroupPids } from "../controllers/drivers/local/cgroups.ts";
import { LocalDriver } from "../controllers/drivers/local/local-driver.ts";
import { layoutFor } from "../controllers/drivers/local/layout.ts";
import { readRecord } from "../controllers/drivers/local/records.ts";
import { inProcessLauncher, spawnHost, type ProcessLauncher } from "../controllers/runtime/process/launcher.ts";
import type { HostCommand, SandboxUser } from "../controllers/runtime/sandbox-view.ts";
import { run as egressFigures } from "./egress.ts";
import { rootfsFigures } from "./rootfs.ts";
import { run as snapshotFigures } from "./snapshots.ts";
import type { BenchContext, Figures } from "./run.ts";
import { percentile as pct, pssKB, round, statusKB } from "./stats.ts";

const ROOT_DIR = resolve(import.meta.dirname, "..");
const USER: SandboxUser = { name: "user", uid: 1000, gid: 1000, home: "/home/user", shell: "/bin/bash" };
const SANDBOXES = 50;
const NODE_RUNTIMES = 5;

/** Start to exit of a host command forked here (its environment handed over as the launchers do). */
function waitExit(c: HostCommand): Promise<number> {
  const t = performance.now();
  return new Promise((res, rej) => {
    const child = spawnHost(c, { detached: false, stdio: "ignore" });
    child.once("error", rej);
    child.once("exit", () => res(performance.now() - t));
  });
}

/** Start to exit of a host command through a launcher, output drained. */
async function launchedMs(launcher: ProcessLauncher, c: HostCommand): Promise<number> {
  const t = performance.now();
  const p = await launcher.spawnPipes(c, false);
  p.stdout.resume();
  p.stderr.resume();
  await new Promise((r) => p.onExit(r));
  return performance.now() - t;
}

function desired(id: string): DesiredSandbox {
  return { id, generation: 1, template: "base", state: "Running", pauseStrategy: "Freeze", resources: { cpuCount: 1, memoryMB: 512 }, allowInternetAccess: false };
}

/** One Node agent-runtime per sandbox: start several standalone runtimes, serve one request
 * each, and take their memory when idle. */
async function perSandboxRuntimeKB(dir: string): Promise<{ pss: number; rss: number }> {
  const procs = [];
  for (let i = 0; i < NODE_RUNTIMES; i++) {
    const socket = join(dir, `rt${i}.sock`);
    const child = spawn(process.execPath, [join(ROOT_DIR, "controllers/runtime/main.ts"), "--socket", socket, "--workdir", dir], { stdio: ["ignore", "pipe", "inherit"] });
    await new Promise<void>((res) => child.stdout!.once("data", () => res()));
    await get(socket, "/health");
    procs.push(child);
  }
  await sleep(1500);
  const pss = procs.reduce((s, c) => s + pssKB(c.pid!), 0) / procs.length;
  const rss = procs.reduce((s, c) => s + statusKB(c.pid!), 0) / procs.length;
  for (const c of procs) c.kill("SIGKILL");
  return { pss, rss };
}

function get(socketPath: string, path: string, headers: Record<string, string> = {}): Promise<number> {
  return new Promise((res, rej) => {
    const req = request({ socketPath, path, headers }, (r) => {
      r.resume();
      r.once("end", () => res(r.statusCode ?? 0));
    });
    req.once("error", rej);
    req.end();
  });
}

/** The shared runtime's cost per added sandbox, measured in a child process (see sharedRuntimeChild). */
function sharedRuntimePerSandboxKB(dataDir: string, cgroupName: string, ids: string[]): number {
  const r = spawnSync(process.execPath, ["--expose-gc", fileURLToPath(import.meta.url), "--shared-runtime", dataDir, cgroupName, ...ids], { encoding: "utf8" });
  const m = /per-sandbox-kb (\S+)/.exec(r.stdout);
  if (!m) throw new Error(`shared runtime probe failed: ${r.stderr}`);
  return Number(m[1]);
}

async function sharedRuntimeChild(dataDir: string, cgroupName: string, ids: string[]): Promise<void> {
  const { createRuntime } = await import("../controllers/runtime/runtime.ts");
  const driver = new LocalDriver({ dataDir, cgroupName });
  const runtime = createRuntime({});
  const socket = join(dataDir, "shared.sock");
  await runtime.listen({ socket });
  const gc = (globalThis as { gc?: () => void }).gc ?? (() => {});
  await get(socket, "/health");
  gc();
  await sleep(200);
  const before = statusKB(process.pid);
  for (const id of ids) {
    runtime.addSandbox(id, driver.view(id));
    await get(socket, "/health", { "E2b-Sandbox-Id": id });
  }
  gc();
  await sleep(200);
  process.stdout.write(`per-sandbox-kb ${(statusKB(process.pid) - before) / ids.length}\n`);
  await runtime.close();
}

export async function run(ctx: Partial<BenchContext> = {}): Promise<Figures> {
  const dataDir = mkdtempSync(join(ctx.dir ?? tmpdir(), "bench-local-"));
  const cgroupName = `kruise-bench-${process.pid}`;
  // Spare disks as the agent keeps them: in this burst of sequential starts some find one ready
  // and some format their own (diskFigures compares the kinds one by one).
  const driver = new LocalDriver({ dataDir, cgroupName, spareDisks: 2 });
  const ids = Array.from({ length: SANDBOXES }, (_, i) => `bench${process.pid}x${i}`);
  const figures: Figures = {};
  try {
    const starts: number[] = [];
    for (const id of ids) {
      const t = performance.now();
      await driver.ensure(desired(id));
      starts.push(performance.now() - t);
    }
    await sleep(2000);
    let pss = 0;
    let charged = 0;
    for (const id of ids) {
      const cg = readRecord(layoutFor(dataDir, id).record)!.cgroups!;
      for (const pid of cgroupPids(cg.core)) pss += pssKB(pid);
      if (cg.v1.memory) charged += Number(readFileSync(join(cg.v1.memory, "memory.usage_in_bytes"), "utf8")) / 1024;
      else charged += Number(readFileSync(join(cg.core, "memory.current"), "utf8")) / 1024;
    }

    const view = driver.view(ids[0]!);
    const plain: number[] = [];
    const inside: number[] = [];
    for (let i = 0; i < 30; i++) {
      plain.push(await waitExit({ file: "/bin/true", args: [], cwd: "/", env: {} }));
      const c = view.command({ cmd: "/bin/true", args: [], cwd: "/home/user", env: { PATH: "/usr/bin:/bin" }, user: USER });
      inside.push(await waitExit(c));
    }

    // The same command through the driver's spawner, and forked here; and how long the fork itself
    // holds this process's event loop up at a few sizes of this process (spawner.ts says why).
    const viaSpawner: number[] = [];
    const viaFork: number[] = [];
    for (let i = 0; i < 30; i++) {
      const c = view.command({ cmd: "/bin/true", args: [], cwd: "/home/user", env: { PATH: "/usr/bin:/bin" }, user: USER });
      viaSpawner.push(await launchedMs(view.launcher!, c));
      viaFork.push(await launchedMs(inProcessLauncher, c));
    }
    figures["local.command_via_spawner_ms"] = { value: round(pct(viaSpawner, 50)), unit: "ms" };
    figures["local.command_forked_in_process_ms"] = { value: round(pct(viaFork, 50)), unit: "ms" };
    const ballast: Buffer[] = [];
    for (const mb of [0, 100, 200]) {
      while (ballast.length < mb) ballast.push(Buffer.alloc(1 << 20, 1));
      const blocked: number[] = [];
      for (let i = 0; i < 15; i++) {
        const t = performance.now();
        const c = spawn("/bin/true", [], { stdio: "ignore" });
        blocked.push(performance.now() - t);
        await new Promise((r) => c.once("exit", r));
      }
      figures[`local.fork_blocks_event_loop_ms_at_${Math.round(statusKB(process.pid) / 1024 / 10) * 10}mb`] = { value: round(pct(blocked, 50)), unit: "ms" };
    }
    ballast.length = 0;

    await driver.exec(ids[1]!, { cmd: "/bin/bash", args: ["-c", "nohup bash -c 'while :; do :; done' >/dev/null 2>&1 &"], cwd: "/home/user", env: {}, user: USER });
    const freezes: number[] = [];
    const thaws: number[] = [];
    for (let i = 0; i < 20; i++) {
      let t = performance.now();
      await driver.freeze(ids[1]!);
      freezes.push(performance.now() - t);
      t = performance.now();
      await driver.thaw(ids[1]!);
      thaws.push(performance.now() - t);
      await sleep(20);
    }

    const sharedKB = sharedRuntimePerSandboxKB(dataDir, cgroupName, ids);
    const node = await perSandboxRuntimeKB(dataDir);

    const destroys: number[] = [];
    for (const id of ids) {
      const t = performance.now();
      await driver.destroy(id);
      destroys.push(performance.now() - t);
    }

    // PSS counts the holders' user memory; the memory cgroup's charge adds the kernel memory of
    // their namespaces. System-wide MemAvailable deltas were tried and are too noisy on a shared
    // machine to mean anything at this size.
    const holderMB = Math.max(pss, charged) / 1024 / SANDBOXES;
    Object.assign(figures, {
      "local.isolation_level_bwrap_cgroup": { value: driver.capabilities.level === "bwrap+cgroup" ? 1 : 0, unit: "bool" },
      "local.sandbox_start_p50_ms": { value: round(pct(starts, 50)), unit: "ms" },
      "local.sandbox_start_p99_ms": { value: round(pct(starts, 99)), unit: "ms" },
      "local.destroy_p50_ms": { value: round(pct(destroys, 50)), unit: "ms" },
      "local.freeze_ms": { value: round(pct(freezes, 50), 3), unit: "ms" },
      "local.thaw_ms": { value: round(pct(thaws, 50), 3), unit: "ms" },
      "local.plain_spawn_ms": { value: round(pct(plain, 50)), unit: "ms" },
      "local.command_spawn_ms": { value: round(pct(inside, 50)), unit: "ms" },
      "local.command_overhead_ms": { value: round(pct(inside, 50) - pct(plain, 50)), unit: "ms" },
      "local.idle_holder_pss_mb": { value: round(pss / 1024 / SANDBOXES, 3), unit: "MB" },
      "local.idle_holder_cgroup_charged_mb": { value: round(charged / 1024 / SANDBOXES, 3), unit: "MB" },
      "local.idle_holder_overhead_mb": { value: round(holderMB, 3), unit: "MB", target: "≤ 20 (with the shared runtime's share: e2e.idle_sandbox_overhead_mb)" },
      "local.shared_runtime_per_sandbox_mb": { value: round(sharedKB / 1024, 3), unit: "MB" },
      "local.per_sandbox_node_runtime_mb": { value: round(node.pss / 1024, 1), unit: "MB" },
      "local.per_sandbox_node_runtime_rss_mb": { value: round(node.rss / 1024, 1), unit: "MB" },
    });
  } finally {
    for (const id of ids) await driver.destroy(id).catch(() => {});
    await driver.dispose();
    rmSync(dataDir, { recursive: true, force: true });
  }
  Object.assign(figures, await egressFigures(ctx));
  Object.assign(figures, await ownNetworkFigures(ctx));
  Object.assign(figures, await diskFigures(ctx));
  Object.assign(figures, await seccompFigures(ctx));
  Object.assign(figures, await rootfsFigures(ctx));
  Object.assign(figures, await snapshotFigures(ctx));
  return figures;
}

/** Create (ensure until Running) and destroy with a disk of its own per sandbox (mkfs + loop
 * mount of a 1 GiB sparse image, the template default), with one taken from the spare disks
 * (spare-disks.ts: made in the background, as the agent does), and without one, in turn so load
 * from elsewhere hits all three alike. */
async function diskFigures(ctx: Partial<BenchContext>): Promise<Figures> {
  const dirs = [mkdtempSync(join(ctx.dir ?? tmpdir(), "bench-disk-")), mkdtempSync(join(ctx.dir ?? tmpdir(), "bench-nodisk-"))];
  dirs.push(mkdtempSync(join(ctx.dir ?? tmpdir(), "bench-spare-")));
  const withDisk = new LocalDriver({ dataDir: dirs[0]!, cgroupName: `kruise-bench-${process.pid}-disk` });
  const without = new LocalDriver({ dataDir: dirs[1]!, cgroupName: `kruise-bench-${process.pid}-nodisk`, disk: false });
  const spare = new LocalDriver({ dataDir: dirs[2]!, cgroupName: `kruise-bench-${process.pid}-spare`, spareDisks: 2 });
  const kinds = [["disk", withDisk], ["none", without], ["spare", spare]] as const;
  const creates = { disk: [] as number[], none: [] as number[], spare: [] as number[] };
  const destroys = { disk: [] as number[], none: [] as number[], spare: [] as number[] };
  let seq = 0;
  try {
    for (let i = 0; i < 20; i++) {
      for (const [kind, driver] of kinds) {
        const d = { ...desired(`bdisk${process.pid}x${seq++}`), resources: { cpuCount: 1, memoryMB: 512, diskSizeMB: 1024 } };
        let t = performance.now();
        await driver.ensure(d);
        creates[kind].push(performance.now() - t);
        t = performance.now();
        await driver.destroy(d.id);
        destroys[kind].push(performance.now() - t);
      }
    }
    return {
      "local.disk_level_quota": { value: withDisk.capabilities.disk === "quota" ? 1 : 0, unit: "bool" },
      "local.disk_create_p50_ms": { value: round(pct(creates.disk, 50)), unit: "ms" },
      "local.no_disk_create_p50_ms": { value: round(pct(creates.none, 50)), unit: "ms" },
      "local.disk_extra_create_ms": { value: round(pct(creates.disk, 50) - pct(creates.none, 50)), unit: "ms" },
      "local.spare_disk_create_p50_ms": { value: round(pct(creates.spare, 50)), unit: "ms" },
      "local.spare_disk_extra_create_ms": { value: round(pct(creates.spare, 50) - pct(creates.none, 50)), unit: "ms" },
      "local.disk_destroy_p50_ms": { value: round(pct(destroys.disk, 50)), unit: "ms" },
      "local.no_disk_destroy_p50_ms": { value: round(pct(destroys.none, 50)), unit: "ms" },
    };
  } finally {
    for (const [, driver] of kinds) {
      for (const s of await driver.list()) await driver.destroy(s.id).catch(() => {});
      await driver.dispose();
    }
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  }
}

/** One million syscalls (dd copying 500,000 single bytes: a read and a write each), timed inside
 * the sandbox, in ns. */
const SYSCALLS = "s=$(date +%s%N); dd if=/dev/zero of=/dev/null bs=1 count=500000 2>/dev/null; e=$(date +%s%N); echo $((e-s))";

/** The seccomp filter (seccomp.ts) against none (`seccomp: false`), in turn (which goes first
 * alternates, so load from elsewhere hits both alike): create (ensure until Running), the first
 * command (`/bin/true`: enter.pl reads and loads the program), one million syscalls inside
 * (the kernel runs the program, or skips it where its action cache says "allowed"), destroy. */
async function seccompFigures(ctx: Partial<BenchContext>): Promise<Figures> {
  const dirs = [mkdtempSync(join(ctx.dir ?? tmpdir(), "bench-seccomp-")), mkdtempSync(join(ctx.dir ?? tmpdir(), "bench-noseccomp-"))];
  const on = new LocalDriver({ dataDir: dirs[0]!, cgroupName: `kruise-bench-${process.pid}-seccomp` });
  const off = new LocalDriver({ dataDir: dirs[1]!, cgroupName: `kruise-bench-${process.pid}-noseccomp`, seccomp: false });
  const kinds = { on: { driver: on, create: [] as number[], command: [] as number[], syscallsMs: [] as number[], destroy: [] as number[] }, off: { driver: off, create: [] as number[], command: [] as number[], syscallsMs: [] as number[], destroy: [] as number[] } };
  const root = { ...USER, name: "root", uid: 0, gid: 0, home: "/root" };
  let seq = 0;
  try {
    for (let i = 0; i < 20; i++) {
      for (const k of i % 2 ? (["off", "on"] as const) : (["on", "off"] as const)) {
        const f = kinds[k];
        const d = desired(`bsecc${process.pid}x${seq++}`);
        let t = performance.now();
        await f.driver.ensure(d);
        f.create.push(performance.now() - t);
        t = performance.now();
        await f.driver.exec(d.id, { cmd: "/bin/true", args: [], cwd: "/", env: {}, user: USER });
        f.command.push(performance.now() - t);
        const r = await f.driver.exec(d.id, { cmd: "/bin/sh", args: ["-c", SYSCALLS], cwd: "/", env: {}, user: root });
        f.syscallsMs.push(Number(r.stdout.trim()) / 1e6);
        t = performance.now();
        await f.driver.destroy(d.id);
        f.destroy.push(performance.now() - t);
      }
    }
    const p50 = (xs: number[]) => round(pct(xs, 50));
    // Spread: the 10th and 90th percentiles.
    const spread = (xs: number[]): [number, number] => [round(pct(xs, 10)), round(pct(xs, 90))];
    const figures: Figures = {
      "local.seccomp_filter_on": { value: on.capabilities.notes.some((n) => n.startsWith("seccomp:")) ? 1 : 0, unit: "bool" },
      "local.seccomp_rounds": { value: kinds.on.create.length, unit: "count" },
    };
    for (const [k, f] of Object.entries(kinds)) {
      const name = k === "on" ? "seccomp" : "no_seccomp";
      figures[`local.${name}_create_p50_ms`] = { value: p50(f.create), unit: "ms", spread: spread(f.create) };
      figures[`local.${name}_first_command_p50_ms`] = { value: p50(f.command), unit: "ms", spread: spread(f.command) };
      figures[`local.${name}_1m_syscalls_p50_ms`] = { value: p50(f.syscallsMs), unit: "ms", spread: spread(f.syscallsMs) };
      figures[`local.${name}_destroy_p50_ms`] = { value: p50(f.destroy), unit: "ms", spread: spread(f.destroy) };
    }
    // Paired by round (same load at the same time): the median of the per-round differences.
    const diff = (a: number[], b: number[]) => round(pct(a.map((x, i) => x - b[i]!), 50));
    figures["local.seccomp_extra_create_ms"] = { value: diff(kinds.on.create, kinds.off.create), unit: "ms" };
    figures["local.seccomp_extra_first_command_ms"] = { value: diff(kinds.on.command, kinds.off.command), unit: "ms" };
    // ms per million system calls is ns per system call.
    figures["local.seccomp_extra_ns_per_syscall"] = { value: diff(kinds.on.syscallsMs, kinds.off.syscallsMs), unit: "ns" };
    return figures;
  } finally {
    for (const driver of [on, off]) {
      for (const s of await driver.list()) await driver.destroy(s.id).catch(() => {});
      await driver.dispose();
    }
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  }
}

/** A TCP server answering each connection's first byte with one byte, bound to `bind:port`. */
const ECHO = (bind: string, port: number) =>
  `import socket\ns=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("${bind}", ${port})); s.listen(64)\nwhile True:\n  c,_=s.accept(); c.recv(1); c.sendall(b"y"); c.close()`;

/** Connect + 1-byte round trip through driver.connectUserPort (the agent's ingress path). */
async function userPortRoundTrips(driver: LocalDriver, id: string, port: number, n: number): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    const s = await driver.connectUserPort(id, port);
    await new Promise<void>((ok, fail) => {
      s.once("data", () => ok()).once("error", fail);
      s.write("x");
    });
    out.push(performance.now() - t);
    s.destroy();
  }
  return out;
}

/** Sandboxes with internet access in a network namespace of their own (veth + NAT, the default)
 * against the host's network (`network: false`, as before): create to first command, and a user
 * port's connect + round trip (at the sandbox's address, and at its loopback through the relay). */
async function ownNetworkFigures(ctx: Partial<BenchContext>): Promise<Figures> {
  const dirs = [mkdtempSync(join(ctx.dir ?? tmpdir(), "bench-net-")), mkdtempSync(join(ctx.dir ?? tmpdir(), "bench-hostnet-"))];
  const own = new LocalDriver({ dataDir: dirs[0]!, cgroupName: `kruise-bench-${process.pid}-net` });
  const shared = new LocalDriver({ dataDir: dirs[1]!, cgroupName: `kruise-bench-${process.pid}-hostnet`, network: false });
  const times = { own: [] as number[], shared: [] as number[] };
  const last = { own: "", shared: "" };
  let seq = 0;
  try {
    // Alternating, so load from elsewhere on the machine hits both alike.
    for (let i = 0; i < 15; i++) {
      for (const [kind, driver] of [["own", own], ["shared", shared]] as const) {
        const d = { ...desired(`bnet${process.pid}x${seq++}`), allowInternetAccess: true };
        const t = performance.now();
        await driver.ensure(d);
        await driver.exec(d.id, { cmd: "/bin/true", args: [], cwd: "/", env: {}, user: USER });
        times[kind].push(performance.now() - t);
        last[kind] = d.id;
      }
    }
    const serve = (driver: LocalDriver, id: string, bind: string, port: number) =>
      driver.exec(id, { cmd: "/bin/bash", args: ["-c", `printf '${ECHO(bind, port)}' > /tmp/e${port}.py; (setsid python3 /tmp/e${port}.py >/dev/null 2>&1 </dev/null &); sleep 0.5`], cwd: "/", env: { PATH: "/usr/bin:/bin" }, user: USER });
    const port = 20000 + (process.pid % 20000);
    await serve(own, last.own, "0.0.0.0", port);
    await serve(own, last.own, "127.0.0.1", port + 1);
    await serve(shared, last.shared, "127.0.0.1", port + 2);
    const byAddress = await userPortRoundTrips(own, last.own, port, 200);
    const byRelay = await userPortRoundTrips(own, last.own, port + 1, 200);
    const hostLoopback = await userPortRoundTrips(shared, last.shared, port + 2, 200);
    return {
      "local.own_net_create_to_first_cmd_p50_ms": { value: round(pct(times.own, 50)), unit: "ms" },
      "local.host_net_create_to_first_cmd_p50_ms": { value: round(pct(times.shared, 50)), unit: "ms" },
      "local.own_net_extra_start_ms": { value: round(pct(times.own, 50) - pct(times.shared, 50)), unit: "ms" },
      "local.user_port_own_net_p50_ms": { value: round(pct(byAddress, 50), 3), unit: "ms" },
      "local.user_port_own_net_p99_ms": { value: round(pct(byAddress, 99), 3), unit: "ms" },
      "local.user_port_loopback_bound_p50_ms": { value: round(pct(byRelay, 50), 3), unit: "ms" },
      "local.user_port_host_net_p50_ms": { value: round(pct(hostLoopback, 50), 3), unit: "ms" },
      "local.user_port_host_net_p99_ms": { value: round(pct(hostLoopback, 99), 3), unit: "ms" },
    };
  } finally {
    for (const [driver, dir] of [[own, dirs[0]!], [shared, dirs[1]!]] as const) {
      for (const s of await driver.list()) await driver.destroy(s.id).catch(() => {});
      await driver.dispose();
      rmSync(dir, { recursive: true, force: true });
    }
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  if (process.argv[2] === "--shared-runtime") {
    const [dataDir, cgroupName, ...ids] = process.argv.slice(3);
    await sharedRuntimeChild(dataDir!, cgroupName!, ids);
  } else if (process.argv[2] === "--own-network") {
    console.log(JSON.stringify(await ownNetworkFigures({}), null, 2));
  } else if (process.argv[2] === "--disk") {
    console.log(JSON.stringify(await diskFigures({}), null, 2));
  } else if (process.argv[2] === "--seccomp") {
    console.log(JSON.stringify(await seccompFigures({}), null, 2));
  } else {
    console.log(JSON.stringify(await run(), null, 2));
  }
}
