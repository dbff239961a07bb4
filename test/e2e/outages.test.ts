// Outages an operator pulling plugs would cause: sqld killed mid-burst (no sandbox a client was
// told about may go unlisted, none killed may come back), the agent away (the SDK must hear
// "retry", not "killed"), and kill -9 of each part (the supervisor brings it back). This file runs
// its own system (not the shared one) because it kills parts of it.
import { Sandbox, type SandboxInfo } from "e2b";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startSystem, type System } from "../../scripts/lib/system.ts";
import { sleep, uniqueTag } from "./sdk.ts";

let sys: System;
let dataDir: string;
const supervisorLog: string[] = [];
const opts = () => ({ apiKey: sys.apiKey, apiUrl: sys.apiUrl, sandboxUrl: sys.apiUrl, requestTimeoutMs: 30_000 });

beforeAll(async () => {
  dataDir = mkdtempSync(join(tmpdir(), "sbx-outages-"));
  sys = await startSystem({ dataDir, baseReplicas: 2, log: (line) => supervisorLog.push(line) });
});
afterAll(async () => {
  await sys?.stop();
  rmSync(dataDir, { recursive: true, force: true });
});

/** Retries `step` until it succeeds or `ms` pass (then throws its last error). */
async function eventually<T>(step: () => Promise<T>, ms: number): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    try {
      return await step();
    } catch (err) {
      if (Date.now() > deadline) throw err;
      await sleep(250);
    }
  }
}

/** Every page of the list of sandboxes carrying `tag`. */
async function listed(tag: string): Promise<SandboxInfo[]> {
  const pager = Sandbox.list({ ...opts(), limit: 20, query: { metadata: { tag } } });
  const all: SandboxInfo[] = [];
  while (pager.hasNext) all.push(...(await pager.nextItems()));
  return all;
}

describe("an sqld outage", () => {
  it("sqld killed and restarted mid-burst of 50 creates: every sandbox a client got is listed once, the killed ones are not", async () => {
    const tag = uniqueTag();
    // One create first, so the edge has the key and the template cached as it would in steady
    // state: on a loaded machine none of the burst may get past auth before the kill otherwise,
    // and the test is about the sandboxes a client was told of, not a cold cache.
    await (await Sandbox.create({ ...opts(), metadata: { tag: `${tag}-warm` } })).kill();
    let settled = 0;
    const creates = Array.from({ length: 50 }, (_, i) =>
      sleep(i * 30)
        .then(() => Sandbox.create({ ...opts(), metadata: { tag }, timeoutMs: 300_000 }))
        .then((s) => ({ ok: true as const, s }), (e: unknown) => ({ ok: false as const, e }))
        .finally(() => settled++),
    );
    await sleep(400);
    await sys.parts.sqld.stop("SIGKILL");
    // The outage must land mid-burst for the test to mean anything.
    expect(settled).toBeLessThan(50);
    await sleep(2_500);
    // Kills during the outage: their index rows cannot be written now either.
    const early = (await Promise.all(creates.slice(0, 10))).filter((r) => r.ok).map((r) => r.s);
    const killedDuringOutage = early.slice(0, 3);
    await Promise.all(killedDuringOutage.map((s) => s.kill()));
    await sleep(2_500);
    await sys.parts.sqld.start();

    const results = await Promise.all(creates);
    const told = results.filter((r) => r.ok).map((r) => r.s);
    expect(told.length).toBeGreaterThan(killedDuringOutage.length);
    const killedAfter = told.filter((s) => !killedDuringOutage.includes(s)).slice(0, 2);
    await Promise.all(killedAfter.map((s) => s.kill()));
    const killed = new Set([...killedDuringOutage, ...killedAfter].map((s) => s.sandboxId));
    const alive = told.map((s) => s.sandboxId).filter((id) => !killed.has(id));

    // Listed within a bounded wait once the store is back: all of them, once each, nothing else.
    const ids = await eventually(async () => {
      const ids = (await listed(tag)).map((s) => s.sandboxId);
      expect([...ids].sort()).toEqual([...alive].sort());
      return ids;
    }, 30_000);
    expect(new Set(ids).size).toBe(ids.length);
    // None listed is gone: each answers.
    for (const s of told.filter((s) => !killed.has(s.sandboxId))) expect(await s.isRunning()).toBe(true);
    // And nothing that was killed comes back later (a late write must not resurrect a row).
    await sleep(3_000);
    expect((await listed(tag)).map((s) => s.sandboxId).sort()).toEqual([...alive].sort());
    await Promise.all(told.map((s) => s.kill().catch(() => false)));
  }, 120_000);
});

