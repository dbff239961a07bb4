// An update ops run on the local driver, driven through the admin API and seen through the real
// E2B SDK: after a template change, Recreate gives each selected sandbox a new runtime (its old
// processes are gone) on the same files; a paused one is upgraded paused,
// keeps its files and runs the new version when resumed; one outside the selector is untouched.
import { Sandbox } from "e2b";
import { afterAll, describe, expect, it } from "vitest";
import { waitFor } from "../support/wait-for.ts";
import { admin, e2b, uniqueTag } from "./sdk.ts";

const tag = uniqueTag();
const template = `ops${tag}`;
const made: Sandbox[] = [];

afterAll(async () => {
  await Promise.all(made.map((s) => s.kill().catch(() => false)));
  for (const t of [template, `${template}h`, `${template}s`, `${template}c`, `${template}r`]) {
    await admin(`/admin/teams/admin/updateops/${t}`, { method: "DELETE" }).catch(() => undefined);
    await admin(`/admin/teams/admin/templates/${t}`, { method: "DELETE" }).catch(() => undefined);
  }
});

/** The run's status once it ended. */
const ended = (name: string) =>
  waitFor(
    async () => {
      const s = await admin(`/admin/teams/admin/updateops/${name}`);
      return s.phase === "Completed" || s.phase === "Failed" ? s : undefined;
    },
    { what: `run ${name} to end`, timeoutMs: 90_000, intervalMs: 200 },
  );

