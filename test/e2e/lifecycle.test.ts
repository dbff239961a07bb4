// Sandbox lifecycle through the real e2b JS SDK against the whole local system
// (shared reference e2b-protocol.md §5.4 items 19–24).
import { Sandbox, SandboxNotFoundError, type SandboxListOpts, type SandboxOpts, type SandboxPauseOpts } from "e2b";
import { afterAll, describe, expect, inject, it } from "vitest";
import { scrape, value } from "../support/prometheus-text.ts";
import { waitFor } from "../support/wait-for.ts";
import { e2b, sleep, uniqueTag } from "./sdk.ts";

const created: Sandbox[] = [];
async function create(opts: SandboxOpts = {}): Promise<Sandbox> {
  const sbx = await Sandbox.create({ ...e2b(), ...opts });
  created.push(sbx);
  return sbx;
}
/** The edge's count of sandboxes woken by traffic (admin metrics, parsed as Prometheus would). */
async function wakeups(): Promise<number> {
  const { apiUrl, apiKey } = inject("e2b");
  return value(await scrape(new URL("/admin/metrics", apiUrl).href, { headers: { "x-api-key": apiKey } }), "edge_sandbox_wakeups_total", { via: "traffic" });
}
afterAll(async () => {
  await Promise.all(created.map((s) => Sandbox.kill(s.sandboxId, e2b()).catch(() => false)));
});

describe("lifecycle", () => {
  it("creates a running sandbox that getInfo and list (by metadata) report", async () => {
    const tag = uniqueTag();
    const sbx = await create({ metadata: { tag, "user id": "a&b=c" } });
    expect(sbx.sandboxId).toMatch(/^[a-z0-9]+$/);
    expect(await sbx.isRunning()).toBe(true);

    const info = await Sandbox.getInfo(sbx.sandboxId, e2b());
    expect(info.sandboxId).toBe(sbx.sandboxId);
    expect(info.templateId).toBe("base");
    expect(info.state).toBe("running");
    expect(info.endAt).toBeInstanceOf(Date);
    expect(info.metadata).toEqual({ tag, "user id": "a&b=c" });

    const listed = await Sandbox.list({ ...e2b(), query: { metadata: { tag, "user id": "a&b=c" } } }).nextItems();
    expect(listed.map((s) => s.sandboxId)).toEqual([sbx.sandboxId]);
    expect(listed[0]!.metadata).toEqual({ tag, "user id": "a&b=c" });
  });

  it("kill returns true, drops the sandbox from the running list, and a second kill is false", async () => {
    const tag = uniqueTag();
    const sbx = await create({ metadata: { tag } });
    expect(await sbx.kill()).toBe(true);
    expect(await sbx.isRunning()).toBe(false);
    const listed = await Sandbox.list({ ...e2b(), query: { metadata: { tag }, state: ["running"] } }).nextItems();
    expect(listed).toEqual([]);
    expect(await Sandbox.kill(sbx.sandboxId, e2b())).toBe(false);
    expect(await Sandbox.kill("nonexistingsandbox", e2b())).toBe(false);
    await expect(Sandbox.connect(sbx.sandboxId, e2b())).rejects.toBeInstanceOf(SandboxNotFoundError);
  });

  it("pages newest first with limit 1, and filters by state and order", async () => {
    const tag = uniqueTag();
    const older = await create({ metadata: { tag } });
    await sleep(20);
    const newer = await create({ metadata: { tag } });

    const pager = Sandbox.list({ ...e2b(), limit: 1, query: { metadata: { tag }, state: ["running"] } });
    const page1 = await pager.nextItems();
    expect(page1.map((s) => s.sandboxId)).toEqual([newer.sandboxId]);
    expect(pager.hasNext).toBe(true);
    const page2 = await pager.nextItems();
    expect(page2.map((s) => s.sandboxId)).toEqual([older.sandboxId]);
    expect(pager.hasNext).toBe(false);

    const asc = await Sandbox.list({ ...e2b(), query: { metadata: { tag } }, order: "asc" } satisfies SandboxListOpts).nextItems();
    expect(asc.map((s) => s.sandboxId)).toEqual([older.sandboxId, newer.sandboxId]);
  });

  it("setTimeout shortens the life of a sandbox: it really expires", async () => {
    const sbx = await create();
    await sbx.setTimeout(3_000);
    await sleep(5_000);
    expect(await sbx.isRunning()).toBe(false);
    await expect(Sandbox.getInfo(sbx.sandboxId, e2b())).rejects.toBeInstanceOf(SandboxNotFoundError);
  });

  it("setTimeout also extends: a shortened sandbox extended again keeps running", async () => {
    const sbx = await create();
    await sbx.setTimeout(3_000);
    await sleep(1_000);
    await sbx.setTimeout(20_000);
    await sleep(4_000);
    expect(await sbx.isRunning()).toBe(true);
  });

  it("connect only extends the timeout, never shortens it", async () => {
    const sbx = await create({ timeoutMs: 300_000 });
    const before = (await Sandbox.getInfo(sbx.sandboxId, e2b())).endAt.getTime();
    await Sandbox.connect(sbx.sandboxId, { ...e2b(), timeoutMs: 10_000 });
    const same = (await Sandbox.getInfo(sbx.sandboxId, e2b())).endAt.getTime();
    expect(same).toBe(before);
    await Sandbox.connect(sbx.sandboxId, { ...e2b(), timeoutMs: 600_000 });
    const extended = (await Sandbox.getInfo(sbx.sandboxId, e2b())).endAt.getTime();
    expect(extended).toBeGreaterThan(before + 200_000);
  });
});

