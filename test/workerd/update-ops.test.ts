// Update ops runs through the admin API, with the scripted agent on the real agent link holding
// each upgrade until the test releases it: batches never exceed maxUnavailable (a failed sandbox
// counted), a failure fails that sandbox, resume retries it, a paused sandbox is upgraded and
// stays paused, a sandbox outside the selector is left alone, and each upgrade is sent once.
import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env, exports } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import type { Env } from "../../durable-objects/env.ts";
import type { SandboxGroupDO } from "../../durable-objects/sandbox/sandbox-group-do.ts";
import { openSandboxStore } from "../../durable-objects/sandbox/store.ts";
import { sandboxGroupStub } from "../../durable-objects/sandbox/stub.ts";
import { opsStub } from "../../durable-objects/ops/stub.ts";
import { OpsStore } from "../../durable-objects/ops/store.ts";
import type { Intent } from "../../schema/protocol/index.ts";
import { waitFor } from "../support/wait-for.ts";
import { call, createTeam, expectError, expectStatus, startAgent, unique } from "./helpers.ts";

describe("update ops through the admin API", () => {
  it("upgrades the selected sandboxes in batches of maxUnavailable, fails one alone, resumes it, keeps a paused one paused", async () => {
    const team = await createTeam(unique("ops"));
    const tplPath = `/admin/teams/${team.name}/templates/${team.template}`;
    let rev1 = "";
    const failing = new Set<string>();
    let holding = true;
    const isUpgrade = (i: Intent) => holding && i.owner.kind === "sandbox" && rev1 !== "" && i.template !== null && i.template.revision !== rev1;
    const agent = await startAgent(team.cluster, { hold: isUpgrade });
    /** The agent fails the held upgrade of `id` (a terminal error, as the real one reports it). */
    const fail = (id: string) => {
      agent.held.delete(id);
      agent.report({ sandboxId: id, generation: agent.sandboxes.get(id)!.generation, phase: "Failed", ready: false, reason: "ImagePullFailed", message: "the new image does not start", observedAt: Date.now() });
    };
    rev1 = (await expectStatus(call(tplPath), 200)).revision;
    const create = async (app: string) =>
      (await expectStatus(call("/sandboxes", { key: team.key, body: { templateID: team.template, timeout: 600, metadata: { "label:app": app } } }), 201)).sandboxID as string;
    const web: string[] = [];
    for (let i = 0; i < 5; i++) web.push(await create("web"));
    const other = await create("other");
    const paused = web[4]!;
    await expectStatus(call(`/sandboxes/${paused}/pause`, { key: team.key, body: {} }), 204);

    const rev2: string = (await expectStatus(call(tplPath, { method: "PUT", body: { spec: { cluster: team.cluster, image: "base-v2" } } }), 200)).revision;
    expect(rev2).not.toBe(rev1);
    const upgrades = (id: string) => agent.received.filter((r) => r.intent.sandboxId === id && r.intent.template?.revision === rev2).map((r) => r.intent);
    // The first running one in id order fails (the agent cannot start its new version).
    const failed = [...web].sort().find((id) => id !== paused)!;
    failing.add(failed);

    const opsPath = `/admin/teams/${team.name}/updateops/roll`;
    const body = { name: "roll", selector: { matchLabels: { app: "web" } }, updateStrategy: { maxUnavailable: "40%" }, stateFilter: { states: ["Running", "Paused"] } };
    const created = await expectStatus(call(`/admin/teams/${team.name}/updateops`, { body }), 201);
    expect(created).toMatchObject({ name: "roll", spec: { updateStrategy: { type: "Recreate", maxUnavailable: "40%" } } });
    const status = () => expectStatus(call(opsPath), 200);

    // 40% of 5 = 2 unavailable at most; the failed one holds a slot until the run is resumed.
    let maxHeld = 0;
    while (!["Completed", "Failed"].includes((await status()).phase)) {
      await waitFor(async () => agent.held.size > 0 || ["Completed", "Failed"].includes((await status()).phase), { what: "an upgrade in flight or the end" });
      const s = await status();
      maxHeld = Math.max(maxHeld, agent.held.size);
      expect(agent.held.size + s.failedReplicas).toBeLessThanOrEqual(2);
      expect(s.updatingReplicas + s.failedReplicas).toBeLessThanOrEqual(2);
      const next = [...agent.held.keys()][0];
      if (next) {
        const fails = failing.has(next);
        if (fails) fail(next);
        else agent.release(next);
        const want = fails ? "Failed" : "Succeeded";
        await waitFor(async () => (await status()).sandboxes.find((l: { id: string }) => l.id === next).status === want, { what: `${next} ${want}` });
      }
    }
    expect(maxHeld).toBeGreaterThanOrEqual(1);
    const failedRun = await status();
    expect(failedRun).toMatchObject({ phase: "Failed", replicas: 5, updatedReplicas: 4, failedReplicas: 1, updatingReplicas: 0 });
    expect(failedRun.conditions[0]).toMatchObject({ type: "Progressing", status: "False", reason: "SandboxesFailed" });
    expect(failedRun.sandboxes.find((l: { id: string }) => l.id === failed)).toMatchObject({ status: "Failed", message: expect.stringContaining("the new image does not start") });
    expect(failedRun.events.filter((e: { reason: string }) => e.reason === "UpgradeSucceeded")).toHaveLength(4);

    // Resume retries the failed sandbox with its next attempt.
    failing.clear();
    expect((await expectStatus(call(`${opsPath}/resume`, { method: "POST" }), 200)).phase).toBe("Updating");
    await waitFor(() => agent.held.has(failed), { what: "the retried upgrade" });
    agent.release(failed);
    await waitFor(async () => (await status()).phase === "Completed", { what: "the run to complete" });
    expect(await status()).toMatchObject({ replicas: 5, updatedReplicas: 5, failedReplicas: 0 });

    // Each sandbox got its new version once (the failed one twice: its retry), nothing else did.
    for (const id of web) expect(upgrades(id)).toHaveLength(id === failed ? 2 : 1);
    expect(upgrades(other)).toHaveLength(0);
    holding = false;
    // The paused one was upgraded paused and is still paused; resuming it runs the new version.
    expect(upgrades(paused)[0]!.desired.state).toBe("paused");
    expect((await expectStatus(call(`/sandboxes/${paused}`, { key: team.key }), 200)).state).toBe("paused");
    await expectStatus(call(`/sandboxes/${paused}/connect`, { key: team.key, body: { timeout: 300 } }), 201);
    expect(agent.sandboxes.get(paused)!.intent).toMatchObject({ desired: { state: "running" }, template: { revision: rev2 } });
    for (const id of web.filter((x) => x !== paused)) expect((await expectStatus(call(`/sandboxes/${id}`, { key: team.key }), 200)).state).toBe("running");
  }, 60_000);

  it("pauses between batches and carries on when unpaused; a second apply of the same run changes only what may change", async () => {
    const team = await createTeam(unique("ops-pause"));
    const tplPath = `/admin/teams/${team.name}/templates/${team.template}`;
    let rev1 = "";
    const agent = await startAgent(team.cluster, { hold: (i) => i.owner.kind === "sandbox" && rev1 !== "" && i.template?.revision !== rev1 });
    rev1 = (await expectStatus(call(tplPath), 200)).revision;
    for (let i = 0; i < 3; i++) await expectStatus(call("/sandboxes", { key: team.key, body: { templateID: team.template } }), 201);
    await expectStatus(call(tplPath, { method: "PUT", body: { spec: { cluster: team.cluster, image: "base-v3" } } }), 200);
    const opsPath = `/admin/teams/${team.name}/updateops/p`;
    await expectStatus(call(`/admin/teams/${team.name}/updateops`, { body: { name: "p", selector: {} } }), 201);
    await waitFor(() => agent.held.size === 1, { what: "the first upgrade" });
    expect((await expectStatus(call(opsPath, { method: "PATCH", body: { paused: true } }), 200)).spec.paused).toBe(true);
    agent.release([...agent.held.keys()][0]!);
    await waitFor(async () => (await expectStatus(call(opsPath), 200)).updatedReplicas === 1, { what: "the first upgrade done" });
    const pausedRun = await expectStatus(call(opsPath), 200);
    expect(pausedRun).toMatchObject({ phase: "Updating", updatingReplicas: 0, conditions: [{ reason: "Paused" }] });
    expect(agent.held.size).toBe(0);
    // kubectl apply again, unpaused and wider: the same run carries on.
    const again = await expectStatus(call(`/admin/teams/${team.name}/updateops`, { body: { name: "p", selector: {}, paused: false, updateStrategy: { maxUnavailable: 2 } } }), 200);
    expect(again.replicas).toBe(3);
    await waitFor(() => agent.held.size === 2, { what: "two upgrades at once" });
    for (const id of [...agent.held.keys()]) agent.release(id);
    await waitFor(async () => (await expectStatus(call(opsPath), 200)).phase === "Completed", { what: "completion" });
    // What may not change is refused.
    await expectError(call(`/admin/teams/${team.name}/updateops`, { body: { name: "p", selector: { matchLabels: { a: "b" } } } }), 409, /cannot change/);
    await expectStatus(call(opsPath, { method: "DELETE" }), 204);
    await expectError(call(opsPath), 404);
  });

  it("upgrades the sandboxes of a cluster whose agent runs the kubernetes driver (its driver recreates the pod)", async () => {
    const team = await createTeam(unique("ops-kube"));
    const agent = await startAgent(team.cluster, { driver: "kubernetes" });
    const tplPath = `/admin/teams/${team.name}/templates/${team.template}`;
    const id = (await expectStatus(call("/sandboxes", { key: team.key, body: { templateID: team.template } }), 201)).sandboxID;
    const rev2 = (await expectStatus(call(tplPath, { method: "PUT", body: { spec: { cluster: team.cluster, image: "base-k" } } }), 200)).revision;
    await expectStatus(call(`/admin/teams/${team.name}/updateops`, { body: { name: "k", selector: {} } }), 201);
    const done = await waitFor(async () => {
      const s = await expectStatus(call(`/admin/teams/${team.name}/updateops/k`), 200);
      return s.phase === "Completed" ? s : undefined;
    }, { what: "the run to answer" });
    expect(done).toMatchObject({ replicas: 1, updatedReplicas: 1 });
    expect(done.events.map((e: { reason: string }) => e.reason)).not.toContain("RecreateNotSupported");
    expect(agent.received.filter((r) => r.intent.sandboxId === id && r.intent.template?.revision === rev2)).toHaveLength(1);
  });

  it("CheckpointRestore: each sandbox is snapshotted before its upgrade is sent, which names the snapshot to restore; one whose snapshot fails fails alone; the lines say memory is not restored; restored, the snapshots are deleted", async () => {
    const team = await createTeam(unique("ops-cr"));
    const tplPath = `/admin/teams/${team.name}/templates/${team.template}`;
    const rev1: string = (await expectStatus(call(tplPath), 200)).revision;
    const ids: string[] = [];
    let noSnapshot = "";
    const agent = await startAgent(team.cluster, { failSnapshot: (i) => (i.sandboxId === noSnapshot ? { reason: "SnapshotFailed", message: "the disk is busy" } : undefined) });
    for (let i = 0; i < 3; i++) ids.push((await expectStatus(call("/sandboxes", { key: team.key, body: { templateID: team.template, timeout: 600 } }), 201)).sandboxID);
    noSnapshot = [...ids].sort()[1]!;
    const rev2: string = (await expectStatus(call(tplPath, { method: "PUT", body: { spec: { cluster: team.cluster, image: "base-v2" } } }), 200)).revision;
    expect(rev2).not.toBe(rev1);
    await expectStatus(call(`/admin/teams/${team.name}/updateops`, { body: { name: "cr", selector: {}, updateStrategy: { type: "CheckpointRestore", maxUnavailable: 3 } } }), 201);
    const s = await waitFor(async () => {
      const st = await expectStatus(call(`/admin/teams/${team.name}/updateops/cr`), 200);
      return ["Completed", "Failed"].includes(st.phase) ? st : undefined;
    }, { what: "the run to end", timeoutMs: 60_000 });
    expect(s).toMatchObject({ phase: "Failed", replicas: 3, updatedReplicas: 2, failedReplicas: 1 });
    for (const id of ids) {
      const line = s.sandboxes.find((l: { id: string }) => l.id === id);
      if (id === noSnapshot) expect(line).toMatchObject({ status: "Failed", message: expect.stringContaining("checkpoint failed") });
      else expect(line).toMatchObject({ status: "Succeeded", message: expect.stringContaining("memory not restored") });
      // The agent got the snapshot first, then (if it was taken) the new template.
      const got = agent.received.map((r) => r.intent).filter((i) => i.sandboxId === id);
      const snap = got.findIndex((i) => i.snapshot !== undefined);
      const upgrade = got.findIndex((i) => i.template?.revision === rev2);
      expect(snap).toBeGreaterThanOrEqual(0);
      if (id === noSnapshot) expect(upgrade).toBe(-1);
      else {
        expect(upgrade).toBeGreaterThan(snap);
        // The upgrade names the member's snapshot for the agent to restore its files from.
        expect(got[upgrade]!.restoreFs).toEqual({ id: got[snap]!.snapshot!.id });
      }
    }
    expect(s.events.filter((e: { reason: string }) => e.reason === "CheckpointTaken")).toHaveLength(2);
    // Restored, each snapshot is deleted: the team has none left.
    await waitFor(async () => ((await expectStatus(call("/snapshots", { key: team.key }), 200)) as unknown[]).length === 0 || undefined, { what: "the run's snapshots to be deleted" });
    const after = await expectStatus(call(`/admin/teams/${team.name}/updateops/cr`), 200);
    expect(after.events.filter((e: { reason: string }) => e.reason === "CheckpointDeleted").map((e: { sandboxId: string }) => e.sandboxId).sort()).toEqual(ids.filter((x) => x !== noSnapshot).sort());
    // The new template is in the group's storage, not only in memory: a restarted group object
    // keeps sending it (before, the spec row was written at create only).
    for (const id of ids.filter((x) => x !== noSnapshot)) {
      const stored = await runInDurableObject(sandboxGroupStub(env as unknown as Env, id), (_i: SandboxGroupDO, state) => openSandboxStore(state.storage.sql).load(id)!.state.spec.template.revision);
      expect(stored).toBe(rev2);
    }
    agent.disconnect();
  });

  it("CheckpointRestore: deleting the run while a sandbox is mid-upgrade keeps the snapshot its upgrade restores from, and frees it once that upgrade is done", async () => {
    const team = await createTeam(unique("ops-crdel"));
    const tplPath = `/admin/teams/${team.name}/templates/${team.template}`;
    const agent = await startAgent(team.cluster, { hold: (i) => i.owner.kind === "sandbox" && i.restoreFs !== undefined });
    await expectStatus(call("/sandboxes", { key: team.key, body: { templateID: team.template, timeout: 600 } }), 201);
    await expectStatus(call(tplPath, { method: "PUT", body: { spec: { cluster: team.cluster, image: "base-v2" } } }), 200);
    const opsPath = `/admin/teams/${team.name}/updateops/crdel`;
    await expectStatus(call(`/admin/teams/${team.name}/updateops`, { body: { name: "crdel", selector: {}, updateStrategy: { type: "CheckpointRestore" } } }), 201);
    await waitFor(() => agent.held.size === 1, { what: "the upgrade naming its snapshot" });
    const id = [...agent.held.keys()][0]!;
    const restoring = agent.received.map((r) => r.intent).find((i) => i.sandboxId === id && i.restoreFs)!.restoreFs!.id;
    await expectStatus(call(opsPath, { method: "DELETE" }), 204);
    // The upgrade under way still needs its snapshot: it is not deleted with the run.
    const listed = async () => ((await expectStatus(call("/snapshots", { key: team.key }), 200)) as { snapshotID: string }[]).map((x) => x.snapshotID.split(":")[0]);
    expect(await listed()).toContain(restoring);
    // The upgrade ends: nothing needs the snapshot any more, and it goes without the run.
    agent.release(id);
    await waitFor(async () => !(await listed()).includes(restoring), { what: "the left snapshot freed after its upgrade" });
    agent.disconnect();
  });

  it("CheckpointRestore then Recreate of a paused sandbox whose restore waits for its resume: the Recreate carries the pending restore forward, the snapshot is kept (not deleted while the restore still names it), and freed once the resume has restored it", async () => {
    const team = await createTeam(unique("ops-carry"));
    const tplPath = `/admin/teams/${team.name}/templates/${team.template}`;
    // The agent plays the Kubernetes driver's Stop pause: a recreate naming a snapshot while paused
    // leaves the restore pending (reported RestorePending) until a running intent's pod names it.
    const pending = new Map<string, string>();
    const agent = await startAgent(team.cluster, {
      reason: (i) => {
        if (i.restoreFs && i.desired.state === "paused") pending.set(i.sandboxId, i.restoreFs.id);
        if (i.desired.state === "running") pending.delete(i.sandboxId);
        return pending.has(i.sandboxId) ? "RestorePending" : undefined;
      },
    });
    const id: string = (await expectStatus(call("/sandboxes", { key: team.key, body: { templateID: team.template, timeout: 600 } }), 201)).sandboxID;
    await expectStatus(call(`/sandboxes/${id}/pause`, { key: team.key, body: {} }), 204);
    const teamId = (await sandboxGroupStub(env as unknown as Env, id).inspect(id))!.spec.teamId;
    const listed = async () => ((await expectStatus(call("/snapshots", { key: team.key }), 200)) as { snapshotID: string }[]).map((x) => x.snapshotID.split(":")[0]);
    const ended = (name: string) =>
      waitFor(async () => {
        const st = await expectStatus(call(`/admin/teams/${team.name}/updateops/${name}`), 200);
        return ["Completed", "Failed"].includes(st.phase) ? st : undefined;
      }, { what: `run ${name} to end`, timeoutMs: 60_000 });

    await expectStatus(call(tplPath, { method: "PUT", body: { spec: { cluster: team.cluster, image: "base-v2" } } }), 200);
    await expectStatus(call(`/admin/teams/${team.name}/updateops`, { body: { name: "ck", selector: {}, stateFilter: { states: ["Paused"] }, updateStrategy: { type: "CheckpointRestore" } } }), 201);
    expect(await ended("ck")).toMatchObject({ phase: "Completed", updatedReplicas: 1, sandboxes: [{ id, status: "Succeeded", message: expect.stringContaining("when it resumes") }] });
    const snap = pending.get(id)!;
    expect(await listed()).toContain(snap);

    // A Recreate run of a newer revision while it is still paused, the restore still pending.
    const rev3: string = (await expectStatus(call(tplPath, { method: "PUT", body: { spec: { cluster: team.cluster, image: "base-v3" } } }), 200)).revision;
    await expectStatus(call(`/admin/teams/${team.name}/updateops`, { body: { name: "re", selector: {}, stateFilter: { states: ["Paused"] } } }), 201);
    const re = await ended("re");
    expect(re).toMatchObject({ phase: "Completed", updatedReplicas: 1, sandboxes: [{ id, status: "Succeeded", message: expect.stringContaining(`pending restore of checkpoint snapshot ${snap} is carried forward`) }] });
    // Its upgrade still names the snapshot: the driver's pending mark keeps naming it.
    expect(agent.received.map((r) => r.intent).find((i) => i.sandboxId === id && i.template?.revision === rev3)).toMatchObject({ desired: { state: "paused" }, restoreFs: { id: snap } });
    expect(pending.get(id)).toBe(snap);
    // The run holding the snapshot looks at it now (made due, its alarm run): still needed, kept.
    const holder = opsStub(env as unknown as Env, teamId, "ck");
    await runInDurableObject(holder, (_i, state) => {
      const store = new OpsStore(state.storage.sql);
      for (const l of store.leftSnapshots()) store.leaveSnapshot({ ...l, nextAt: 0 });
    });
    await runDurableObjectAlarm(holder);
    expect(await listed()).toContain(snap);
    const held = await runInDurableObject(holder, (_i, state) => new OpsStore(state.storage.sql).leftSnapshots().map((l) => l.upgrade.restoreFs));
    expect(held).toEqual([snap]);

    // Resumed: the running intent's pod restores it; the group wakes the holder, which frees it
    // at once (its next look of its own is put an hour off: only the wake-up can free it in time).
    await runInDurableObject(holder, (_i, state) => {
      const store = new OpsStore(state.storage.sql);
      for (const l of store.leftSnapshots()) store.leaveSnapshot({ ...l, nextAt: Date.now() + 3_600_000 });
    });
    await expectStatus(call(`/sandboxes/${id}/connect`, { key: team.key, body: { timeout: 300 } }), 201);
    expect(agent.sandboxes.get(id)!.intent).toMatchObject({ desired: { state: "running" }, template: { revision: rev3 } });
    await waitFor(async () => !(await listed()).includes(snap), { what: "the snapshot freed after the restore" });
    agent.disconnect();
  });

  it("each step a run takes on a sandbox is on that sandbox's own event list (GET /admin/sandboxes/{id}) and its console timeline, as Kubernetes Events are on its Sandbox", async () => {
    const team = await createTeam(unique("ops-ev"));
    const tplPath = `/admin/teams/${team.name}/templates/${team.template}`;
    let bad = "";
    let rev2 = "";
    const agent = await startAgent(team.cluster, { reject: (i) => (i.sandboxId === bad && rev2 !== "" && i.template?.revision === rev2 ? "the new image does not start" : undefined) });
    const good: string = (await expectStatus(call("/sandboxes", { key: team.key, body: { templateID: team.template, timeout: 600 } }), 201)).sandboxID;
    bad = (await expectStatus(call("/sandboxes", { key: team.key, body: { templateID: team.template, timeout: 600 } }), 201)).sandboxID;
    rev2 = (await expectStatus(call(tplPath, { method: "PUT", body: { spec: { cluster: team.cluster, image: "base-v2" } } }), 200)).revision;
    await expectStatus(call(`/admin/teams/${team.name}/updateops`, { body: { name: "ev", selector: {}, updateStrategy: { type: "CheckpointRestore", maxUnavailable: 2 } } }), 201);
    await waitFor(async () => (await expectStatus(call(`/admin/teams/${team.name}/updateops/ev`), 200)).phase === "Failed" || undefined, { what: "the run to end", timeoutMs: 60_000 });
    type Note = { at: string; type: string; reason: string; message: string; source: string };
    const events = async (id: string) => (await expectStatus(call(`/admin/sandboxes/${id}`), 200)).events as Note[];
    // The upgraded one: started, its checkpoint taken, upgraded, the checkpoint deleted once restored.
    const ok = await waitFor(async () => {
      const e = await events(good);
      return e.some((x) => x.reason === "CheckpointDeleted") ? e : undefined;
    }, { what: "the good sandbox's steps" });
    expect(ok.map((e) => e.reason)).toEqual(["UpgradeStarted", "CheckpointTaken", "UpgradeSucceeded", "CheckpointDeleted"]);
    for (const e of ok) expect(e).toMatchObject({ type: "Normal", source: "SandboxUpdateOps ev", at: expect.stringMatching(/^\d{4}-\d\d-\d\dT/) });
    expect(ok.find((e) => e.reason === "UpgradeSucceeded")!.message).toContain(rev2);
    // The failed one: its failure, as a Warning with the agent's message, on its own list only.
    const failed = await waitFor(async () => {
      const e = await events(bad);
      return e.some((x) => x.reason === "UpgradeFailed") ? e : undefined;
    }, { what: "the bad sandbox's failure" });
    expect(failed.find((e) => e.reason === "UpgradeFailed")).toMatchObject({ type: "Warning", message: expect.stringContaining("the new image does not start") });
    expect(failed.some((e) => e.reason === "UpgradeSucceeded")).toBe(false);
    expect(ok.some((e) => e.reason === "UpgradeFailed")).toBe(false);
    // The console's timeline of the sandbox lists the same steps.
    const login = await exports.default.fetch("http://edge.test/console/login", { method: "POST", headers: { "content-type": "application/x-www-form-urlencoded" }, body: new URLSearchParams({ key: team.key }).toString(), redirect: "manual" });
    const cookie = (login.headers.get("set-cookie") ?? "").split(";")[0]!;
    const timeline = await (await exports.default.fetch(`http://edge.test/console/sandboxes/${good}`, { headers: { cookie }, redirect: "manual" })).text();
    for (const reason of ["UpgradeStarted", "CheckpointTaken", "UpgradeSucceeded", "CheckpointDeleted"]) expect(timeline).toContain(`[SandboxUpdateOps ev] ${reason}`);
    agent.disconnect();
  });

  it("two runs selecting one sandbox with different targets do not take turns: the second finds it held by the first's upgrade under way, skips it with a line naming that run, and sends nothing; the first completes it", async () => {
    const team = await createTeam(unique("ops-two"));
    const tplPath = `/admin/teams/${team.name}/templates/${team.template}`;
    const rev1: string = (await expectStatus(call(tplPath), 200)).revision;
    const agent = await startAgent(team.cluster, { hold: (i) => i.owner.kind === "sandbox" && i.template !== null && i.template.revision !== rev1 });
    const id: string = (await expectStatus(call("/sandboxes", { key: team.key, body: { templateID: team.template, timeout: 600 } }), 201)).sandboxID;
    const put = async (image: string) => (await expectStatus(call(tplPath, { method: "PUT", body: { spec: { cluster: team.cluster, image } } }), 200)).revision as string;
    const run = (name: string) => expectStatus(call(`/admin/teams/${team.name}/updateops`, { body: { name, selector: {} } }), 201);
    const status = (name: string) => expectStatus(call(`/admin/teams/${team.name}/updateops/${name}`), 200);
    const sent = (rev: string) => agent.received.filter((r) => r.intent.sandboxId === id && r.intent.template?.revision === rev).length;

    const rev2 = await put("base-v2");
    await run("first");
    await agent.waitUntil(() => agent.held.has(id));
    const rev3 = await put("base-v3");
    await run("second");
    const second = await waitFor(async () => {
      const s = await status("second");
      return s.phase === "Completed" ? s : undefined;
    }, { what: "the second run to end" });
    expect(second).toMatchObject({ replicas: 1, updatedReplicas: 0, failedReplicas: 0 });
    expect(second.sandboxes).toEqual([expect.objectContaining({ id, status: "Skipped", message: 'left alone: SandboxUpdateOps "first" holds it (its upgrade of it is under way)' })]);
    expect(second.conditions[0].message).toContain("1 skipped (held by another run)");
    // The second run's upgrade never reached the agent; the first's was sent once and is not re-sent.
    expect(sent(rev3)).toBe(0);
    expect(sent(rev2)).toBe(1);
    // The sandbox's own event list says why the second run left it.
    await waitFor(async () => ((await expectStatus(call(`/admin/sandboxes/${id}`), 200)).events as { reason: string; source: string }[]).some((e) => e.reason === "SandboxHeld" && e.source === "SandboxUpdateOps second"), { what: "SandboxHeld on the sandbox" });

    agent.release(id);
    const first = await waitFor(async () => {
      const s = await status("first");
      return s.phase === "Completed" ? s : undefined;
    }, { what: "the first run to end" });
    expect(first.sandboxes).toEqual([expect.objectContaining({ id, status: "Succeeded" })]);
    expect(sent(rev2)).toBe(1);
    expect(sent(rev3)).toBe(0);
    agent.disconnect();
  });

  it("refuses bad input with 4xx", async () => {
    const team = await createTeam(unique("ops-bad"));
    await expectError(call(`/admin/teams/${team.name}/updateops`, { body: { name: "x" } }), 400, /selector/);
    await expectError(call(`/admin/teams/${team.name}/updateops`, { body: { name: "Bad_Name", selector: {} } }), 400, /DNS-1123/);
    await expectError(call(`/admin/teams/${team.name}/updateops`, { body: { name: "x", selector: {}, updateStrategy: { maxUnavailable: "lots" } } }), 400);
    await expectError(call(`/admin/teams/${team.name}/updateops`, { body: { name: "x", selector: {}, patch: {} } }), 400);
    await expectError(call(`/admin/teams/no-such-team/updateops`, { body: { name: "x", selector: {} } }), 404);
    await expectError(call(`/admin/teams/${team.name}/updateops/none`), 404);
    await expectError(call(`/admin/teams/${team.name}/updateops`, { key: team.key, body: { name: "x", selector: {} } }), 403);
  });
});
