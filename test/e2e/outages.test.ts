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
