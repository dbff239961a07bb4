// At `bwrap` without cgroups a sandbox's processes are found by a host-wide scan (holder.ts
// `sandboxPids`). The scan must not reach into another sandbox: a tenant of sandbox A that keeps
// forking children carrying B's `KRUISE_SANDBOX_ID` must not make B's freeze or destroy fail
// ("processes keep appearing"), nor be stopped or killed by them; and B's freeze and destroy
// still reach everything of B (its pid namespace, its holder, a command's host side and another
// marked process in the agent's namespace), checked on the exact pids taken before each.
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, readdirSync, readlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import type { DesiredSandbox } from "../../../../controllers/drivers/driver.ts";
import { alive, exiting, procRef } from "../../../../controllers/drivers/local/holder.ts";
import { layoutFor } from "../../../../controllers/drivers/local/layout.ts";
import { LocalDriver } from "../../../../controllers/drivers/local/local-driver.ts";
import { MARKER_ENV } from "../../../../controllers/drivers/local/local-view.ts";
import { readRecord } from "../../../../controllers/drivers/local/records.ts";
import { desiredSandbox, destroyAll, pollUntil, USER } from "./fixture.ts";

const dataDir = mkdtempSync(join(tmpdir(), "local-driver-xscan-"));
const driver = new LocalDriver({ dataDir, level: "bwrap", cgroupName: `kruise-test-${process.pid}-xscan` });

afterAll(async () => {
  for (const c of hostSides) c.kill("SIGKILL");
  await destroyAll(driver, dataDir);
});

/** Forks without end, every 2 ms, a child that execs `sleep` with the victim's marker (so the
 * marker is in the child's /proc environ); the forker itself keeps its own sandbox's marker. */
const FORKER = 'my $id = shift; while (1) { my $p = fork(); if (defined $p && !$p) { $ENV{KRUISE_SANDBOX_ID} = $id; exec "sleep", "0.3"; exit 1 } select(undef, undef, undef, 0.002); 1 while waitpid(-1, 1) > 0 }';

function sh(id: string, script: string, env: Record<string, string> = {}) {
  return driver.exec(id, { cmd: "/bin/bash", args: ["-c", script], cwd: USER.home, env: { PATH: "/usr/bin:/bin", ...env }, user: USER }, { timeoutMs: 20_000 });
}

function read(path: string, how: (p: string) => string): string | undefined {
  try {
    return how(path);
  } catch {
    return undefined;
  }
}

const pidns = (pid: number) => read(`/proc/${pid}/ns/pid`, readlinkSync);
const state = (pid: number) => read(`/proc/${pid}/stat`, (p) => readFileSync(p, "latin1"))?.split(") ")[1]?.[0];
const hostNs = pidns(process.pid);

/** Every process on the host: its pid namespace and whether it carries `id`'s marker. */
function processes(id: string): { pid: number; ns: string | undefined; marked: boolean }[] {
  const entry = `${MARKER_ENV}=${id}\0`;
  return readdirSync("/proc")
    .filter((n) => /^\d+$/.test(n))
    .map(Number)
    .map((pid) => {
      const env = read(`/proc/${pid}/environ`, (p) => readFileSync(p, "latin1")) ?? "";
      return { pid, ns: pidns(pid), marked: env.startsWith(entry) || env.includes(`\0${entry}`) };
    });
}

async function running(prefix: string, over: Partial<DesiredSandbox> = {}): Promise<{ d: DesiredSandbox; ns: string }> {
  const d = desiredSandbox(prefix, over);
  expect((await driver.ensure(d)).phase).toBe("Running");
  const ns = pidns(readRecord(layoutFor(dataDir, d.id).record)!.nsInit!.pid)!;
  expect(ns).not.toBe(hostNs);
  return { d, ns };
}

/** Starts A's forker against `victim`; resolves once its children carrying the victim's marker
 * show on the host (in A's pid namespace), with the forker's pid inside A. */
async function attack(a: string, aNs: string, victim: string): Promise<string> {
  const pid = (await sh(a, 'nohup perl -e "$FORKER" "$VICTIM" >/dev/null 2>&1 & echo $!', { FORKER, VICTIM: victim })).stdout.trim();
  expect(pid).toMatch(/^\d+$/);
  const planted = await pollUntil(() => processes(victim).filter((p) => p.marked && p.ns === aNs).length, (n) => n >= 5);
  expect(planted).toBeGreaterThanOrEqual(5);
  return pid;
}

/** The forker's state letter inside A (R, S, ... T when stopped), or "gone". */
async function forkerState(a: string, pid: string): Promise<string> {
  return (await sh(a, `s=$(cat /proc/${pid}/stat 2>/dev/null) && echo "\${s##*) }" | cut -c1 || echo gone`)).stdout.trim();
}

/** Three `sleep 30` that A's tenant gives B's marker (long-lived, unlike the forker's children,
 * so the very pids can be checked after B's operation): their pids on the host. */
async function plantSleepers(a: { d: DesiredSandbox; ns: string }, victim: string): Promise<number[]> {
  await sh(a.d.id, 'for i in 1 2 3; do KRUISE_SANDBOX_ID="$VICTIM" nohup sleep 30 >/dev/null 2>&1 & done', { VICTIM: victim });
  const sleepers = () => processes(victim).filter((p) => p.marked && p.ns === a.ns && cmdline(p.pid) === "sleep\u000030\u0000").map((p) => p.pid);
  return pollUntil(sleepers, (pids) => pids.length === 3);
}

const cmdline = (pid: number) => read(`/proc/${pid}/cmdline`, (p) => readFileSync(p, "latin1"));

