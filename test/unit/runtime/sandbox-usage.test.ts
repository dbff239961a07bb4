// A shared runtime reports each sandbox's own memory and CPU from its cgroup files (v2 and v1
// names), not the host's; the cgroup directories here are plain files laid out like the kernel's.
import { mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { LocalSandboxView } from "../../../controllers/drivers/local/local-view.ts";
import { sandboxFigures } from "../../../controllers/runtime/http/metrics.ts";
import type { RuntimeSandbox } from "../../../controllers/runtime/sandbox.ts";

function cgroupDir(files: Record<string, string>): string {
  const dir = mkdtempSync(join(tmpdir(), "cg-"));
  mkdirSync(dir, { recursive: true });
  for (const [name, text] of Object.entries(files)) writeFileSync(join(dir, name), text);
  return dir;
}

const view = (dirs: string[] | undefined) =>
  new LocalSandboxView({ id: "s1", mounts: [], namespaces: false, target: () => (dirs ? { cgroupProcs: dirs.map((d) => join(d, "cgroup.procs")) } : undefined) });

describe("LocalSandboxView.usage", () => {
  it("reads a v2 cgroup: memory.current / memory.max, cpu.stat usage and cpu.max quota", () => {
    const dir = cgroupDir({ "memory.current": "73400320\n", "memory.max": "536870912\n", "memory.stat": "anon 1\nfile 4096\n", "cpu.stat": "usage_usec 2500000\nuser_usec 1\n", "cpu.max": "150000 100000\n" });
    expect(view([dir]).usage()).toEqual({ memUsed: 73400320, memLimit: 536870912, memCache: 4096, cpuUsageUsec: 2500000, cpuLimit: 1.5 });
  });

  it("reads a hybrid host: v1 memory and cpu directories, CPU time from the v2 core", () => {
    const core = cgroupDir({ "cpu.stat": "usage_usec 10\n" });
    const mem = cgroupDir({ "memory.usage_in_bytes": "1048576\n", "memory.limit_in_bytes": "9223372036854771712\n", "memory.stat": "cache 0\n" });
    const cpu = cgroupDir({ "cpu.cfs_quota_us": "-1\n", "cpu.cfs_period_us": "100000\n" });
    // No limit set: neither memory nor CPU is reported as limited.
    expect(view([core, mem, cpu]).usage()).toEqual({ memUsed: 1048576, memLimit: undefined, memCache: 0, cpuUsageUsec: 10, cpuLimit: undefined });
  });

  it("has no figures without cgroups or while the sandbox has no processes", () => {
    expect(view([]).usage()).toBeUndefined();
    expect(view(undefined).usage()).toBeUndefined();
  });
});

describe("sandboxFigures", () => {
  it("CPU percent is the sandbox's CPU time over the CPUs it may use, per sandbox", () => {
    const a = {} as RuntimeSandbox;
    const b = {} as RuntimeSandbox;
    expect(sandboxFigures(a, { memUsed: 1, memLimit: 2, cpuUsageUsec: 0, cpuLimit: 2 }, 1000).cpuPct).toBe(0);
    sandboxFigures(b, { memUsed: 1, cpuUsageUsec: 0, cpuLimit: 1 }, 1000);
    // 1 s of CPU in 1 s of wall time on a 2-CPU limit: half busy; b's reading does not disturb a's.
    const f = sandboxFigures(a, { memUsed: 5, memLimit: 8, cpuUsageUsec: 1_000_000, cpuLimit: 2 }, 2000);
    expect(f).toMatchObject({ cpuCount: 2, cpuPct: 50, memUsed: 5, memTotal: 8 });
    expect(sandboxFigures(b, { memUsed: 1, cpuUsageUsec: 250_000, cpuLimit: 1 }, 2000).cpuPct).toBe(25);
  });
});
