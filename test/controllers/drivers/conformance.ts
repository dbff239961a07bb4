// One behaviour suite for every sandbox driver. A driver is held to what its capabilities claim:
// where it reports a capability missing, the case checks that it says so (UnsupportedError, or
// `enforced: false`) instead of being skipped, and the test name states why. A driver without a
// host view (kubernetes: the runtime runs in each pod) is checked to refuse exec and view; its
// states are checked through ensure/observe, with `settle` waiting for a sandbox to run.
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { isTerminal, UnsupportedError, type DesiredSandbox, type Driver, type SandboxObservation } from "../../../controllers/drivers/driver.ts";
import { PathOutsideSandboxError, type SandboxUser } from "../../../controllers/runtime/sandbox-view.ts";

export interface ConformanceOptions {
  /** Creates the driver under test (called once, when the suite is collected). */
  make: () => Driver;
  /** A second driver over the same state, as a restarted agent would build it (and started). */
  restart: () => Driver | Promise<Driver>;
  /** Stops a driver `restart` made (its informers), leaving the sandboxes as they are. */
  retire?: (driver: Driver) => void | Promise<void>;
  /** Frees whatever `make` set up once every sandbox is destroyed. */
  dispose?: (driver: Driver) => void | Promise<void>;
  /** Starts a stand-in for the internet: an HTTP server at `url` answering 200, which a sandbox
   * with internet access reaches and one without does not. Without it, "internet access" is
   * checked as a default route only. */
  internet?: () => Promise<{ url: string; stop(): void }>;
  /** Async set-up once the suite runs (e.g. a cluster namespace and the driver's informers). */
  start?: (driver: Driver) => Promise<void>;
  /** For drivers whose sandboxes come up after `ensure` returns (a pod the kubelet starts): waits
   * until `id` runs. Absent: `ensure` returns a running sandbox. */
  settle?: (driver: Driver, id: string) => Promise<void>;
  /** How a driver without network isolation answers `allowInternetAccess: false`: `refused`
   * (UnsupportedError, the default), `unenforced` (created, `enforced.network` false) or `proxied`
   * (created with a proxy that refuses every destination, `enforced.network` true). */
  networkOff?: "refused" | "unenforced" | "proxied";
}

const USER: SandboxUser = { name: "user", uid: 1000, gid: 1000, home: "/home/user", shell: "/bin/bash" };
let seq = 0;