/** A process in the agent's pid namespace carrying `id`'s marker and tied to no sandbox's pid 1,
 * as `enter.pl`'s host side is: only the scan's host-side branch reaches it. */
function hostSide(id: string): ChildProcess {
  const c = spawn("sleep", ["30"], { env: { PATH: "/usr/bin:/bin", [MARKER_ENV]: id }, stdio: "ignore" });
  hostSides.push(c);
  return c;
}
const hostSides: ChildProcess[] = [];

describe("the host-wide scan at bwrap without cgroups, against another tenant's forks carrying the sandbox's marker", () => {
  it("reports bwrap without cgroups (the level under test)", () => {
    expect(driver.capabilities).toMatchObject({ level: "bwrap", freeze: "signal" });
  });

  it("B's freeze stops exactly B's processes (its namespace and a host-side one), never A's carrying B's marker; thaw resumes them", async () => {
    const a = await running("xa");
    const b = await running("xb");
    await sh(b.d.id, "nohup sleep 1000 >/dev/null 2>&1 &");
    const host = hostSide(b.d.id).pid!;
    const sleepers = await plantSleepers(a, b.d.id);
    const forker = await attack(a.d.id, a.ns, b.d.id);
    try {
      const inB = [...processes(b.d.id).filter((p) => p.ns === b.ns).map((p) => p.pid), host];
      // Its pid 1 (the init, sandbox-init.ts), the sleep and the host-side one at least.
      expect(inB.length).toBeGreaterThanOrEqual(3);
      const t0 = Date.now();
      expect((await driver.ensure({ ...b.d, generation: 2, state: "Paused" })).phase).toBe("Paused");
      const frozeMs = Date.now() - t0;
      expect(inB.map(state)).toEqual(inB.map(() => "T"));
      expect(sleepers.map(state)).toEqual(sleepers.map(() => "S"));
      expect(await forkerState(a.d.id, forker)).toMatch(/^[RS]$/);
      expect((await driver.ensure({ ...b.d, generation: 3, state: "Running" })).phase).toBe("Running");
      expect(inB.map(state).filter((s) => s === "T")).toEqual([]);
      expect(frozeMs).toBeLessThan(5000);
    } finally {
      await sh(a.d.id, `kill ${forker}`);
    }
  });

  it("B's destroy ends exactly B's processes (its namespace, holder, a command's host side, a host-side one); A's carrying B's marker run on", async () => {
    const a = await running("xa");
    const b = await running("xb");
    await sh(b.d.id, "nohup sleep 1000 >/dev/null 2>&1 &");
    // A command still running in B: its host side (enter.pl) is in the host's pid namespace.
    const pending = sh(b.d.id, "sleep 1000");
    await pollUntil(() => processes(b.d.id).filter((p) => p.marked && p.ns === hostNs).length, (n) => n >= 2);
    const host = hostSide(b.d.id).pid!;
    const sleepers = await plantSleepers(a, b.d.id);
    const forker = await attack(a.d.id, a.ns, b.d.id);
    try {
      const inB = [...processes(b.d.id).filter((p) => p.ns === b.ns || (p.marked && p.ns === hostNs)).map((p) => p.pid), host].map(procRef);
      expect(inB.length).toBeGreaterThanOrEqual(6);
      const t0 = Date.now();
      await driver.destroy(b.d.id);
      const destroyMs = Date.now() - t0;
      expect((await pending).signal).toBe("SIGKILL");
      // Ended: gone, a zombie, or exiting (this host's init reaps lazily, so B's pid 1 may still
      // wait in its namespace's teardown, state S, running nothing more).
      expect(inB.filter((r) => alive(r) && !exiting(r!.pid)).map((r) => `${r!.pid} ${cmdline(r!.pid)}`)).toEqual([]);
      expect(processes(b.d.id).filter((p) => p.ns === b.ns && !exiting(p.pid))).toEqual([]);
      expect(await driver.observe(b.d.id)).toBeUndefined();
      expect(await forkerState(a.d.id, forker)).toMatch(/^[RS]$/);
      expect(sleepers.map(state)).toEqual(sleepers.map(() => "S"));
      expect(destroyMs).toBeLessThan(5000);
    } finally {
      await sh(a.d.id, `kill ${forker}`);
    }
  });
});

describe("a record keeps the scan of its own level, not the driver's", () => {
  it("a `process`-level driver (an agent restarted at a lower level) freezes a bwrap record's whole pid namespace, processes that dropped the marker included", async () => {
    // The host's network, which a `process`-level driver can keep.
    const b = await running("xl", { allowInternetAccess: true });
    const unmarked = Number((await sh(b.d.id, "nohup env -u KRUISE_SANDBOX_ID sleep 1000 >/dev/null 2>&1 & echo $!")).stdout.trim());
    const onHost = await pollUntil(() => processes(b.d.id).find((p) => p.ns === b.ns && !p.marked && read(`/proc/${p.pid}/cmdline`, (f) => readFileSync(f, "latin1")) === "sleep\u00001000\u0000")?.pid, (p) => p !== undefined);
    expect(unmarked).toBeGreaterThan(0);
    const lower = new LocalDriver({ dataDir, level: "process", cgroupName: `kruise-test-${process.pid}-xscan` });
    try {
      expect((await lower.ensure({ ...b.d, generation: 2, state: "Paused" })).phase).toBe("Paused");
      expect(state(onHost!)).toBe("T");
      expect((await lower.ensure({ ...b.d, generation: 3, state: "Running" })).phase).toBe("Running");
      expect(state(onHost!)).not.toBe("T");
    } finally {
      await lower.dispose(); // its spawner; the sandboxes stay the first driver's to destroy
    }
  });
});
