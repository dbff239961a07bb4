// The agent's stop of its sandboxes (controllers/agent/stop-sandboxes.ts) against a scripted
// driver: a destroy ends every sandbox's processes before any cleanup, runs at most
// STOP_CONCURRENCY cleanups at once, and one that fails neither stops the others nor the stop.
import { describe, expect, it } from "vitest";
import { STOP_CONCURRENCY, stopSandboxes } from "../../../../controllers/agent/stop-sandboxes.ts";
import type { DesiredSandbox, Driver } from "../../../../controllers/drivers/driver.ts";

function scripted(ids: string[], opts: { failing?: string; phase?: string } = {}) {
  const events: string[] = [];
  let running = 0;
  let most = 0;
  const slow = async (what: string, id: string) => {
    running++;
    most = Math.max(most, running);
    await new Promise((r) => setTimeout(r, 5));
    running--;
    if (id === opts.failing) throw new Error(`${what} ${id} failed`);
    events.push(`${what} ${id}`);
  };
  const driver = {
    list: async () => ids.map((id) => ({ id, phase: opts.phase ?? "Running" })),
    destroy: (id: string) => slow("destroy", id),
    ensure: async (d: DesiredSandbox) => (await slow("stop", d.id), {}),
  } as unknown as Pick<Driver, "list" | "destroy" | "ensure">;
  return { driver, events, most: () => most };
}

const ids = Array.from({ length: 13 }, (_, i) => `s${i}`);

describe("stopSandboxes", () => {
  it("destroy: every sandbox's processes end before any cleanup; at most STOP_CONCURRENCY at once; all destroyed", async () => {
    const d = scripted(ids);
    const logs: string[] = [];
    const res = await stopSandboxes({ driver: d.driver, onExit: "destroy", endProcesses: async (id) => void d.events.push(`end ${id}`), stoppedFor: () => undefined, log: (m) => logs.push(m) });
    expect(d.events.slice(0, ids.length).sort()).toEqual(ids.map((id) => `end ${id}`).sort());
    expect(d.events.slice(ids.length).sort()).toEqual(ids.map((id) => `destroy ${id}`).sort());
    expect(d.most()).toBe(STOP_CONCURRENCY);
    expect(res).toEqual({ count: 13, failed: 0 });
    expect(logs).toEqual([expect.stringMatching(/^destroyed 13 of 13 sandboxes in \d+ ms$/)]);
  });

  it("a destroy that fails is logged and the others are still destroyed", async () => {
    const d = scripted(ids, { failing: "s2" });
    const logs: string[] = [];
    const res = await stopSandboxes({ driver: d.driver, onExit: "destroy", stoppedFor: () => undefined, log: (m) => logs.push(m) });
    expect(d.events.sort()).toEqual(ids.filter((id) => id !== "s2").map((id) => `destroy ${id}`).sort());
    expect(res).toEqual({ count: 13, failed: 1 });
    expect(logs[0]).toBe("could not destroy sandbox s2: destroy s2 failed");
    expect(logs[1]).toMatch(/^destroyed 12 of 13 sandboxes/);
  });

  it("stop: only running or paused sandboxes with a stopped state are stopped, never destroyed", async () => {
    const d = scripted(ids.slice(0, 3));
    const stoppedFor = (id: string) => (id === "s1" ? undefined : ({ id, state: "Paused", pauseStrategy: "Stop" } as unknown as DesiredSandbox));
    await stopSandboxes({ driver: d.driver, onExit: "stop", endProcesses: async (id) => void d.events.push(`end ${id}`), stoppedFor, log: () => {} });
    expect(d.events.sort()).toEqual(["stop s0", "stop s2"]);
    const failed = scripted(["x"], { phase: "Failed" });
    await stopSandboxes({ driver: failed.driver, onExit: "stop", stoppedFor: (id) => ({ id }) as unknown as DesiredSandbox, log: () => {} });
    expect(failed.events).toEqual([]);
  });
});
