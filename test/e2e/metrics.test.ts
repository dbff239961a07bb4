// getMetrics() through the real e2b SDK: the edge asks the sandbox's runtime through the ingress,
// and the runtime reports the sandbox's own cgroup figures (the local driver shares one runtime
// across sandboxes).
import { readFileSync } from "node:fs";
import { Sandbox } from "e2b";
import { afterAll, describe, expect, it } from "vitest";
import { e2b, sleep } from "./sdk.ts";

const created: Sandbox[] = [];
afterAll(async () => {
  await Promise.all(created.map((s) => Sandbox.kill(s.sandboxId, e2b()).catch(() => false)));
});

async function latest(sbx: Sandbox) {
  const points = await sbx.getMetrics();
  expect(points.length).toBeGreaterThanOrEqual(1);
  return points.at(-1)!;
}

describe("metrics", () => {
  it("reports the sandbox's CPUs, memory limit and the memory it allocates", async () => {
    const sbx = await Sandbox.create({ ...e2b() });
    created.push(sbx);
    const info = await sbx.getInfo();
    const before = await latest(sbx);
    expect(before.cpuCount).toBe(info.cpuCount);
    // The template's limit where the driver enforces one (a memory cgroup), else the host's memory.
    const hostMem = Number(/^MemTotal:\s+(\d+)/m.exec(readFileSync("/proc/meminfo", "utf8"))![1]) * 1024;
    expect([info.memoryMB * 2 ** 20, hostMem]).toContain(before.memTotal);
    expect(before.diskTotal).toBeGreaterThan(0);
    expect(before.timestamp).toBeInstanceOf(Date);

    // 64 MiB held by a process inside the sandbox, charged to its cgroup.
    await sbx.commands.run("python3 -c 'import time; b = bytearray(64 * 2**20); b[::4096] = b\"x\" * (len(b) // 4096); time.sleep(60)'", { background: true });
    let after = before;
    for (let i = 0; i < 50 && after.memUsed < before.memUsed + 48 * 2 ** 20; i++) {
      await sleep(100);
      after = await latest(sbx);
    }
    expect(after.memUsed).toBeGreaterThanOrEqual(before.memUsed + 48 * 2 ** 20);
    expect(after.memUsed).toBeLessThanOrEqual(after.memTotal);
  });

  it("a paused sandbox has no points and stays paused", async () => {
    const sbx = await Sandbox.create({ ...e2b() });
    created.push(sbx);
    await sbx.pause();
    expect(await sbx.getMetrics()).toEqual([]);
    expect((await Sandbox.getInfo(sbx.sandboxId, e2b())).state).toBe("paused");
  });
});

