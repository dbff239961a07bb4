// Host helpers other than enter.pl that join a process's namespaces as root on the host
// (enter-reused-pid.test.ts has enter.pl and the files API): the process is named by pid and
// start time, or held by an fd opened while it was checked, never by its pid alone. Here the
// process ends, a host process takes its pid (fixture.ts takePid), and the helper must neither act
// on that process nor run anything in its namespaces.
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { procRef } from "../../../../controllers/drivers/local/holder.ts";
import { helperEnv, PERL, syscallNumbers } from "../../../../controllers/drivers/local/host-helpers.ts";
import { LocalDriver } from "../../../../controllers/drivers/local/local-driver.ts";
import { runStep } from "../../../../controllers/drivers/local/builder/sandbox.ts";
import { DEFAULT_CONFIG } from "../../../../controllers/drivers/local/builder/plan.ts";
import { RootfsStore } from "../../../../controllers/drivers/local/rootfs/store.ts";
import { USERNS_SCRIPT } from "../../../../controllers/drivers/local/userns.ts";
import { pollUntil, takePid } from "./fixture.ts";

const gone = (pid: number) => pollUntil(() => readdirSync("/proc").includes(String(pid)), (there) => !there);
/** The `/` line of a process's mountinfo: its mount options, which allow-setuid.pl would change. */
const rootMount = (pid: number) => readFileSync(`/proc/${pid}/mountinfo`, "utf8").split("\n").find((l) => l.split(" ")[4] === "/");

describe("allow-setuid.pl (userns.pl's request) and a reused pid 1", () => {
  it("refuses a process in a user namespace of its own that has the holder's pid only since the holder ended, and leaves its `/` as it was", async () => {
    const nr = syscallNumbers();
    // A holder's stand-in: a process with a user and mount namespace of its own (what a sandbox's
    // pid 1 has), and the same for the one that takes its pid (a rootless container's, say).
    const argv = ["/usr/bin/unshare", "--user", "--map-root-user", "--mount", "--", "/usr/bin/sleep", "300"];
    const ownUserns = (pid: number) => pollUntil(() => readFileSync(`/proc/${pid}/comm`, "utf8"), (c) => c === "sleep\n");
    const holder = spawn(argv[0]!, argv.slice(1), { stdio: "ignore" });
    await ownUserns(holder.pid!);
    const ref = procRef(holder.pid!)!;
    holder.kill("SIGKILL");
    await gone(ref.pid);
    const squatter = await takePid(ref.pid, argv);
    expect(squatter?.pid).toBe(ref.pid);
    try {
      await ownUserns(ref.pid);
      expect(readlinkSync(`/proc/${ref.pid}/ns/user`)).not.toBe(readlinkSync("/proc/self/ns/user"));
      const before = rootMount(ref.pid);
      const ask = (line: string) =>
        spawnSync(PERL, [USERNS_SCRIPT, "3000000000", "1", String(nr.unshare), String(nr.openTree), String(nr.mountSetattr), String(nr.moveMount)], { env: helperEnv(), input: `${line}\n`, encoding: "utf8", timeout: 20_000 });
      const r = ask(`allow-setuid ${ref.pid}:${ref.start} ${nr.setns} ${nr.mount}`);
      expect(r.stdout.split("\n").slice(1, -1)).toEqual(["allow-setuid: exit 127"]);
      expect(r.stderr).toContain(`holder ${ref.pid} is another process now`);
      expect(rootMount(ref.pid)).toBe(before);
      // The pid alone (the request as it was) is no request.
      expect(ask(`allow-setuid ${ref.pid} ${nr.setns} ${nr.mount}`).stdout.split("\n").slice(1, -1)).toEqual(["bad request"]);
      expect(rootMount(ref.pid)).toBe(before);
      expect(squatter!.exitCode).toBeNull();
    } finally {
      squatter?.kill("SIGKILL");
    }
  });
});

describe("a build step's network and a reused holder pid", () => {
  const dataDir = mkdtempSync(join(tmpdir(), "local-step-net-reuse-"));
  const driver = new LocalDriver({ dataDir, cgroupName: `kruise-test-${process.pid}-step-net-reuse` });
  afterAll(async () => {
    await driver.dispose();
    rmSync(dataDir, { recursive: true, force: true });
  });

  it("the step runs in the namespace opened for it though its holder ended and a host process has the holder's pid, and holds no fd of it", async () => {
    const lowers = new RootfsStore().templateTrees("base");
    expect(lowers).toBeDefined();
    const staging = mkdtempSync(join(tmpdir(), "local-step-net-reuse-staging-"));
    const net = await driver.stepNetwork(staging);
    expect(net).toBeDefined();
    try {
      // The namespace's holder: this process's child that brought its `lo` up.
      const holderPid = Number(
        readdirSync("/proc").find((p) => /^\d+$/.test(p) && (() => {
          try {
            return readFileSync(`/proc/${p}/stat`, "utf8").split(") ")[1]!.split(" ")[1] === String(process.pid) && readFileSync(`/proc/${p}/cmdline`, "utf8").includes("ip_unprivileged_port_start");
          } catch {
            return false;
          }
        })()),
      );
      expect(holderPid).toBeGreaterThan(0);
      const stepNs = readlinkSync(`/proc/${holderPid}/ns/net`);
      expect(stepNs).not.toBe(readlinkSync("/proc/self/ns/net"));
      process.kill(holderPid, "SIGKILL");
      await gone(holderPid);
      const squatter = await takePid(holderPid);
      expect(squatter?.pid).toBe(holderPid);
      try {
        const lines: string[] = [];
        const { code } = await runStep({
          lowers: lowers!,
          staging,
          config: DEFAULT_CONFIG,
          step: { kind: "run", command: "readlink /proc/self/ns/net; ls -l /proc/self/fd/", user: "root" },
          timeoutMs: 30_000,
          onLine: (l) => lines.push(l),
          net: net!,
        });
        expect({ code, first: lines[0] }).toEqual({ code: 0, first: stepNs });
        expect(lines.slice(1).filter((l) => l.includes("net:"))).toEqual([]);
        expect(lines.slice(1).join("\n")).toMatch(/ 2 -> /);
        expect(squatter!.exitCode).toBeNull();
      } finally {
        squatter?.kill("SIGKILL");
      }
    } finally {
      await net!.close();
      rmSync(staging, { recursive: true, force: true });
    }
  });
});