/** What a user would hold against an error: its message must name the agent, not a dead sandbox. */
function expectAgentAway(err: unknown): void {
  expect(err).toBeInstanceOf(Error);
  const message = (err as Error).message;
  expect(message).toMatch(/agent .* is not connected/);
  expect(message).not.toMatch(/killed or reached its end of life|not running anymore|not found/i);
}

describe("the agent away", () => {
  it("commands.run, files.read and a stream cut by the agent's death name the agent, not a killed sandbox, and work again once it is back", async () => {
    const sbx = await Sandbox.create(opts());
    await sbx.files.write("/home/user/kept.txt", "kept");
    const running = await sbx.commands.run("sleep 120", { background: true });
    // On purpose (not restarted by its supervisor); SIGKILL leaves the sandbox running.
    await sys.stopAgent("SIGKILL");
    try {
      // A stream open when the agent went: cut, and said so.
      expectAgentAway(await running.wait().catch((e: unknown) => e));
      expectAgentAway(await sbx.commands.run("echo hi").catch((e: unknown) => e));
      expectAgentAway(await sbx.files.read("/home/user/kept.txt").catch((e: unknown) => e));
      // Once the edge has seen the session close too (not only the ingress refusing).
      await eventually(async () => {
        const res = await fetch(`${sys.apiUrl}/admin/clusters/local`, { headers: { "x-api-key": sys.apiKey } });
        expect(((await res.json()) as { connected: boolean }).connected).toBe(false);
      }, 30_000);
      expectAgentAway(await sbx.commands.run("echo hi").catch((e: unknown) => e));
      expectAgentAway(await sbx.files.read("/home/user/kept.txt").catch((e: unknown) => e));
    } finally {
      await sys.startAgent();
    }
    const r = await eventually(() => sbx.commands.run("echo back"), 30_000);
    expect(r.stdout).toBe("back\n");
    expect(await sbx.files.read("/home/user/kept.txt")).toBe("kept");
    await sbx.kill();
  }, 90_000);
});

describe("supervision", () => {
  it("kill -9 of sqld, workerd and the agent under light load: each is restarted and reported, and create + command work again", async () => {
    const steady = await Sandbox.create({ ...opts(), timeoutMs: 600_000 });
    let loading = true;
    const load = (async () => {
      while (loading) {
        await steady.commands.run("true").catch(() => undefined);
        await Sandbox.list(opts()).nextItems().catch(() => undefined);
        await sleep(100);
      }
    })();
    try {
      for (const part of ["sqld", "edge", "agent"] as const) {
        const supervisor = sys.parts[part];
        const before = supervisor.restarts;
        process.kill(supervisor.current!.pid, "SIGKILL");
        await eventually(async () => expect(supervisor.restarts).toBeGreaterThan(before), 60_000);
        expect(supervisorLog).toContainEqual(expect.stringMatching(new RegExp(`^${supervisor.name} exited \\(killed by SIGKILL\\); restarting in`)));
        const sbx = await eventually(() => Sandbox.create(opts()), 60_000);
        const r = await eventually(() => sbx.commands.run(`echo after ${part}`), 30_000);
        expect(r.stdout).toBe(`after ${part}\n`);
        await sbx.kill();
      }
    } finally {
      loading = false;
      await load;
    }
    expect((await eventually(() => steady.commands.run("echo still here"), 30_000)).stdout).toBe("still here\n");
    await steady.kill();
  }, 240_000);
});