describe("pause and resume", () => {
  it("Freeze keeps files, env and a running process (same pid), and pausing twice returns false", async () => {
    const sbx = await create({ envs: { FOO: "bar" } });
    await sbx.files.write("/home/user/kept.txt", "still here");
    const sleeper = await sbx.commands.run("sleep 3600", { background: true });
    const counter = await sbx.commands.run("i=0; while true; do i=$((i+1)); echo $i > /tmp/count; sleep 0.1; done", { background: true });
    while (!(await sbx.files.exists("/tmp/count"))) await sleep(50);

    expect(await sbx.pause()).toBe(true);
    expect(await sbx.isRunning()).toBe(false);
    expect((await Sandbox.getInfo(sbx.sandboxId, e2b())).state).toBe("paused");
    expect(await Sandbox.pause(sbx.sandboxId, e2b())).toBe(false);

    const resumed = await Sandbox.connect(sbx.sandboxId, e2b());
    expect(resumed.sandboxId).toBe(sbx.sandboxId);
    expect(await resumed.isRunning()).toBe(true);
    expect(await resumed.files.read("/home/user/kept.txt")).toBe("still here");
    expect((await resumed.commands.run("echo $FOO")).stdout.trim()).toBe("bar");
    const pids = (await resumed.commands.list()).map((p) => p.pid);
    expect(pids).toContain(sleeper.pid);
    const handle = await resumed.commands.connect(sleeper.pid);
    expect(handle.pid).toBe(sleeper.pid);
    // The background loop keeps counting after the thaw.
    const c1 = Number((await resumed.files.read("/tmp/count")).trim());
    await sleep(600);
    const c2 = Number((await resumed.files.read("/tmp/count")).trim());
    expect(c2).toBeGreaterThan(c1);
    await resumed.commands.kill(counter.pid);
  });

  it("keepMemory:false (Stop) keeps the files but not the processes", async () => {
    const sbx = await create();
    await sbx.files.write("/home/user/disk.txt", "on disk");
    const sleeper = await sbx.commands.run("sleep 3600", { background: true });
    expect(await sbx.pause({ keepMemory: false } satisfies SandboxPauseOpts)).toBe(true);
    expect(await sbx.isRunning()).toBe(false);

    const resumed = await Sandbox.connect(sbx.sandboxId, e2b());
    expect(await resumed.files.read("/home/user/disk.txt")).toBe("on disk");
    const pids = (await resumed.commands.list()).map((p) => p.pid);
    expect(pids).not.toContain(sleeper.pid);
  });

  it("a paused sandbox with auto-resume wakes on traffic, counted once in the edge's /admin/metrics", async () => {
    const sbx = await create({ lifecycle: { onTimeout: "pause", autoResume: true } });
    await sbx.files.write("/home/user/wake.txt", "awake");
    expect(await sbx.pause()).toBe(true);
    expect((await Sandbox.getInfo(sbx.sandboxId, e2b())).state).toBe("paused");
    const before = await wakeups();
    // Plain data-plane traffic (no connect call) wakes it.
    expect(await sbx.files.read("/home/user/wake.txt")).toBe("awake");
    expect((await Sandbox.getInfo(sbx.sandboxId, e2b())).state).toBe("running");
    // The count may reach the edge's sum a flush later (each isolate flushes in the background).
    const after = await waitFor(async () => {
      const n = await wakeups();
      return n > before ? n : undefined;
    }, 15_000);
    expect(after - before).toBe(1);
    // More traffic to the running sandbox wakes nothing.
    expect(await sbx.files.read("/home/user/wake.txt")).toBe("awake");
    expect((await wakeups()) - before).toBe(1);
  });

  it("a paused sandbox without auto-resume does not wake on traffic", async () => {
    const sbx = await create();
    expect(await sbx.pause()).toBe(true);
    expect(await sbx.isRunning()).toBe(false);
    await expect(sbx.commands.run("true")).rejects.toThrow();
    expect((await Sandbox.getInfo(sbx.sandboxId, e2b())).state).toBe("paused");
  });
});
