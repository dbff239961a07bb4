// A resume that fails goes back to paused: nothing of the user's paused work is lost, the sandbox
// holds a paused slot (not a running one) and a later connect resumes it. Through the real e2b SDK
// against a real agent: a template whose ready command the tenant can make fail on its next start,
// a Stop pause, and a resume whose ready command does not pass. What the failed start left on the
// host (its pid 1, the processes of its cgroup, the disk's mount) is stopped, its disk image kept.
import { Sandbox } from "e2b";
import { afterAll, describe, expect, it } from "vitest";
import { waitFor } from "../support/wait-for.ts";
import { api, hostSide, processesWith } from "./local-host.ts";
import { e2b, uniqueTag } from "./sdk.ts";

const created: { id: string; key: string }[] = [];
afterAll(async () => {
  await Promise.all(created.map((c) => Sandbox.kill(c.id, { ...e2b(), apiKey: c.key }).catch(() => false)));
});

const runs = (h: ReturnType<typeof hostSide>) => h.pid1Alive || h.cgroupProcs > 0 || h.mounts > 0;

describe("a resume that fails", () => {
  it("goes back to paused with its files kept: the connect names the reason, it lists as paused, holds no running slot, and a second connect resumes it", async () => {
    const team = uniqueTag();
    const { key } = await api("/api-keys", { body: { name: "failing", teamName: team } }).then((r) => r.body);
    expect((await api(`/admin/teams/${team}/quota`, { method: "PUT", body: { runningSandboxes: 1 } })).status).toBe(200);
    const marker = `sleep 1000${Math.floor(Math.random() * 90 + 10)}7`;
    const template = `${team}-ready`;
    // Each start turns /home/user/fail-next into /home/user/fail (or clears a fail left by the
    // start before), and the ready command passes once the start ran (its mark in the new /dev/shm)
    // while no fail exists: the tenant makes the next start fail, and only that one.
    const startCmd = `if [ -e /home/user/fail-next ]; then mv /home/user/fail-next /home/user/fail; else rm -f /home/user/fail; fi; touch /dev/shm/started; exec ${marker}`;
    const put = await api(`/admin/teams/${team}/templates/${template}`, { method: "PUT", body: { spec: { replicas: 0, memoryMB: 256, startCmd, readyCmd: "test -e /dev/shm/started && test ! -e /home/user/fail" } } });
    expect(put.status, JSON.stringify(put.body)).toBeLessThan(300);

    const sbx = await Sandbox.create(template, { ...e2b(), apiKey: key, timeoutMs: 3_600_000 });
    created.push({ id: sbx.sandboxId, key });
    await sbx.files.write("/home/user/work.txt", "written before the pause");
    await sbx.files.write("/home/user/fail-next", "x");
    // What "runs" looks for is there while it runs: its pid 1, its processes, its disk's mount.
    const live = hostSide(sbx.sandboxId);
    expect(live, JSON.stringify(live)).toMatchObject({ record: true, pid1Alive: true });
    expect(live.cgroupProcs).toBeGreaterThan(0);
    expect(live.mounts).toBeGreaterThan(0);
    // And its start command's own process, found by its command line, not through the record.
    expect(processesWith(marker)).toBe(1);
    expect(await sbx.pause({ keepMemory: false })).toBe(true);

    // The resume starts it again (its start command runs), and its ready command fails.
    const resumed = await Sandbox.connect(sbx.sandboxId, { ...e2b(), apiKey: key }).catch((err: unknown) => err);
    expect(resumed).toBeInstanceOf(Error);
    console.log("failed resume answered:", String((resumed as Error).message));
    expect(String((resumed as Error).message)).toMatch(/^409: Sandbox "\S+" failed to resume: ReadyCommandFailed \(the template's ready command did not pass within \d+ s.*\); it is paused again with its files kept/);

    // Paused again, to E2B and to the team quota: listed as paused, no running slot held.
    expect((await Sandbox.getInfo(sbx.sandboxId, { ...e2b(), apiKey: key })).state).toBe("paused");
    const listed = await Sandbox.list({ ...e2b(), apiKey: key, query: { state: ["paused"] } }).nextItems();
    expect(listed.map((s) => s.sandboxId)).toContain(sbx.sandboxId);
    await waitFor(async () => (await api(`/admin/sandboxes/${sbx.sandboxId}`)).body.phase === "Paused", { what: "paused again", timeoutMs: 20_000 });
    const seen = (await api(`/admin/sandboxes/${sbx.sandboxId}`)).body;
    expect(seen.conditions).toContainEqual(expect.objectContaining({ type: "SandboxResumed", status: "False", reason: "ResumeFailed" }));
    expect(seen.events).toContainEqual(expect.objectContaining({ type: "Warning", reason: "ReadyCommandFailed", message: expect.stringMatching(/^failed to resume: .*; paused again \(Stop\), its files kept/) }));
    // Nothing of the failed start runs on the host any more (no pid 1, no process in its cgroup,
    // nothing mounted); its disk image is kept.
    await waitFor(() => !runs(hostSide(sbx.sandboxId)) && processesWith(marker) === 0, { what: "the failed start stopped", timeoutMs: 20_000 });
    const held = hostSide(sbx.sandboxId);
    console.log("paused again", sbx.sandboxId, "host side", JSON.stringify(held));
    expect(held.record).toBe(true);
    expect(held.diskBytes).toBeGreaterThan(0);
    const usage = await waitFor(async () => {
      const u = (await api(`/admin/teams/${team}/quota`)).body.usage;
      return u.runningSandboxes === 0 && u;
    }, { what: "no running slot held" });
    expect(usage).toMatchObject({ runningSandboxes: 0, pausedSandboxes: 1 });
    // So the team's one running slot is free.
    const other = await Sandbox.create({ ...e2b(), apiKey: key });
    created.push({ id: other.sandboxId, key });
    expect(await other.kill()).toBe(true);

    // A second resume (this start finds no fail-next) succeeds, with the files written before the pause.
    const back = await Sandbox.connect(sbx.sandboxId, { ...e2b(), apiKey: key });
    expect(await back.isRunning()).toBe(true);
    expect(await back.files.read("/home/user/work.txt")).toBe("written before the pause");
    expect((await back.commands.run("test ! -e /home/user/fail && echo clear")).stdout.trim()).toBe("clear");

    // A kill by id deletes it, host side and all.
    expect(await Sandbox.kill(sbx.sandboxId, { ...e2b(), apiKey: key })).toBe(true);
    await waitFor(() => !hostSide(sbx.sandboxId).record && !runs(hostSide(sbx.sandboxId)), { what: "its host side gone", timeoutMs: 20_000 });
  });
});
