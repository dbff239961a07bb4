// A sandbox the edge marks Failed keeps its host side (its processes still run when only its ready
// command failed), so it keeps counting against its team's quota until that is deleted: a tenant
// whose sandboxes fail on purpose cannot hold host resources past the quota. Through the real e2b
// SDK against a real agent: a template whose ready command the tenant can make fail, a Stop pause
// and a resume that fails. A resume that fails keeps the paused disk to the sandbox's own timeout
// (the failure may be the platform's), never the 10-min kill of other failures.
import { existsSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { RateLimitError, Sandbox } from "e2b";
import { afterAll, describe, expect, inject, it } from "vitest";
import { layoutFor } from "../../controllers/drivers/local/layout.ts";
import { FAILED_RETAIN_MS } from "../../durable-objects/sandbox/machine.ts";
import { readRecord } from "../../controllers/drivers/local/records.ts";
import { waitFor } from "../support/wait-for.ts";
import { e2b, uniqueTag } from "./sdk.ts";

const created: { id: string; key: string }[] = [];
afterAll(async () => {
  await Promise.all(created.map((c) => Sandbox.kill(c.id, { ...e2b(), apiKey: c.key }).catch(() => false)));
});

/** An HTTP call with the admin key, or with `key`: status and parsed body. */
async function api(path: string, init: { method?: string; body?: unknown; key?: string } = {}): Promise<{ status: number; body: any }> {
  const res = await fetch(`${e2b().apiUrl}${path}`, {
    method: init.method ?? (init.body === undefined ? "GET" : "POST"),
    headers: { "x-api-key": init.key ?? e2b().apiKey, "content-type": "application/json" },
    body: init.body === undefined ? undefined : JSON.stringify(init.body),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : null };
}

/** What the local agent on this host holds of sandbox `id`: its record, its pid 1 (alive), the
 * processes of its cgroup, its disk image. */
function hostSide(id: string): { record: boolean; pid1Alive: boolean; cgroupProcs: number; diskBytes: number } {
  const layout = layoutFor(join(inject("e2b").dataDir, "agent/local"), id);
  const rec = existsSync(layout.dir) ? readRecord(layout.record) : null;
  const pid = rec?.nsInit?.pid;
  const procs = rec?.cgroups?.core && existsSync(join(rec.cgroups.core, "cgroup.procs")) ? readFileSync(join(rec.cgroups.core, "cgroup.procs"), "utf8").split("\n").filter(Boolean).length : 0;
  return {
    record: rec !== null,
    pid1Alive: pid !== undefined && existsSync(`/proc/${pid}`),
    cgroupProcs: procs,
    diskBytes: existsSync(layout.image) ? statSync(layout.image).blocks * 512 : 0,
  };
}
const holds = (h: ReturnType<typeof hostSide>) => h.record || h.pid1Alive || h.cgroupProcs > 0;

describe("a sandbox that fails", () => {
  it("keeps counting against its team's running-sandboxes quota while its host side is held", async () => {
    const team = uniqueTag();
    const { key } = await api("/api-keys", { body: { name: "failing", teamName: team } }).then((r) => r.body);
    expect((await api(`/admin/teams/${team}/quota`, { method: "PUT", body: { runningSandboxes: 1 } })).status).toBe(200);
    const marker = `sleep 1000${Math.floor(Math.random() * 90 + 10)}7`;
    const template = `${team}-ready`;
    // Ready while /home/user/fail is absent: the tenant decides when its ready command fails.
    const put = await api(`/admin/teams/${team}/templates/${template}`, { method: "PUT", body: { spec: { replicas: 0, memoryMB: 256, startCmd: `exec ${marker}`, readyCmd: "test ! -e /home/user/fail" } } });
    expect(put.status, JSON.stringify(put.body)).toBeLessThan(300);

    const sbx = await Sandbox.create(template, { ...e2b(), apiKey: key, timeoutMs: 3_600_000 });
    created.push({ id: sbx.sandboxId, key });
    await sbx.files.write("/home/user/fail", "x");
    expect(await sbx.pause({ keepMemory: false })).toBe(true);
    // The resume starts it again (its start command runs), and its ready command fails.
    const resumed = await Sandbox.connect(sbx.sandboxId, { ...e2b(), apiKey: key }).catch((err: unknown) => err);
    expect(resumed).toBeInstanceOf(Error);
    expect(String((resumed as Error).message)).toMatch(/ReadyCommandFailed/);
    const seen = await api(`/admin/sandboxes/${sbx.sandboxId}`);
    expect(seen.body).toMatchObject({ phase: "Failed", conditions: expect.arrayContaining([expect.objectContaining({ type: "Ready", status: "False", reason: "ReadyCommandFailed" })]) });
    // Its host side is held: the agent still runs it, its paused disk included.
    const held = hostSide(sbx.sandboxId);
    console.log("failed sandbox", sbx.sandboxId, "host side", JSON.stringify(held));
    expect(holds(held)).toBe(true);
    expect(held.diskBytes).toBeGreaterThan(0);
    // The paused data is kept to its own timeout (an hour here), not killed FAILED_RETAIN_MS after the failure.
    const warning = (seen.body.events as { type: string; message: string }[]).find((e) => e.type === "Warning" && e.message.startsWith("failed to resume"));
    expect(warning?.message).toMatch(/its paused disk is kept until \S+ \(its timeout\), counted against the team quota/);
    const keptUntil = Date.parse(/kept until (\S+)/.exec(warning!.message)![1]!);
    expect(keptUntil).toBeGreaterThan(Date.now() + FAILED_RETAIN_MS + 30 * 60_000);

    // So it still counts: the team cannot create past its quota.
    const usage = (await api(`/admin/teams/${team}/quota`)).body.usage;
    console.log("usage while failed", JSON.stringify(usage));
    const refused = await Sandbox.create({ ...e2b(), apiKey: key }).then(
      (s) => {
        created.push({ id: s.sandboxId, key });
        return s;
      },
      (err: unknown) => err,
    );
    expect(refused).toBeInstanceOf(RateLimitError);
    expect(String((refused as Error).message)).toContain(`team "${team}" has 1 of 1 running sandboxes (quota runningSandboxes)`);

    // Its kill (the team's key still reaches it) deletes its host side and frees the slot.
    expect(await Sandbox.kill(sbx.sandboxId, { ...e2b(), apiKey: key })).toBe(true);
    await waitFor(() => !holds(hostSide(sbx.sandboxId)), { what: "its host side gone", timeoutMs: 20_000 });
    const next = await Sandbox.create({ ...e2b(), apiKey: key });
    created.push({ id: next.sandboxId, key });
  });
});