describe("update ops on the local driver", () => {
  it("Recreate keeps each sandbox's files, replaces its processes, and a paused one stays paused", async () => {
    await admin(`/admin/teams/admin/templates/${template}`, { method: "PUT", body: { spec: { replicas: 0, memoryMB: 256 } } });
    const create = async (group: string) => {
      const s = await Sandbox.create(template, { ...e2b(), metadata: { "label:ops": group }, timeoutMs: 600_000 });
      made.push(s);
      return s;
    };
    const [a, b, outside] = [await create(tag), await create(tag), await create("other")];
    for (const s of [a, b, outside]) {
      await s.files.write("/home/user/keep.txt", `kept by ${s.sandboxId}`);
      await s.commands.run("sleep 100001", { background: true });
    }
    const sleepers = async (s: Sandbox) => (await s.commands.run("pgrep -cf '^sleep 10000[1]' || true")).stdout.trim();
    expect(await sleepers(a)).toBe("1");
    expect(await b.pause()).toBe(true);

    await admin(`/admin/teams/admin/templates/${template}`, { method: "PUT", body: { spec: { replicas: 0, memoryMB: 384 } } });
    await admin("/admin/teams/admin/updateops", {
      body: { name: template, selector: { matchLabels: { ops: tag } }, updateStrategy: { maxUnavailable: 1 }, stateFilter: { states: ["Running", "Paused"] } },
    });
    const done = await waitFor(
      async () => {
        const s = await admin(`/admin/teams/admin/updateops/${template}`);
        return s.phase === "Completed" || s.phase === "Failed" ? s : undefined;
      },
      { what: "the run to finish", timeoutMs: 60_000, intervalMs: 200 },
    );
    expect(done, JSON.stringify(done)).toMatchObject({ phase: "Completed", replicas: 2, updatedReplicas: 2, failedReplicas: 0 });

    // The running one: same files, a new runtime (the old background process is gone).
    expect(await a.files.read("/home/user/keep.txt")).toBe(`kept by ${a.sandboxId}`);
    expect(await sleepers(a)).toBe("0");
    // The paused one is still paused; resumed, it runs the new version on its own files.
    expect((await Sandbox.getInfo(b.sandboxId, e2b())).state).toBe("paused");
    const resumed = await Sandbox.connect(b.sandboxId, e2b());
    expect(await resumed.files.read("/home/user/keep.txt")).toBe(`kept by ${b.sandboxId}`);
    expect(await sleepers(resumed)).toBe("0");
    // Outside the selector: untouched (its process still runs).
    expect(await sleepers(outside)).toBe("1");
  });

  it("preUpgrade (exec, the template's) and postUpgrade (HTTP to a sandbox port, the run's) hooks: a failing one fails its sandbox only, each leaves a condition and an event", async () => {
    const name = `${template}h`;
    const pre = "if [ -e /home/user/busy ]; then echo 'busy: a job is running' >&2; exit 3; fi; echo pre >> /home/user/hooks.log";
    const lifecycle = { preUpgrade: { exec: { command: ["sh", "-c", pre] }, timeoutSeconds: 20 } };
    await admin(`/admin/teams/admin/templates/${name}`, { method: "PUT", body: { spec: { replicas: 0, memoryMB: 256, lifecycle } } });
    const create = async () => {
      const s = await Sandbox.create(name, { ...e2b(), metadata: { "label:hooks": tag }, timeoutMs: 600_000 });
      made.push(s);
      await s.commands.run("sleep 100002", { background: true });
      return s;
    };
    const [ok, busy] = [await create(), await create()];
    await busy.files.write("/home/user/busy", "");
    const sleepers = async (s: Sandbox) => (await s.commands.run("pgrep -cf '^sleep 10000[2]' || true")).stdout.trim();

    await admin(`/admin/teams/admin/templates/${name}`, { method: "PUT", body: { spec: { replicas: 0, memoryMB: 384, lifecycle } } });
    await admin("/admin/teams/admin/updateops", {
      body: { name, selector: { matchLabels: { hooks: tag } }, updateStrategy: { maxUnavailable: 2 }, lifecycle: { postUpgrade: { http: { port: 49983, path: "/health" }, timeoutSeconds: 20 } } },
    });
    const first = await ended(name);
    expect(first, JSON.stringify(first)).toMatchObject({ phase: "Failed", replicas: 2, updatedReplicas: 1, failedReplicas: 1 });
    const line = (id: string, s = first) => s.sandboxes.find((l: { id: string }) => l.id === id);
    expect(line(busy.sandboxId)).toMatchObject({ status: "Failed", message: expect.stringContaining("preUpgrade hook failed: exit code 3") });
    expect(line(busy.sandboxId).message).toContain("busy: a job is running");
    const conditions = async (s: Sandbox) => (await admin(`/admin/sandboxes/${s.sandboxId}`)).conditions as { type: string; status: string; reason: string }[];
    // The upgraded one: its preUpgrade ran in the old runtime (its file kept), postUpgrade against the new one.
    expect((await ok.files.read("/home/user/hooks.log")).trim()).toBe("pre");
    expect(await sleepers(ok)).toBe("0");
    expect(await conditions(ok)).toEqual(expect.arrayContaining([
      expect.objectContaining({ type: "PreUpgradeHook", status: "True", reason: "Succeeded" }),
      expect.objectContaining({ type: "PostUpgradeHook", status: "True", reason: "Succeeded" }),
    ]));
    // The refused one was not upgraded: its process still runs.
    expect(await sleepers(busy)).toBe("1");
    expect(await conditions(busy)).toContainEqual(expect.objectContaining({ type: "PreUpgradeHook", status: "False", reason: "Failed" }));
    const events = first.events.map((e: { reason: string; type: string; sandboxId?: string }) => `${e.reason}/${e.type}/${e.sandboxId}`);
    expect(events).toEqual(expect.arrayContaining([`PreUpgradeHook/Normal/${ok.sandboxId}`, `PostUpgradeHook/Normal/${ok.sandboxId}`, `PreUpgradeHook/Warning/${busy.sandboxId}`]));

    // The local driver's sandboxes carry the same steps on their own event list (kube: Events on
    // the Sandbox): the upgraded one's hook runs and upgrade, the refused one's hook and failure.
    const stepsOf = async (s: Sandbox) => ((await admin(`/admin/sandboxes/${s.sandboxId}`)).events as { reason: string; type: string; source: string }[]).map((e) => `${e.reason}/${e.type}`);
    // The run sends them beside its own steps: wait until they have landed.
    const stepsReach = (s: Sandbox, want: string[]) =>
      waitFor(
        async () => {
          const steps = await stepsOf(s);
          expect(steps).toEqual(expect.arrayContaining(want));
          return steps;
        },
        { what: `${want.join(", ")} on ${s.sandboxId}'s events`, timeoutMs: 30_000, intervalMs: 200 },
      );
    await stepsReach(ok, ["UpgradeStarted/Normal", "PreUpgradeHook/Normal", "PostUpgradeHook/Normal", "UpgradeSucceeded/Normal"]);
    expect(await stepsReach(busy, ["UpgradeStarted/Normal", "PreUpgradeHook/Warning", "UpgradeFailed/Warning"])).not.toContain("UpgradeSucceeded/Normal");

    // The job done, resume retries it: its hook passes and the run completes.
    await busy.files.remove("/home/user/busy");
    await admin(`/admin/teams/admin/updateops/${name}/resume`, { body: {} });
    const second = await ended(name);
    expect(second, JSON.stringify(second)).toMatchObject({ phase: "Completed", updatedReplicas: 2, failedReplicas: 0 });
    expect(line(busy.sandboxId, second)).toMatchObject({ status: "Succeeded", attempt: 2 });
    expect(await sleepers(busy)).toBe("0");
    expect((await busy.files.read("/home/user/hooks.log")).trim()).toBe("pre");
  });
  it("a slow preUpgrade hook holds up only its own sandbox: the other is upgraded and the run's status answers while it runs", async () => {
    const name = `${template}s`;
    // Waits while /home/user/hold exists (the test removes it once it saw the other one upgraded).
    const pre = "while [ -e /home/user/hold ]; do sleep 0.2; done; echo pre >> /home/user/hooks.log";
    const lifecycle = { preUpgrade: { exec: { command: ["sh", "-c", pre] }, timeoutSeconds: 600 } };
    await admin(`/admin/teams/admin/templates/${name}`, { method: "PUT", body: { spec: { replicas: 0, memoryMB: 256, lifecycle } } });
    const create = async () => {
      const s = await Sandbox.create(name, { ...e2b(), metadata: { "label:slow": tag }, timeoutMs: 600_000 });
      made.push(s);
      return s;
    };
    const [slow, quick] = [await create(), await create()];
    await slow.files.write("/home/user/hold", "");
    await admin(`/admin/teams/admin/templates/${name}`, { method: "PUT", body: { spec: { replicas: 0, memoryMB: 384, lifecycle } } });
    await admin("/admin/teams/admin/updateops", { body: { name, selector: { matchLabels: { slow: tag } }, updateStrategy: { maxUnavailable: 2 } } });
    const line = (s: { sandboxes: { id: string }[] }, id: string) => s.sandboxes.find((l) => l.id === id) as { status: string; attempt: number } | undefined;
    // The quick one is upgraded while the slow one's hook still waits on its file.
    const mid = await waitFor(
      async () => {
        const s = await admin(`/admin/teams/admin/updateops/${name}`);
        return line(s, quick.sandboxId)?.status === "Succeeded" ? s : undefined;
      },
      { what: "the quick sandbox upgraded while the slow hook runs", timeoutMs: 90_000, intervalMs: 200 },
    );
    expect(mid).toMatchObject({ phase: "Updating", updatedReplicas: 1, updatingReplicas: 1 });
    expect(line(mid, slow.sandboxId)).toMatchObject({ status: "Updating", attempt: 1 });
    expect(await slow.files.exists("/home/user/hooks.log")).toBe(false);
    expect((await quick.files.read("/home/user/hooks.log")).trim()).toBe("pre");

    // The slow hook ends: its sandbox is upgraded too, its hook run once.
    await slow.files.remove("/home/user/hold");
    const done = await ended(name);
    expect(done, JSON.stringify(done)).toMatchObject({ phase: "Completed", updatedReplicas: 2, failedReplicas: 0 });
    expect(line(done, slow.sandboxId)).toMatchObject({ status: "Succeeded", attempt: 1 });
    expect((await slow.files.read("/home/user/hooks.log")).trim()).toBe("pre");
    const hooked = done.events.filter((e: { reason: string; sandboxId?: string }) => e.reason === "PreUpgradeHook" && e.sandboxId === slow.sandboxId);
    expect(hooked).toHaveLength(1);
  });
  it("CheckpointRestore: each sandbox's files are snapshotted before its recreate and restored from the snapshot, which is then deleted; its line says so, and that memory is not restored", async () => {
    const name = `${template}c`;
    await admin(`/admin/teams/admin/templates/${name}`, { method: "PUT", body: { spec: { replicas: 0, memoryMB: 256 } } });
    const create = async () => {
      const s = await Sandbox.create(name, { ...e2b(), metadata: { "label:ckpt": tag }, timeoutMs: 600_000 });
      made.push(s);
      await s.files.write("/home/user/keep.txt", `kept by ${s.sandboxId}`);
      await s.commands.run("sleep 100003", { background: true });
      return s;
    };
    const [running, paused] = [await create(), await create()];
    expect(await paused.pause()).toBe(true);
    await admin(`/admin/teams/admin/templates/${name}`, { method: "PUT", body: { spec: { replicas: 0, memoryMB: 384 } } });
    await admin("/admin/teams/admin/updateops", { body: { name, selector: { matchLabels: { ckpt: tag } }, updateStrategy: { type: "CheckpointRestore", maxUnavailable: 2 }, stateFilter: { states: ["Running", "Paused"] } } });
    const done = await ended(name);
    expect(done, JSON.stringify(done)).toMatchObject({ phase: "Completed", replicas: 2, updatedReplicas: 2, failedReplicas: 0 });
    for (const s of [running, paused]) {
      const line = done.sandboxes.find((l: { id: string }) => l.id === s.sandboxId);
      expect(line).toMatchObject({ status: "Succeeded", paused: s === paused, message: expect.stringMatching(/files restored from checkpoint snapshot .*memory not restored/) });
    }
    const taken = done.events.filter((e: { reason: string }) => e.reason === "CheckpointTaken").map((e: { sandboxId: string }) => e.sandboxId);
    expect(taken.sort()).toEqual([running.sandboxId, paused.sandboxId].sort());

    // Files kept, processes not (no memory checkpoint): the old sleep is gone.
    expect(await running.files.read("/home/user/keep.txt")).toBe(`kept by ${running.sandboxId}`);
    expect((await running.commands.run("pgrep -cf '^sleep 10000[3]' || true")).stdout.trim()).toBe("0");
    // The paused one stays paused; resumed, it has its files.
    expect((await admin(`/admin/sandboxes/${paused.sandboxId}`)).phase).toBe("Paused");
    const resumed = await Sandbox.connect(paused.sandboxId, e2b());
    expect(await resumed.files.read("/home/user/keep.txt")).toBe(`kept by ${paused.sandboxId}`);

    // Restored, each checkpoint is deleted: no snapshot of either sandbox is left.
    const deleted = await waitFor(async () => {
      const st = await admin(`/admin/teams/admin/updateops/${name}`);
      const ids = st.events.filter((e: { reason: string }) => e.reason === "CheckpointDeleted").map((e: { sandboxId: string }) => e.sandboxId);
      return ids.length === 2 ? ids : undefined;
    }, { what: "both checkpoints deleted" });
    expect(deleted.sort()).toEqual([running.sandboxId, paused.sandboxId].sort());
    for (const s of [running, paused]) {
      const snaps = Sandbox.listSnapshots({ ...e2b(), sandboxId: s.sandboxId });
      const ids: string[] = [];
      while (snaps.hasNext) ids.push(...(await snaps.nextItems()).map((x) => x.snapshotId));
      expect(ids).toEqual([]);
    }
  });

  it("Recreate runs the template's start command again, the new revision's, in the new processes; the ready command gates it again", async () => {
    const name = `${template}r`;
    const put = (v: string) =>
      admin(`/admin/teams/admin/templates/${name}`, { method: "PUT", body: { spec: { replicas: 0, memoryMB: 256, startCmd: `echo ${v} >> /home/user/starts; exec sleep 100004`, readyCmd: `grep -qx ${v} /home/user/starts` } } });
    await put("v1");
    const sbx = await Sandbox.create(name, { ...e2b(), metadata: { "label:ops": `${tag}r` }, timeoutMs: 600_000 });
    made.push(sbx);
    expect(await sbx.files.read("/home/user/starts")).toBe("v1\n");

    await put("v2");
    await admin("/admin/teams/admin/updateops", { body: { name, selector: { matchLabels: { ops: `${tag}r` } }, updateStrategy: { maxUnavailable: 1 } } });
    const done = await ended(name);
    expect(done, JSON.stringify(done)).toMatchObject({ phase: "Completed", updatedReplicas: 1, failedReplicas: 0 });
    // Upgraded only once its ready command passed: the v2 start command ran, once, after v1's.
    expect(await sbx.files.read("/home/user/starts")).toBe("v1\nv2\n");
    expect((await sbx.commands.run("pgrep -cf '^sleep 10000[4]' || true")).stdout.trim()).toBe("1");
  });
});
