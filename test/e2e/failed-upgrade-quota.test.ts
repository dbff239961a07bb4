// A sandbox the edge marks Failed while its host side is still there keeps counting against its
// team's quota until it is killed (quotas fail closed: the tenant decides when its sandboxes fail).
// A failed resume no longer makes one (it goes back to paused: resume-failed.test.ts), so this is
// the failed upgrade, through the real e2b SDK and a real agent: an update ops run whose new
// revision's ready command never passes leaves the sandbox Failed with its new processes running.
// (Review L1 of s35-resume: failed-quota.test.ts was the only real-agent check of this rule.)
import { RateLimitError, Sandbox } from "e2b";
import { afterAll, describe, expect, it } from "vitest";
import { waitFor } from "../support/wait-for.ts";
import { api, hostSide } from "./local-host.ts";
import { e2b, uniqueTag } from "./sdk.ts";

const created: { id: string; key: string }[] = [];
afterAll(async () => {
  await Promise.all(created.map((c) => Sandbox.kill(c.id, { ...e2b(), apiKey: c.key }).catch(() => false)));
});

const holds = (h: ReturnType<typeof hostSide>) => h.record || h.pid1Alive || h.cgroupProcs > 0;

describe("a sandbox whose upgrade failed", () => {
  it("keeps its running slot while its host side runs: a create past the team's quota is refused until it is killed", async () => {
    const team = uniqueTag();
    const { key } = await api("/api-keys", { body: { name: "upgrading", teamName: team } }).then((r) => r.body);
    expect((await api(`/admin/teams/${team}/quota`, { method: "PUT", body: { runningSandboxes: 1 } })).status).toBe(200);
    const template = `${team}-up`;
    const put = (v: string, readyCmd: string) =>
      api(`/admin/teams/${team}/templates/${template}`, { method: "PUT", body: { spec: { replicas: 0, memoryMB: 256, startCmd: `echo ${v} >> /home/user/starts; exec sleep 100${v === "v1" ? 1 : 2}08`, readyCmd } } });
    const v1 = await put("v1", "grep -qx v1 /home/user/starts");
    expect(v1.status, JSON.stringify(v1.body)).toBeLessThan(300);
    const sbx = await Sandbox.create(template, { ...e2b(), apiKey: key, metadata: { "label:ops": team }, timeoutMs: 3_600_000 });
    created.push({ id: sbx.sandboxId, key });

    // v2's ready command never passes: the upgrade's new processes run, and the sandbox fails.
    expect((await put("v2", "test -e /home/user/never")).status).toBeLessThan(300);
    const run = await api(`/admin/teams/${team}/updateops`, { body: { name: template, selector: { matchLabels: { ops: team } }, updateStrategy: { maxUnavailable: 1 } } });
    expect(run.status, JSON.stringify(run.body)).toBeLessThan(300);
    const done = await waitFor(
      async () => {
        const s = (await api(`/admin/teams/${team}/updateops/${template}`)).body;
        return s?.phase === "Completed" || s?.phase === "Failed" ? s : undefined;
      },
      { what: "the run to end", timeoutMs: 90_000, intervalMs: 250 },
    );
    expect(done, JSON.stringify(done)).toMatchObject({ phase: "Failed", failedReplicas: 1 });
    const seen = (await api(`/admin/sandboxes/${sbx.sandboxId}`)).body;
    expect(seen, JSON.stringify(seen.conditions)).toMatchObject({ phase: "Failed" });
    const held = hostSide(sbx.sandboxId);
    console.log("failed upgrade", sbx.sandboxId, "host side", JSON.stringify(held), "usage", JSON.stringify((await api(`/admin/teams/${team}/quota`)).body.usage));
    expect(held.pid1Alive).toBe(true);
    expect(held.cgroupProcs).toBeGreaterThan(0);

    // So it still holds the team's one running slot.
    expect((await api(`/admin/teams/${team}/quota`)).body.usage).toMatchObject({ runningSandboxes: 1 });
    const refused = await Sandbox.create({ ...e2b(), apiKey: key }).then(
      (s) => {
        created.push({ id: s.sandboxId, key });
        return s;
      },
      (err: unknown) => err,
    );
    expect(refused).toBeInstanceOf(RateLimitError);
    expect(String((refused as Error).message)).toContain(`team "${team}" has 1 of 1 running sandboxes (quota runningSandboxes)`);

    // Its kill by id deletes its host side and frees the slot.
    expect(await Sandbox.kill(sbx.sandboxId, { ...e2b(), apiKey: key })).toBe(true);
    await waitFor(() => !holds(hostSide(sbx.sandboxId)), { what: "its host side gone", timeoutMs: 20_000 });
    const next = await Sandbox.create({ ...e2b(), apiKey: key });
    created.push({ id: next.sandboxId, key });
  });
});