export function describeDriverConformance(title: string, opts: ConformanceOptions): void {
  const driver = opts.make();
  const caps = driver.capabilities;
  const created = new Set<string>();

  function desired(over: Partial<DesiredSandbox> = {}): DesiredSandbox {
    const id = over.id ?? `cf${process.pid}x${seq++}`;
    created.add(id);
    return { id, generation: 1, template: "base", state: "Running", pauseStrategy: "Freeze", resources: { cpuCount: 1, memoryMB: 256 }, allowInternetAccess: true, ...over };
  }

  function sh(id: string, script: string, d: Driver = driver) {
    return d.exec(id, { cmd: "/bin/bash", args: ["-c", script], cwd: "/home/user", env: { PATH: "/usr/bin:/bin", HOME: "/home/user" }, user: USER }, { timeoutMs: 20_000 });
  }

  /** ensure, then (with `settle`) waits until the sandbox runs and reads it back. */
  async function up(d: DesiredSandbox): Promise<SandboxObservation> {
    const o = await driver.ensure(d);
    if (!opts.settle) return o;
    await opts.settle(driver, d.id);
    return (await driver.observe(d.id))!;
  }

  /** Without a host view, nothing reaches inside through the driver: it says so. */
  async function expectNoWayIn(id: string): Promise<void> {
    expect(() => driver.view(id)).toThrow(UnsupportedError);
    await expect(sh(id, "true")).rejects.toBeInstanceOf(UnsupportedError);
  }

  function itViewRefused(title: string): void {
    it(title, async () => {
      const d = desired();
      await up(d);
      expect(() => driver.view(d.id)).toThrow(UnsupportedError);
    });
  }

  /** A limit the driver enforces where nothing here can watch it work (no host view). */
  function itLimitReported(kind: "memory" | "cpu" | "pids", resources: DesiredSandbox["resources"], load: string): void {
    it(`${kind} limit is reported enforced (not observed from inside: no host view to run ${load})`, async () => {
      const d = desired({ resources });
      expect((await driver.ensure(d)).enforced[kind]).toBe(true);
      await expectNoWayIn(d.id);
    });
  }

  /** Starts a busy counter in the background; its value is read from the host through toHost. */
  async function startCounter(id: string): Promise<() => number> {
    const r = await sh(id, "nohup bash -c 'i=0; while :; do i=$((i+1)); echo $i > counter.tmp; mv counter.tmp counter; done' >/dev/null 2>&1 &");
    expect(r.exitCode).toBe(0);
    const file = driver.view(id).toHost("/home/user/counter");
    const read = () => {
      try {
        return Number(readFileSync(file, "utf8"));
      } catch {
        return 0;
      }
    };
    for (let i = 0; i < 200 && read() === 0; i++) await sleep(10);
    return read;
  }

  /** Waits (bounded) for a thawed counter to move: on a loaded machine it may take a while. */
  async function expectMoving(counter: () => number, from: number): Promise<void> {
    for (let i = 0; i < 100 && counter() <= from; i++) await sleep(50);
    expect(counter()).toBeGreaterThan(from);
  }

  describe(`driver conformance: ${title} (level ${caps.level})`, () => {
    let server: Server;
    let port = 0;
    beforeAll(async () => {
      await opts.start?.(driver);
      server = createServer((_, res) => res.end("host"));
      await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
      port = (server.address() as AddressInfo).port;
    });
    afterAll(async () => {
      server.close();
      for (const id of created) await driver.destroy(id);
      await opts.dispose?.(driver);
    });

    it("ensure creates a running sandbox, and ensuring again changes nothing", async () => {
      const d = desired();
      const first = await up(d);
      expect(first).toMatchObject({ id: d.id, phase: "Running", generation: 1, level: caps.level });
      const again = await driver.ensure({ ...d, generation: 2 });
      expect(again).toMatchObject({ phase: "Running", generation: 2, createdAt: first.createdAt });
      expect((await driver.list()).map((s) => s.id)).toContain(d.id);
    });

    if (!caps.hostView) {
      it("exec is refused with UnsupportedError (no host view: commands run through the sandbox's own runtime)", async () => {
        const d = desired();
        await up(d);
        await expect(sh(d.id, "id -u; pwd")).rejects.toBeInstanceOf(UnsupportedError);
      });
    } else it(caps.rootView ? "a command runs as `user` in /home/user" : "a command runs as uid 1000 in the layer's /home/user (no root view: it sees the host path)", async () => {
      const d = desired();
      await driver.ensure(d);
      const r = await sh(d.id, "id -u; pwd");
      expect(r.exitCode).toBe(0);
      const [uid, pwd] = r.stdout.trim().split("\n");
      expect(uid).toBe("1000");
      if (caps.rootView) {
        expect(pwd).toBe("/home/user");
        expect((await sh(d.id, "id -un; echo $HOME; ls /home")).stdout).toBe("user\n/home/user\nuser\n");
      } else {
        expect(driver.view(d.id).toSandbox(pwd!)).toBe("/home/user");
      }
    });

    if (!caps.hostView) {
      itViewRefused("view (toHost/toSandbox) is refused with UnsupportedError (no host view: files go through the sandbox's own runtime)");
    } else it("files written through toHost appear inside, and files written inside appear through toHost", async () => {
      const d = desired();
      await driver.ensure(d);
      const view = driver.view(d.id);
      writeFileSync(view.toHost("/home/user/from-host.txt"), "hello from the host\n");
      expect((await sh(d.id, "cat from-host.txt; echo inside > from-inside.txt")).stdout).toBe("hello from the host\n");
      expect(readFileSync(view.toHost("/home/user/from-inside.txt"), "utf8")).toBe("inside\n");
      expect(view.toSandbox(view.toHost("/home/user/from-inside.txt"))).toBe("/home/user/from-inside.txt");
    });

    if (!caps.hostView) {
      it(`freeze reports Paused and thaw Running (${caps.freeze} freeze by the sandbox's own runtime; no host view to watch its processes stop)`, async () => {
        const d = desired();
        await up(d);
        await driver.freeze(d.id);
        expect((await driver.observe(d.id))?.phase).toBe("Paused");
        await driver.thaw(d.id);
        expect((await driver.observe(d.id))?.phase).toBe("Running");
        await expectNoWayIn(d.id);
      });
    } else it(`freeze stops a busy loop and thaw resumes it (${caps.freeze} freeze)`, async () => {
      const d = desired();
      await driver.ensure(d);
      const counter = await startCounter(d.id);
      await driver.freeze(d.id);
      expect((await driver.observe(d.id))?.phase).toBe("Paused");
      const a = counter();
      await sleep(300);
      expect(counter()).toBe(a);
      await driver.thaw(d.id);
      expect((await driver.observe(d.id))?.phase).toBe("Running");
      await expectMoving(counter, a);
    });

    it(caps.hostView ? "ensure with state Paused/Freeze and back to Running converges the same way" : "ensure with state Paused/Freeze and back to Running converges (no host view: the processes are not watched)", async () => {
      const d = desired();
      await up(d);
      const counter = caps.hostView ? await startCounter(d.id) : undefined;
      expect(await driver.ensure({ ...d, generation: 2, state: "Paused" })).toMatchObject({ phase: "Paused", pauseStrategy: "Freeze" });
      if (counter) {
        const a = counter();
        await sleep(200);
        expect(counter()).toBe(a);
        expect((await driver.ensure({ ...d, generation: 3 })).phase).toBe("Running");
        await expectMoving(counter, a);
      } else {
        expect((await driver.ensure({ ...d, generation: 3 })).phase).toBe("Running");
      }
    });

    if (!caps.hostView) {
      it("Stop pause reports Stopped and resume runs it again (no host view: the kept files and dropped processes are not checked from here)", async () => {
        const d = desired();
        await up(d);
        expect(await driver.ensure({ ...d, generation: 2, state: "Paused", pauseStrategy: "Stop" })).toMatchObject({ phase: "Stopped", pauseStrategy: "Stop", generation: 2 });
        expect(await driver.observe(d.id)).toMatchObject({ phase: "Stopped" });
        expect(await up({ ...d, generation: 3, state: "Running" })).toMatchObject({ phase: "Running", generation: 3 });
      });
    } else it("Stop pause keeps the files and drops the processes; resume starts fresh on the same files", async () => {
      const d = desired();
      await driver.ensure(d);
      const counter = await startCounter(d.id);
      await sh(d.id, "echo kept > kept.txt");
      expect(await driver.ensure({ ...d, generation: 2, state: "Paused", pauseStrategy: "Stop" })).toMatchObject({ phase: "Stopped", pauseStrategy: "Stop" });
      // 0 where the driver unmounts a stopped sandbox's disk (local with a disk per sandbox):
      // its files are then out of the host's sight until it runs again.
      const a = counter();
      await sleep(200);
      expect(counter()).toBe(a);
      expect(() => driver.view(d.id)).toThrow(/not running/);
      expect((await driver.ensure({ ...d, generation: 3, state: "Running" })).phase).toBe("Running");
      expect((await sh(d.id, "cat kept.txt")).stdout).toBe("kept\n");
      if (caps.rootView) expect((await sh(d.id, "pgrep -c -f [c]ounter.tmp || true")).stdout).toBe("0\n");
      const b = counter();
      expect(b).toBeGreaterThan(0);
      if (a !== 0) expect(b).toBe(a);
      await sleep(100);
      expect(counter()).toBe(b);
    });

    if (!caps.snapshotFs) {
      it("no in-place filesystem snapshots: restoreFs is refused with UnsupportedError; snapshotFs refuses, or fails saying why where a cluster component takes them (kubernetes: a Checkpoint no engine answers)", async () => {
        const d = desired();
        await up(d);
        const err = await driver.snapshotFs(d.id).then(() => undefined, (e: unknown) => e);
        expect(err instanceof UnsupportedError || isTerminal(err)).toBe(true);
        const ref = { id: `${d.id}-snap`, sandboxId: d.id, location: "", bytes: 0, createdAt: new Date(0).toISOString() };
        await expect(driver.restoreFs(d.id, ref)).rejects.toBeInstanceOf(UnsupportedError);
      });
    } else it("snapshotFs saves the layer and restoreFs brings it back, also into a new sandbox", async () => {
      const d = desired();
      await driver.ensure(d);
      await sh(d.id, "mkdir -p dir && echo one > dir/a && ln -s dir/a link");
      const snap = await driver.snapshotFs(d.id);
      await sh(d.id, "echo two > dir/a; rm link; echo extra > extra");
      await driver.restoreFs(d.id, snap);
      expect((await sh(d.id, "cat link; ls; stat -c %u dir/a")).stdout).toBe("one\ndir\nlink\n1000\n");
      const copy = desired({ restoreFrom: snap });
      await driver.ensure(copy);
      expect((await sh(copy.id, "cat dir/a")).stdout).toBe("one\n");
      await driver.deleteSnapshot(snap);
    });

    it("destroy leaves nothing behind and is idempotent", async () => {
      const d = desired();
      await up(d);
      if (caps.hostView) await startCounter(d.id);
      await driver.destroy(d.id);
      expect(await driver.observe(d.id)).toBeUndefined();
      expect((await driver.list()).map((s) => s.id)).not.toContain(d.id);
      await driver.destroy(d.id);
    });

    if (caps.networkIsolation) {
      it(`allowInternetAccess=false: no network, the host's loopback server is unreachable; true: ${opts.internet ? "the internet stand-in answers" : "a default route (no internet stand-in here)"}`, async () => {
        const probe = `exec 3<>/dev/tcp/127.0.0.1/${port} && echo open || echo closed`;
        const closed = desired({ allowInternetAccess: false });
        expect((await driver.ensure(closed)).enforced.network).toBe(true);
        expect((await sh(closed.id, `${probe}; ls /sys/class/net 2>/dev/null | tr '\\n' ' '`)).stdout).toMatch(/^closed\n/);
        const open = desired({ allowInternetAccess: true });
        await driver.ensure(open);
        // Whether the host's own services are reachable with internet access depends on the
        // driver (the local one isolates them, test/controllers/drivers/local/sandbox-net.test.ts).
        const route = "awk '$2 == \"00000000\" { print \"route\" }' /proc/net/route";
        expect((await sh(open.id, route)).stdout).toBe("route\n");
        expect((await sh(closed.id, route)).stdout).toBe("");
        if (!opts.internet) return;
        const internet = await opts.internet();
        try {
          const get = `curl -s -o /dev/null -w '%{http_code}' -m 5 ${internet.url}`;
          expect((await sh(open.id, get)).stdout).toBe("200");
          expect((await sh(closed.id, get)).stdout).toBe("000");
        } finally {
          internet.stop();
        }
      });
    } else if (opts.networkOff === "proxied") {
      it("allowInternetAccess=false is enforced by the sandbox's own proxy, and reported so", async () => {
        expect((await driver.ensure(desired({ allowInternetAccess: false }))).enforced.network).toBe(true);
        expect((await driver.ensure(desired({ allowInternetAccess: true }))).enforced.network).toBe(false);
      });
    } else if (opts.networkOff === "unenforced") {
      it("allowInternetAccess=false is accepted and reported not enforced (no network isolation at this level)", async () => {
        expect((await driver.ensure(desired({ allowInternetAccess: false }))).enforced.network).toBe(false);
      });
    } else {
      it("allowInternetAccess=false is refused with UnsupportedError (no network namespace at this level)", async () => {
        await expect(driver.ensure(desired({ allowInternetAccess: false }))).rejects.toBeInstanceOf(UnsupportedError);
      });
    }

    if (caps.limits.memory && !caps.hostView) {
      itLimitReported("memory", { cpuCount: 1, memoryMB: 64 }, "an allocator");
    } else if (caps.limits.memory) {
      it("memory limit kills an allocator", async () => {
        const d = desired({ resources: { cpuCount: 1, memoryMB: 64 } });
        expect((await driver.ensure(d)).enforced.memory).toBe(true);
        const r = await sh(d.id, "tail /dev/zero");
        expect(String(r.signal ?? r.exitCode)).toMatch(/SIGKILL|137/);
        expect((await sh(d.id, "echo alive")).stdout).toBe("alive\n");
      });
    } else {
      it("memory limit is reported as not enforced (no memory cgroup at this level)", async () => {
        expect((await driver.ensure(desired({ resources: { cpuCount: 1, memoryMB: 64 } }))).enforced.memory).toBe(false);
      });
    }

    if (caps.limits.cpu && !caps.hostView) {
      itLimitReported("cpu", { cpuCount: 0.25, memoryMB: 256 }, "a busy loop");
    } else if (caps.limits.cpu) {
      it("cpu limit throttles a busy loop to its share", async () => {
        const d = desired({ resources: { cpuCount: 0.25, memoryMB: 256 } });
        expect((await driver.ensure(d)).enforced.cpu).toBe(true);
        const r = await sh(d.id, "TIMEFORMAT=%U; time timeout 1 bash -c 'while :; do :; done'");
        expect(Number(r.stderr.trim())).toBeLessThan(0.5);
      });
    } else {
      it("cpu limit is reported as not enforced (no cpu cgroup at this level)", async () => {
        expect((await driver.ensure(desired({ resources: { cpuCount: 0.25, memoryMB: 256 } }))).enforced.cpu).toBe(false);
      });
    }

    if (caps.limits.pids && !caps.hostView) {
      itLimitReported("pids", { cpuCount: 1, memoryMB: 256, pidsMax: 32 }, "a fork bomb");
    } else if (caps.limits.pids) {
      it("pids limit stops a fork bomb", async () => {
        const d = desired({ resources: { cpuCount: 1, memoryMB: 256, pidsMax: 32 } });
        expect((await driver.ensure(d)).enforced.pids).toBe(true);
        const bomb = "$| = 1; my $n = 0; for (1..200) { my $p = fork(); last unless defined $p; if (!$p) { sleep 30; exit 0 } $n++ } print \"$n\\n\"; kill 9, -$$";
        const r = await sh(d.id, `setsid perl -e '${bomb}'; true`);
        expect(Number(r.stdout)).toBeGreaterThan(5);
        expect(Number(r.stdout)).toBeLessThan(32);
      });
    } else {
      it("pids limit is reported as not enforced (no pids cgroup at this level)", async () => {
        expect((await driver.ensure(desired({ resources: { cpuCount: 1, memoryMB: 256, pidsMax: 32 } }))).enforced.pids).toBe(false);
      });
    }

    if (!caps.hostView) {
      itViewRefused("symlinks out of the sandbox: path mapping is refused with UnsupportedError (no host view: the sandbox's own runtime resolves paths inside it)");
    } else it("symlinks that point out of the sandbox resolve inside it or are refused", async () => {
      const d = desired();
      await driver.ensure(d);
      await sh(d.id, "ln -s / rootlink; ln -s ../../../../../../etc/hostname up; ln -s /proc/1/root proclink; ln -s /work wk");
      const view = driver.view(d.id);
      expect(readFileSync(view.toHost("/home/user/up"), "utf8")).not.toBe(readFileSync("/etc/hostname", "utf8"));
      expect(view.toSandbox(view.toHost("/home/user/up"))).toBe("/etc/hostname");
      // Each is refused, or resolves to a sandbox path whose host side is what a process inside
      // sees there: the sandbox's own file, or nothing where it has nothing (never the host's).
      for (const p of ["/home/user/proclink/etc/passwd", "/home/user/wk/main/package.json", "/home/user/rootlink/work/main/package.json", "/proc/self/root/etc/passwd"]) {
        let host: string;
        try {
          host = view.toHost(p);
        } catch (err) {
          expect(err, p).toBeInstanceOf(PathOutsideSandboxError);
          continue;
        }
        const inside = await sh(d.id, `cat ${view.toSandbox(host)}`);
        if (existsSync(host)) expect(readFileSync(host, "utf8"), p).toBe(inside.stdout);
        else expect(inside.exitCode, p).not.toBe(0);
      }
      expect(view.toHost("/home/user/rootlink/home/user/up", { followFinal: false })).toBe(view.toHost("/home/user/up", { followFinal: false }));
    });

    it(caps.hostView ? "list() on a restarted driver finds the running sandboxes, and they keep working" : "list() on a restarted driver finds the running sandboxes (no host view: their files are not read from here)", async () => {
      const d = desired();
      await up(d);
      if (caps.hostView) await sh(d.id, "echo before > restart.txt");
      const next = await opts.restart();
      try {
        const found = (await next.list()).find((s) => s.id === d.id);
        expect(found).toMatchObject({ phase: "Running", generation: 1 });
        if (caps.hostView) expect((await sh(d.id, "cat restart.txt", next)).stdout).toBe("before\n");
      } finally {
        await opts.retire?.(next);
      }
    });
  });
}
