// Team quotas (issue 10.4) through the real create route: TeamQuotaDO reserves before the pool
// claim, the sandbox groups release on kill/pause and re-reserve on resume, and the quota fails
// closed when its rows cannot be read or written.
import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env, exports } from "cloudflare:workers";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import type { TeamQuotaDO } from "../../durable-objects/quota/team-quota-do.ts";
import { openQuotaStore } from "../../durable-objects/quota/store.ts";
import type { SandboxGroupDO } from "../../durable-objects/sandbox/sandbox-group-do.ts";
import { sandboxGroupStub } from "../../durable-objects/sandbox/stub.ts";
import type { Env } from "../../durable-objects/env.ts";
import type { ScriptedAgent, ScriptedAgentOptions } from "../support/scripted-agent.ts";
import { call, createTeam, expectError, expectStatus, secondKey, startAgent, unique, type TestTeam } from "./helpers.ts";

const agents: ScriptedAgent[] = [];
afterAll(() => agents.forEach((a) => a.disconnect()));

/** A team on its own cluster with a scripted agent, and its quota set through the admin API. */
async function quotaTeam(quota: Record<string, number>, spec: Record<string, unknown> = {}, agent: ScriptedAgentOptions = {}): Promise<TestTeam & { teamId: string }> {
  const team = await createTeam(unique("quota"), { spec });
  agents.push(await startAgent(team.cluster, agent));
  await expectStatus(call(`/admin/teams/${team.name}/quota`, { method: "PUT", body: quota }), 200);
  const teamId = (await expectStatus(call("/teams", { key: team.key }), 200))[0].teamID as string;
  return { ...team, teamId };
}

const create = (team: TestTeam, key = team.key) => call("/v2/sandboxes", { key, body: { templateID: team.template, timeout: 300 } });
const quotaOf = (teamId: string) => env.TEAM_QUOTA.get(env.TEAM_QUOTA.idFromName(teamId));

async function usage(team: TestTeam) {
  return (await expectStatus(call(`/admin/teams/${team.name}/quota`), 200)).usage;
}

describe("team quota", () => {
  it("100 concurrent creates from two keys against a quota of 10 running sandboxes give exactly 10; the rest are 429 naming the limit", async () => {
    const team = await quotaTeam({ runningSandboxes: 10 });
    const other = await secondKey(team);
    const responses = await Promise.all(Array.from({ length: 100 }, (_, i) => create(team, i % 2 ? other : team.key)));
    const statuses = responses.map((r) => r.status);
    expect(statuses.filter((s) => s === 201)).toHaveLength(10);
    expect(statuses.filter((s) => s === 429)).toHaveLength(90);
    const refused = responses.find((r) => r.status === 429)!;
    expect(await refused.json()).toEqual({ code: 429, message: `team "${team.name}" has 10 of 10 running sandboxes (quota runningSandboxes)` });
    await Promise.all(responses.filter((r) => r !== refused).map((r) => r.body?.cancel()));
    expect(await usage(team)).toMatchObject({ runningSandboxes: 10 });
    const listed = await expectStatus(call("/v2/sandboxes", { key: team.key }), 200);
    expect(listed).toHaveLength(10);
  });

  it("a kill or a pause frees the slot; a resume reserves again and is refused with 429 when the team is full", async () => {
    const team = await quotaTeam({ runningSandboxes: 2 });
    const a = await expectStatus(create(team), 201);
    const b = await expectStatus(create(team), 201);
    await expectError(create(team), 429, /has 2 of 2 running sandboxes/);
    // A kill or a pause has freed its slot by the time it is answered, even when the quota's
    // writes are slow.
    const undo = await Promise.all([a.sandboxID, b.sandboxID].map((id) => slowQuotaCalls(id, 300)));
    await expectStatus(call(`/sandboxes/${a.sandboxID}`, { key: team.key, method: "DELETE" }), 204);
    const c = await expectStatus(create(team), 201);
    await expectStatus(call(`/sandboxes/${b.sandboxID}/pause`, { key: team.key, body: {} }), 204);
    await expectStatus(create(team), 201);
    await Promise.all(undo.map((u) => u()));
    // Full again: the paused one cannot come back until a slot frees.
    await expectError(call(`/v2/sandboxes/${b.sandboxID}/connect`, { key: team.key, body: { timeout: 60 } }), 429, /quota runningSandboxes/);
    expect((await expectStatus(call(`/sandboxes/${b.sandboxID}`, { key: team.key }), 200)).state).toBe("paused");
    await expectStatus(call(`/sandboxes/${c.sandboxID}`, { key: team.key, method: "DELETE" }), 204);
    await expectStatus(call(`/v2/sandboxes/${b.sandboxID}/connect`, { key: team.key, body: { timeout: 60 } }), 201);
    expect(await usage(team)).toMatchObject({ runningSandboxes: 2 });
  });

  it("counts vCPUs and memory of running sandboxes", async () => {
    const cpu = await quotaTeam({ vcpus: 5 }, { cpuCount: 2 });
    await expectStatus(create(cpu), 201);
    await expectStatus(create(cpu), 201);
    await expectError(create(cpu), 429, `team "${cpu.name}" has 4 of 5 vCPUs in running sandboxes (quota vcpus)`);
    const mem = await quotaTeam({ memoryMB: 1024 }, { memoryMB: 512 });
    await expectStatus(create(mem), 201);
    await expectStatus(create(mem), 201);
    await expectError(create(mem), 429, /has 1024 of 1024 MB of memory in running and Freeze-paused sandboxes \(quota memoryMB\)/);
    expect(await usage(mem)).toMatchObject({ runningSandboxes: 2, vcpus: 2, memoryMB: 1024 });
  });

  it("an in-place cpu-limit counts its ceiling in whole vCPUs: 1.999 is 2, not 1 (review 25 L1)", async () => {
    const team = await quotaTeam({ vcpus: 3 }, { cpuCount: 1 });
    const inplace = (limit: string) => call("/v2/sandboxes", { key: team.key, body: { templateID: team.template, timeout: 300, metadata: { "e2b.agents.kruise.io/cpu-limit": limit } } });
    const a = await expectStatus(inplace("1.999"), 201);
    expect((await expectStatus(call(`/sandboxes/${a.sandboxID}`, { key: team.key }), 200)).cpuCount).toBe(2);
    expect(await usage(team)).toMatchObject({ vcpus: 2 });
    await expectError(inplace("1.001"), 429, `team "${team.name}" has 2 of 3 vCPUs in running sandboxes (quota vcpus)`);
    await expectStatus(inplace("0.5"), 201);
    expect(await usage(team)).toMatchObject({ vcpus: 3 });
  });

  it("an in-place cpu-limit on a SandboxSet's template of several containers is charged the whole pod: only the main container is resized (review 26 M3)", async () => {
    // app 1 core + sidecar 2 cores, as the CRD sync sends it (restCpu: the sidecar's share).
    const team = await quotaTeam({ vcpus: 7 }, { cpuCount: 3, restCpu: 2, initCpu: 0, sourceRevision: "r1" });
    const inplace = (limit: string) => call("/v2/sandboxes", { key: team.key, body: { templateID: team.template, timeout: 300, metadata: { "e2b.agents.kruise.io/cpu-limit": limit } } });
    const a = await expectStatus(inplace("1"), 201);
    expect((await expectStatus(call(`/sandboxes/${a.sandboxID}`, { key: team.key }), 200)).cpuCount).toBe(3);
    expect(await usage(team)).toMatchObject({ vcpus: 3 });
    await expectStatus(inplace("0.5"), 201);
    expect(await usage(team)).toMatchObject({ vcpus: 6 });
    await expectError(inplace("0.1"), 429, `team "${team.name}" has 6 of 7 vCPUs in running sandboxes (quota vcpus)`);
    // A SandboxSet an older agent sent (no restCpu): the rest of the pod is unknown, taken as all of it.
    const old = await quotaTeam({ vcpus: 10 }, { cpuCount: 3, sourceRevision: "r1" });
    const b = await expectStatus(call("/v2/sandboxes", { key: old.key, body: { templateID: old.template, timeout: 300, metadata: { "e2b.agents.kruise.io/cpu-limit": "1" } } }), 201);
    expect((await expectStatus(call(`/sandboxes/${b.sandboxID}`, { key: old.key }), 200)).cpuCount).toBe(4);
  });

  it("an in-place cpu-limit on a SandboxSet with an init container is charged the larger of its peak and the running pod, never both (review 27 final M2)", async () => {
    // One container + an init container stating no CPU (buildPod gives it the count, 1): at
    // cpu-limit 2 the pod holds max(1, 2) = 2.
    const team = await quotaTeam({ vcpus: 4 }, { cpuCount: 1, restCpu: 0, initCpu: 1, sourceRevision: "r1" });
    const inplace = (t: TestTeam, limit: string) => call("/v2/sandboxes", { key: t.key, body: { templateID: t.template, timeout: 300, metadata: { "e2b.agents.kruise.io/cpu-limit": limit } } });
    const a = await expectStatus(inplace(team, "2"), 201);
    expect((await expectStatus(call(`/sandboxes/${a.sandboxID}`, { key: team.key }), 200)).cpuCount).toBe(2);
    await expectStatus(inplace(team, "2"), 201);
    expect(await usage(team)).toMatchObject({ vcpus: 4 });
    // App 4 + such an init container at cpu-limit 2: the init container's 4, as without in-place.
    const big = await quotaTeam({ vcpus: 4 }, { cpuCount: 4, restCpu: 0, initCpu: 4, sourceRevision: "r1" });
    const b = await expectStatus(inplace(big, "2"), 201);
    expect((await expectStatus(call(`/sandboxes/${b.sandboxID}`, { key: big.key }), 200)).cpuCount).toBe(4);
  });

  it("a Freeze-paused sandbox keeps its memory counted (not its vCPUs nor a running slot) until it is killed; a Stop-paused one no memory (a paused slot only); a resume does not count it twice", async () => {
    const team = await quotaTeam({ memoryMB: 1024 }, { memoryMB: 512 });
    const a = await expectStatus(create(team), 201);
    const b = await expectStatus(create(team), 201);
    for (const s of [a, b]) await expectStatus(call(`/sandboxes/${s.sandboxID}/pause`, { key: team.key, body: {} }), 204);
    // Frozen: the host still holds their memory, so the team cannot create past it.
    await expectError(create(team), 429, `team "${team.name}" has 1024 of 1024 MB of memory in running and Freeze-paused sandboxes (quota memoryMB)`);
    expect(await usage(team)).toMatchObject({ runningSandboxes: 0, vcpus: 0, memoryMB: 1024 });
    // A resume asks only for what it adds (a running slot, its vCPUs): its memory is counted once.
    await expectStatus(call(`/v2/sandboxes/${a.sandboxID}/connect`, { key: team.key, body: { timeout: 60 } }), 201);
    expect(await usage(team)).toMatchObject({ runningSandboxes: 1, vcpus: 1, memoryMB: 1024 });
    // A Stop pause keeps nothing on the host; a kill of a frozen one frees its memory.
    await expectStatus(call(`/sandboxes/${a.sandboxID}/pause`, { key: team.key, body: { memory: false } }), 204);
    expect(await usage(team)).toMatchObject({ runningSandboxes: 0, memoryMB: 512 });
    await expectStatus(call(`/sandboxes/${b.sandboxID}`, { key: team.key, method: "DELETE" }), 204);
    expect(await usage(team)).toMatchObject({ memoryMB: 0 });
    await expectStatus(create(team), 201);
  });

  it("concurrent creates against memory held by frozen sandboxes are counted exactly", async () => {
    const team = await quotaTeam({ memoryMB: 2048 }, { memoryMB: 512 });
    const held = await Promise.all([create(team), create(team)].map((r) => expectStatus(r, 201)));
    await Promise.all(held.map((s) => expectStatus(call(`/sandboxes/${s.sandboxID}/pause`, { key: team.key, body: {} }), 204)));
    const statuses = (await Promise.all(Array.from({ length: 12 }, () => create(team)))).map((r) => (void r.body?.cancel(), r.status));
    expect(statuses.filter((s) => s === 201)).toHaveLength(2);
    expect(statuses.filter((s) => s === 429)).toHaveLength(10);
    expect(await usage(team)).toMatchObject({ runningSandboxes: 2, memoryMB: 2048 });
  });

  it("limits creates per minute, killed sandboxes included", async () => {
    const team = await quotaTeam({ createsPerMinute: 3 });
    for (let i = 0; i < 3; i++) {
      const s = await expectStatus(create(team), 201);
      await expectStatus(call(`/sandboxes/${s.sandboxID}`, { key: team.key, method: "DELETE" }), 204);
    }
    await expectError(create(team), 429, /has 3 of 3 sandbox creates in the last minute \(quota createsPerMinute\)/);
  });

  it("shows limits (the team's own over the defaults) and refuses a bad quota with 400", async () => {
    const team = await quotaTeam({ runningSandboxes: 7 });
    const q = await expectStatus(call(`/admin/teams/${team.name}/quota`), 200);
    expect(q).toMatchObject({ team: team.name, overrides: { runningSandboxes: 7 }, limits: { runningSandboxes: 7, vcpus: 400, memoryMB: 409600, createsPerMinute: 600 } });
    await expectError(call(`/admin/teams/${team.name}/quota`, { method: "PUT", body: { runningSandboxes: -1 } }), 400);
    await expectError(call(`/admin/teams/${team.name}/quota`, { method: "PUT", body: { sandboxes: 1 } }), 400);
    await expectError(call(`/admin/teams/${team.name}/quota`, { key: team.key, method: "PUT", body: { runningSandboxes: 1000 } }), 403);
    await expectError(call("/admin/teams/no-such-team-q/quota"), 404);
  });

  it("counts the sandboxes that were running before the team's quota object counted anything", async () => {
    const team = await quotaTeam({ runningSandboxes: 2 });
    await expectStatus(create(team), 201);
    await expectStatus(create(team), 201);
    // As a deployment that predates quotas: the object has no reservations and has taken no census.
    await runInDurableObject(quotaOf(team.teamId), (instance: TeamQuotaDO, state) => {
      state.storage.sql.exec("DELETE FROM reservations; DELETE FROM census");
      Object.assign(instance as object, { ledger: null, census: false });
    });
    await expectError(create(team), 429, /has 2 of 2 running sandboxes/);
    expect(await usage(team)).toMatchObject({ runningSandboxes: 2 });
  });

  it("counts paused sandboxes from before frozen memory counted as frozen, until the reconcile asks their group (a Stop-paused one then holds no memory)", async () => {
    const team = await quotaTeam({ memoryMB: 1024 }, { memoryMB: 512 });
    const a = await expectStatus(create(team), 201);
    const b = await expectStatus(create(team), 201);
    await expectStatus(call(`/sandboxes/${a.sandboxID}/pause`, { key: team.key, body: {} }), 204);
    await expectStatus(call(`/sandboxes/${b.sandboxID}/pause`, { key: team.key, body: { memory: false } }), 204);
    await waitFor(async () => (await expectStatus(call("/v2/sandboxes?state=paused", { key: team.key }), 200)).length === 2);
    // As an object that took its census when only running sandboxes counted (its pauses released all).
    await runInDurableObject(quotaOf(team.teamId), (instance: TeamQuotaDO, state) => {
      state.storage.sql.exec("DELETE FROM reservations; DELETE FROM census_paused");
      Object.assign(instance as object, { ledger: null, census: false });
    });
    await expectError(create(team), 429, /has 1024 of 1024 MB .*\(quota memoryMB\)/);
    // That refusal asked the groups: the Stop-paused one holds nothing, the frozen one its memory.
    await waitFor(async () => (await usage(team)).memoryMB === 512);
    await expectStatus(create(team), 201);
  });

  it("reads reservations stored before frozen ones were kept (the column is added)", async () => {
    const team = await quotaTeam({ runningSandboxes: 1 });
    await expectStatus(create(team), 201);
    await runInDurableObject(quotaOf(team.teamId), (instance: TeamQuotaDO, state) => {
      state.storage.sql.exec("ALTER TABLE reservations DROP COLUMN frozen");
      Object.assign(instance as object, { ledger: null, store: openQuotaStore(state.storage.sql) });
    });
    await expectError(create(team), 429, /has 1 of 1 running sandboxes/);
    expect(await usage(team)).toMatchObject({ runningSandboxes: 1 });
  });

  it("a release that never arrived is found by the reconcile, and a refusal starts one", async () => {
    const team = await quotaTeam({ runningSandboxes: 1 });
    const a = await expectStatus(create(team), 201);
    // The group's calls are lost (the pause's reserve of a paused slot, and the assert after it):
    // the paused sandbox still holds the only running slot.
    type Link = { follow?: () => void; beforePause?: () => Promise<{ ok: true }> };
    const group = sandboxGroupStub(env, a.sandboxID);
    await runInDurableObject(group, (instance: SandboxGroupDO) => {
      const link = (instance as unknown as { quota: Link }).quota;
      link.follow = () => undefined;
      link.beforePause = async () => ({ ok: true });
    });
    await expectStatus(call(`/sandboxes/${a.sandboxID}/pause`, { key: team.key, body: {} }), 204);
    await runInDurableObject(group, (instance: SandboxGroupDO) => {
      const link = (instance as unknown as { quota: Link }).quota;
      delete link.follow;
      delete link.beforePause;
    });
    await expectError(create(team), 429, /has 1 of 1 running sandboxes/);
    // That refusal asked the groups; the paused sandbox no longer counts.
    await waitFor(async () => (await usage(team)).runningSandboxes === 0);
    await expectStatus(create(team), 201);
  });
});

describe("a sandbox that fails", () => {
  it("keeps counting against the quota until it is killed: a team at its limit whose sandboxes fail cannot create past it while their host sides are held", async () => {
    const team = await quotaTeam({ runningSandboxes: 1 });
    const agent = agents.at(-1)!;
    const a = (await expectStatus(create(team), 201)).sandboxID as string;
    // Its ready command fails (the tenant's doing): the agent reports it Failed and, as the real
    // agent does, deletes nothing.
    agent.report({ sandboxId: a, generation: agent.sandboxes.get(a)!.generation, phase: "Failed", ready: false, reason: "ReadyCommandFailed", message: "exit status 1", observedAt: Date.now() });
    await waitFor(async () => (await call(`/sandboxes/${a}`, { key: team.key })).status === 404);
    expect(agent.sandboxes.has(a)).toBe(true);
    expect(await usage(team)).toMatchObject({ runningSandboxes: 1 });
    await expectError(create(team), 429, /has 1 of 1 running sandboxes/);
    const admin = await expectStatus(call(`/admin/sandboxes/${a}`), 200);
    expect(admin).toMatchObject({ phase: "Failed" });
    expect(admin.events).toContainEqual(expect.objectContaining({ type: "Warning", reason: "ReadyCommandFailed", message: expect.stringMatching(/^failed: exit status 1; killed \(its host side deleted\) by .* at the latest, counted against the team quota/) }));
    // The reconcile agrees with the group: still counted.
    expect(await quotaOf(team.teamId).reconcile()).toEqual({ ok: true, released: [] });
    expect(await usage(team)).toMatchObject({ runningSandboxes: 1 });
    // Its kill (the team's key still reaches it) deletes its host side and frees the slot.
    await expectStatus(call(`/sandboxes/${a}`, { key: team.key, method: "DELETE" }), 204);
    await agent.waitUntil(() => !agent.sandboxes.has(a));
    await expectStatus(create(team), 201);
  });
});

/**
 * A team whose scripted agent holds the resumes of the sandboxes in `failing`: sandbox `a` created
 * (and `b` beside it when asked), `a` Stop-paused, and a connect of it under way, its resume's
 * intent received (`resumedAt`) and not answered.
 */
async function resumeHeld(quota: Record<string, number>, withB = false) {
  const failing = new Set<string>();
  const team = await quotaTeam(quota, {}, { hold: (i) => i.desired.state === "running" && failing.has(i.sandboxId) });
  const agent = agents.at(-1)!;
  const a = (await expectStatus(create(team), 201)).sandboxID as string;
  const b = withB ? ((await expectStatus(create(team), 201)).sandboxID as string) : "";
  await expectStatus(call(`/sandboxes/${a}/pause`, { key: team.key, body: { memory: false } }), 204);
  const pausedAt = agent.sandboxes.get(a)!.generation;
  failing.add(a);
  const connecting = call(`/v2/sandboxes/${a}/connect`, { key: team.key, body: { timeout: 60 } });
  await agent.waitUntil(() => agent.sandboxes.get(a)!.generation > pausedAt);
  return { team, agent, failing, a, b, connecting, resumedAt: agent.sandboxes.get(a)!.generation };
}

describe("a resume that fails", () => {
  it("goes back to paused: the connect is a 409 naming the reason, the sandbox lists as paused and holds a paused slot, not a running one; a second connect resumes it and a kill deletes it", async () => {
    const { team, agent, failing, a, connecting, resumedAt } = await resumeHeld({ runningSandboxes: 1 });
    // The agent takes the resume and fails it, as the real one does when the template's ready
    // command does not pass: Failed, with its reason, at the resume's generation.
    agent.report({ sandboxId: a, generation: resumedAt, phase: "Failed", ready: false, reason: "ReadyCommandFailed", message: "the template's ready command did not pass within 8 s", observedAt: Date.now() });
    const refused = await connecting;
    expect(refused.status).toBe(409);
    expect(await refused.json()).toEqual({
      code: 409,
      error_code: "sandbox_resume_failed",
      message: `Sandbox "${a}" failed to resume: ReadyCommandFailed (the template's ready command did not pass within 8 s); it is paused again with its files kept, and a connect resumes it again once the cause is fixed`,
    });
    // The edge paused it again, as it was paused (Stop: the agent ends what the failed start left).
    await agent.waitUntil(() => agent.sandboxes.get(a)?.phase === "Paused" && agent.sandboxes.get(a)!.generation === resumedAt + 1);
    expect(agent.sandboxes.get(a)!.intent.desired).toEqual({ state: "paused", pauseStrategy: "Stop" });
    expect((await expectStatus(call(`/sandboxes/${a}`, { key: team.key }), 200)).state).toBe("paused");
    await waitFor(async () => (await expectStatus(call("/v2/sandboxes?state=paused", { key: team.key }), 200)).some((x: { sandboxID: string }) => x.sandboxID === a));
    const admin = await expectStatus(call(`/admin/sandboxes/${a}`), 200);
    expect(admin.phase).toBe("Paused");
    expect(admin.conditions).toContainEqual(expect.objectContaining({ type: "SandboxResumed", status: "False", reason: "ResumeFailed" }));
    expect(admin.events).toContainEqual(expect.objectContaining({ type: "Warning", reason: "ReadyCommandFailed", message: expect.stringMatching(/^failed to resume: .*; paused again \(Stop\), its files kept/) }));
    // It holds a paused slot, not the team's one running slot: another sandbox can be created.
    // (The group tells the quota after the change it answered the connect with.)
    await waitFor(async () => (await usage(team)).runningSandboxes === 0);
    expect(await usage(team)).toMatchObject({ runningSandboxes: 0, pausedSandboxes: 1 });
    expect(await quotaOf(team.teamId).reconcile()).toEqual({ ok: true, released: [] });
    const b = (await expectStatus(create(team), 201)).sandboxID as string;
    await expectStatus(call(`/sandboxes/${b}`, { key: team.key, method: "DELETE" }), 204);
    // Once the cause is gone, a second connect resumes it.
    failing.delete(a);
    await expectStatus(call(`/v2/sandboxes/${a}/connect`, { key: team.key, body: { timeout: 60 } }), 201);
    expect((await expectStatus(call(`/sandboxes/${a}`, { key: team.key }), 200)).state).toBe("running");
    expect(await usage(team)).toMatchObject({ runningSandboxes: 1, pausedSandboxes: 0 });
    // A kill by id deletes it.
    await expectStatus(call(`/sandboxes/${a}`, { key: team.key, method: "DELETE" }), 204);
    await agent.waitUntil(() => !agent.sandboxes.has(a));
  });

  it("rejected by the agent: the same 409, paused again as it was", async () => {
    const rejecting = new Set<string>();
    const team = await quotaTeam({}, {}, { reject: (i) => (i.desired.state === "running" && rejecting.has(i.sandboxId) ? "the image is gone" : undefined) });
    const agent = agents.at(-1)!;
    const a = (await expectStatus(create(team), 201)).sandboxID as string;
    await expectStatus(call(`/sandboxes/${a}/pause`, { key: team.key, body: {} }), 204);
    const paused = agent.sandboxes.get(a)!;
    rejecting.add(a);
    await expectError(call(`/v2/sandboxes/${a}/connect`, { key: team.key, body: { timeout: 60 } }), 409, /failed to resume: IntentRejected \(the image is gone\); it is paused again/);
    // The rejected resume (paused + 1) changed nothing there; the pause back is the next one.
    await agent.waitUntil(() => agent.sandboxes.get(a)!.generation === paused.generation + 2);
    expect(agent.sandboxes.get(a)).toMatchObject({ phase: "Paused", intent: { desired: paused.intent.desired } });
    expect((await expectStatus(call(`/sandboxes/${a}`, { key: team.key }), 200)).state).toBe("paused");
  });
});

describe("a resume that fails, and the team's other sandboxes", () => {
  it("keeps the paused slot it resumes from: another pause meanwhile is refused, so the failed resume goes back to its own slot, never past pausedSandboxes", async () => {
    // Review M1 of s35-resume: a resume gave its paused slot back at once, another pause took it,
    // and the failed resume's forced rollback then made paused 2 of 1.
    const { team, agent, failing, a, b, connecting, resumedAt } = await resumeHeld({ runningSandboxes: 2, pausedSandboxes: 1 }, true);
    expect(await usage(team)).toMatchObject({ runningSandboxes: 2, pausedSandboxes: 1 });
    await expectError(call(`/sandboxes/${b}/pause`, { key: team.key, body: { memory: false } }), 429, /has 1 of 1 paused sandboxes \(quota pausedSandboxes\)/);
    agent.report({ sandboxId: a, generation: resumedAt, phase: "Failed", ready: false, reason: "ReadyCommandFailed", message: "x", observedAt: Date.now() });
    await expectError(connecting, 409, /failed to resume: ReadyCommandFailed/);
    await waitFor(async () => (await usage(team)).runningSandboxes === 1);
    expect(await usage(team)).toMatchObject({ runningSandboxes: 1, pausedSandboxes: 1 });
    expect(await quotaOf(team.teamId).reconcile()).toEqual({ ok: true, released: [] });
    expect(await usage(team)).toMatchObject({ runningSandboxes: 1, pausedSandboxes: 1 });
    // A resume that succeeds gives the paused slot back before its connect is answered: B's pause fits.
    failing.delete(a);
    await expectStatus(call(`/v2/sandboxes/${a}/connect`, { key: team.key, body: { timeout: 60 } }), 201);
    expect(await usage(team)).toMatchObject({ runningSandboxes: 2, pausedSandboxes: 0 });
    await expectStatus(call(`/sandboxes/${b}/pause`, { key: team.key, body: { memory: false } }), 204);
  });

  it("traffic does not resume again a sandbox whose auto-resume failed: retried gateway requests get a 409 naming the failure, and no new resume; a connect still resumes it", async () => {
    // Review M2 of s35-resume: every retried request started another resume and its pause back.
    const rejecting = new Set<string>();
    const team = await quotaTeam({}, {}, { reject: (i) => (i.desired.state === "running" && rejecting.has(i.sandboxId) ? "the image is gone" : undefined) });
    const agent = agents.at(-1)!;
    const sbx = await expectStatus(call("/v2/sandboxes", { key: team.key, body: { templateID: team.template, autoPause: true, autoResume: { enabled: true }, timeout: 300 } }), 201);
    const id = sbx.sandboxID as string;
    const gw = () => exports.default.fetch("http://edge.test/health", { headers: { "e2b-sandbox-id": id, "x-access-token": sbx.envdAccessToken } });
    await expectStatus(call(`/sandboxes/${id}/pause`, { key: team.key, body: {} }), 204);
    rejecting.add(id);
    const g0 = agent.sandboxes.get(id)!.generation;
    const first = await gw();
    expect(first.status).toBe(409);
    expect(first.headers.get("retry-after")).toBeNull();
    expect(await first.json()).toEqual({ code: 409, message: `Sandbox "${id}" failed to resume: IntentRejected (the image is gone); it is paused again with its files kept, and a connect resumes it again once the cause is fixed` });
    await agent.waitUntil(() => agent.sandboxes.get(id)!.generation === g0 + 2 && agent.sandboxes.get(id)!.phase === "Paused");
    for (let i = 0; i < 4; i++) {
      const again = await gw();
      expect(again.status).toBe(409);
      expect(again.headers.get("retry-after")).toBeNull();
      expect(((await again.json()) as { message: string }).message).toBe(`Sandbox "${id}" is paused: its last resume failed: IntentRejected (the image is gone); traffic does not resume it again, a connect does (once the cause is fixed)`);
    }
    // One resume and its pause back, one Warning, nothing reserved for resumes that never started.
    expect(agent.sandboxes.get(id)!.generation).toBe(g0 + 2);
    const admin = await expectStatus(call(`/admin/sandboxes/${id}`), 200);
    expect(admin.events.filter((e: { type: string; reason: string }) => e.type === "Warning" && e.reason === "IntentRejected")).toHaveLength(1);
    expect(await usage(team)).toMatchObject({ runningSandboxes: 0, pausedSandboxes: 1 });
    // A connect resumes it; once it ran again, traffic resumes it again after its next pause.
    rejecting.delete(id);
    await expectStatus(call(`/v2/sandboxes/${id}/connect`, { key: team.key, body: { timeout: 60 } }), 201);
    await expectStatus(call(`/sandboxes/${id}/pause`, { key: team.key, body: {} }), 204);
    const g1 = agent.sandboxes.get(id)!.generation;
    const woken = await gw();
    await woken.body?.cancel();
    expect(woken.status).not.toBe(409);
    expect(agent.sandboxes.get(id)!.generation).toBe(g1 + 1);
    expect((await expectStatus(call(`/sandboxes/${id}`, { key: team.key }), 200)).state).toBe("running");
  });
});

describe("paused sandboxes quota", () => {
  const pause = (team: TestTeam, id: string, body: Record<string, unknown> = {}) => call(`/sandboxes/${id}/pause`, { key: team.key, body });
  const stateOf = async (team: TestTeam, id: string) => (await expectStatus(call(`/sandboxes/${id}`, { key: team.key }), 200)).state;
  const pausesSent = (agent: ScriptedAgent, id: string) => agent.received.filter((r) => r.intent.sandboxId === id && r.intent.desired.state === "paused").length;

  it("12 concurrent pauses (Freeze and Stop) against a quota of 4 paused sandboxes give exactly 4; the rest are 429 naming the limit and keep running", async () => {
    const team = await quotaTeam({ pausedSandboxes: 4 });
    const agent = agents.at(-1)!;
    const ids = await Promise.all(Array.from({ length: 12 }, async () => (await expectStatus(create(team), 201)).sandboxID as string));
    const responses = await Promise.all(ids.map((id, i) => pause(team, id, i % 2 ? { memory: false } : {})));
    const statuses = responses.map((r) => r.status);
    expect(statuses.filter((s) => s === 204)).toHaveLength(4);
    expect(statuses.filter((s) => s === 429)).toHaveLength(8);
    const refused = ids.filter((_, i) => statuses[i] === 429);
    expect(await responses[statuses.indexOf(429)]!.json()).toEqual({ code: 429, message: `team "${team.name}" has 4 of 4 paused sandboxes (quota pausedSandboxes)` });
    for (const id of refused) {
      expect(await stateOf(team, id)).toBe("running");
      expect(pausesSent(agent, id)).toBe(0);
    }
    expect(await usage(team)).toMatchObject({ runningSandboxes: 8, pausedSandboxes: 4 });
    expect(await expectStatus(call("/v2/sandboxes?state=paused", { key: team.key }), 200)).toHaveLength(4);
  });

  it("a resume or a kill frees the paused slot; a paused sandbox's kill frees nothing running", async () => {
    const team = await quotaTeam({ pausedSandboxes: 1 });
    const a = (await expectStatus(create(team), 201)).sandboxID as string;
    const b = (await expectStatus(create(team), 201)).sandboxID as string;
    await expectStatus(pause(team, a, { memory: false }), 204);
    await expectError(pause(team, b), 429, /has 1 of 1 paused sandboxes \(quota pausedSandboxes\)/);
    await expectStatus(call(`/v2/sandboxes/${a}/connect`, { key: team.key, body: { timeout: 60 } }), 201);
    await expectStatus(pause(team, b), 204);
    await expectError(pause(team, a), 429, /quota pausedSandboxes/);
    expect(await usage(team)).toMatchObject({ runningSandboxes: 1, pausedSandboxes: 1 });
    await expectStatus(call(`/sandboxes/${b}`, { key: team.key, method: "DELETE" }), 204);
    expect(await usage(team)).toMatchObject({ runningSandboxes: 1, pausedSandboxes: 0 });
    await expectStatus(pause(team, a), 204);
    expect(await stateOf(team, a)).toBe("paused");
  });

  it("an auto-pause at timeout over the quota kills the sandbox, and its event list says why", async () => {
    // Deletes held by the agent: the killed sandbox stays (terminating) long enough to be inspected.
    const team = await quotaTeam({ pausedSandboxes: 1 }, {}, { hold: (i) => i.desired.state === "deleted" });
    const agent = agents.at(-1)!;
    const body = { templateID: team.template, timeout: 300, autoPause: true };
    const a = (await expectStatus(call("/v2/sandboxes", { key: team.key, body }), 201)).sandboxID as string;
    const b = (await expectStatus(call("/v2/sandboxes", { key: team.key, body }), 201)).sandboxID as string;
    await expectStatus(pause(team, a), 204);
    await expectStatus(call(`/sandboxes/${b}/timeout`, { key: team.key, body: { timeout: 0 } }), 204);
    await waitFor(async () => (await call(`/sandboxes/${b}`, { key: team.key })).status === 404);
    await agent.waitUntil(() => agent.received.some((r) => r.intent.sandboxId === b && r.intent.desired.state === "deleted"));
    expect(pausesSent(agent, b)).toBe(0);
    const admin = await expectStatus(call(`/admin/sandboxes/${b}`), 200);
    expect(admin.events).toContainEqual(expect.objectContaining({ type: "Warning", reason: "TimeoutPauseRefused", source: "team quota", message: expect.stringMatching(/killed instead of paused: team ".*" has 1 of 1 paused sandboxes \(quota pausedSandboxes\)/) }));
    expect(await usage(team)).toMatchObject({ runningSandboxes: 0, pausedSandboxes: 1 });
  });

  it("a pause over the quota never runs the template's prePause hook; a hook that refuses gives the slot reserved before it back at once", async () => {
    const ingressUrl = inject("hookIngress");
    const hookCalls = async (id: string) => ((await (await fetch(`${ingressUrl}/__calls`)).json()) as { sandboxId: string }[]).filter((c) => c.sandboxId === id).length;
    const hooked = (path: string) => ({ lifecycle: { prePause: { http: { port: 8080, path }, timeoutSeconds: 5 } } });
    const team = await quotaTeam({ pausedSandboxes: 1 }, hooked("/ok"), { ingressUrl });
    const [a, b] = await Promise.all([0, 1].map(async () => (await expectStatus(create(team), 201)).sandboxID as string));
    await expectStatus(pause(team, a!), 204);
    expect(await hookCalls(a!)).toBe(1);
    await expectError(pause(team, b!), 429, /has 1 of 1 paused sandboxes \(quota pausedSandboxes\)/);
    expect(await hookCalls(b!)).toBe(0);
    expect(await stateOf(team, b!)).toBe("running");
    expect(await usage(team)).toMatchObject({ runningSandboxes: 1, pausedSandboxes: 1 });

    const failing = await quotaTeam({ pausedSandboxes: 1 }, hooked("/fail"), { ingressUrl });
    const c = (await expectStatus(create(failing), 201)).sandboxID as string;
    await expectError(pause(failing, c), 409, /prePause/);
    expect(await hookCalls(c)).toBe(1);
    expect(await stateOf(failing, c)).toBe("running");
    expect(await usage(failing)).toMatchObject({ runningSandboxes: 1, pausedSandboxes: 0 });
  });

  it("the auto-pause probe over the quota keeps the refusal as its held and probes less often (2, 4… periods)", async () => {
    const ingressUrl = inject("hookIngress");
    const team = await quotaTeam({ pausedSandboxes: 1 }, {}, { ingressUrl });
    const [a, b] = await Promise.all([0, 1].map(async () => (await expectStatus(create(team), 201)).sandboxID as string));
    await expectStatus(pause(team, a!), 204);
    const probe = env.PROBE.get(env.PROBE.idFromName(b!));
    // Idle at once: the stand-in ingress answers `/ok` with an empty body.
    await probe.start(b!, team.teamId, { probe: { http: { port: 8080, path: "/ok" }, periodSeconds: 10 }, messageRegex: "^$", thresholdDuration: "0s" } as never);
    const alarmIn = () => runInDurableObject(probe, async (_i: unknown, state: DurableObjectState) => ((await state.storage.getAlarm()) ?? 0) - Date.now());
    expect(await runDurableObjectAlarm(probe)).toBe(true);
    expect((await probe.status())?.held).toMatch(/has 1 of 1 paused sandboxes \(quota pausedSandboxes\)/);
    expect(await alarmIn()).toBeGreaterThan(15_000);
    expect(await runDurableObjectAlarm(probe)).toBe(true);
    expect(await alarmIn()).toBeGreaterThan(35_000);
    expect(await stateOf(team, b!)).toBe("running");
    await probe.stop();
  });

  it("an auto-pause reserved while the timeout is extended is not applied, and gives the running slot back at once", async () => {
    const team = await quotaTeam({ pausedSandboxes: 5, runningSandboxes: 5 });
    const id = (await expectStatus(call("/v2/sandboxes", { key: team.key, body: { templateID: team.template, timeout: 300, autoPause: true } }), 201)).sandboxID as string;
    // The client extends the timeout while the alarm's reserve is in flight: the alarm then finds
    // nothing due, and the sandbox runs on.
    type Link = { beforePause?: (after: unknown) => Promise<unknown> };
    const group = sandboxGroupStub(env, id);
    await runInDurableObject(group, (instance: SandboxGroupDO) => {
      const link = (instance as unknown as { quota: Link }).quota;
      const real = Object.getPrototypeOf(link).beforePause as NonNullable<Link["beforePause"]>;
      link.beforePause = async (after) => {
        const res = await real.call(link, after);
        await expectStatus(call(`/sandboxes/${id}/timeout`, { key: team.key, body: { timeout: 300 } }), 204);
        return res;
      };
    });
    try {
      await expectStatus(call(`/sandboxes/${id}/timeout`, { key: team.key, body: { timeout: 0 } }), 204);
      await waitFor(async () => (await expectStatus(call(`/sandboxes/${id}`, { key: team.key }), 200)).endAt > new Date(Date.now() + 200_000).toISOString());
    } finally {
      await runInDurableObject(group, (instance: SandboxGroupDO) => {
        delete (instance as unknown as { quota: Link }).quota.beforePause;
      });
    }
    expect(await stateOf(team, id)).toBe("running");
    await waitFor(async () => {
      const u = await usage(team);
      return u.runningSandboxes === 1 && u.pausedSandboxes === 0;
    });
  });

  it("a pause whose apply throws after its reserve gives the running slot back at once", async () => {
    const team = await quotaTeam({ pausedSandboxes: 5, runningSandboxes: 5 });
    const id = (await expectStatus(create(team), 201)).sandboxID as string;
    type Applier = { apply?: (id: string, ev: { type: string }, ...rest: unknown[]) => Promise<unknown> };
    const group = sandboxGroupStub(env, id);
    await runInDurableObject(group, (instance: SandboxGroupDO) => {
      const i = instance as unknown as Applier;
      const real = Object.getPrototypeOf(i).apply as NonNullable<Applier["apply"]>;
      i.apply = (sid, ev, ...rest) => {
        if (ev.type === "pause") throw new Error("SQLITE_FULL: the row write failed");
        return real.call(i, sid, ev, ...rest);
      };
    });
    try {
      expect((await pause(team, id)).status).toBe(500);
    } finally {
      await runInDurableObject(group, (instance: SandboxGroupDO) => {
        delete (instance as unknown as Applier).apply;
      });
    }
    expect(await stateOf(team, id)).toBe("running");
    expect(await usage(team)).toMatchObject({ runningSandboxes: 1, pausedSandboxes: 0 });
  });

  it("the paused sandboxes' census: Stop-paused ones from before paused sandboxes counted are counted at first use", async () => {
    const team = await quotaTeam({ pausedSandboxes: 2 });
    const ids = await Promise.all([0, 1, 2].map(async () => (await expectStatus(create(team), 201)).sandboxID as string));
    await expectStatus(pause(team, ids[0]!, { memory: false }), 204);
    await expectStatus(pause(team, ids[1]!, { memory: false }), 204);
    await waitFor(async () => (await expectStatus(call("/v2/sandboxes?state=paused", { key: team.key }), 200)).length === 2);
    // As an object from before: a Stop pause released the reservation; no census of them yet.
    await runInDurableObject(quotaOf(team.teamId), (instance: TeamQuotaDO, state) => {
      state.storage.sql.exec("DELETE FROM reservations WHERE stopped = 1; DELETE FROM census_stopped");
      Object.assign(instance as object, { ledger: null, census: false });
    });
    await expectError(pause(team, ids[2]!), 429, /has 2 of 2 paused sandboxes/);
    expect(await usage(team)).toMatchObject({ pausedSandboxes: 2, runningSandboxes: 1 });
    // That refusal asked the groups: the census's guess (frozen: their memory) becomes stopped.
    await waitFor(async () => (await usage(team)).memoryMB === 512);
  });

  it("the admin API sets and shows the limit (default QUOTA_PAUSED_SANDBOXES) and refuses a bad one with 400", async () => {
    const team = await quotaTeam({});
    expect(await expectStatus(call(`/admin/teams/${team.name}/quota`), 200)).toMatchObject({ limits: { pausedSandboxes: 100 }, usage: { pausedSandboxes: 0 } });
    await expectStatus(call(`/admin/teams/${team.name}/quota`, { method: "PUT", body: { pausedSandboxes: 0 } }), 200);
    const a = (await expectStatus(create(team), 201)).sandboxID as string;
    await expectError(pause(team, a), 429, /has 0 of 0 paused sandboxes/);
    for (const bad of [-1, 1.5, "3", 2_000_000_000]) {
      await expectError(call(`/admin/teams/${team.name}/quota`, { method: "PUT", body: { pausedSandboxes: bad } }), 400, /pausedSandboxes/);
    }
    expect(await expectStatus(call(`/admin/teams/${team.name}/quota`), 200)).toMatchObject({ overrides: { pausedSandboxes: 0 }, limits: { pausedSandboxes: 0 } });
  });
});

describe("team quota fails closed", () => {
  let team: TestTeam & { teamId: string };
  beforeAll(async () => {
    team = await quotaTeam({ runningSandboxes: 50 });
  });

  type Patchable = { ledger: unknown; store: Record<string, (...args: unknown[]) => unknown> };

  /** Makes one method of the quota's store throw until the returned undo runs. */
  async function breakStore(method: "load" | "put", message: string): Promise<() => Promise<void>> {
    let real: unknown;
    await runInDurableObject(quotaOf(team.teamId), (instance: TeamQuotaDO) => {
      const i = instance as unknown as Patchable;
      real = i.store[method];
      i.ledger = null;
      i.store[method] = () => {
        throw new Error(message);
      };
    });
    return () =>
      runInDurableObject(quotaOf(team.teamId), (instance: TeamQuotaDO) => {
        (instance as unknown as Patchable).store[method] = real as () => unknown;
      });
  }

  it("refuses the create with 503 when the reservations cannot be read", async () => {
    const undo = await breakStore("load", "SQLITE_IOERR: disk I/O error");
    await expectError(create(team), 503, /quota of team .* is unavailable .*SQLITE_IOERR/);
    await undo();
    expect(await expectStatus(call("/v2/sandboxes", { key: team.key }), 200)).toHaveLength(0);
    await expectStatus(create(team), 201);
  });

  it("refuses the create with 503 when the quota object's call fails", async () => {
    await runInDurableObject(quotaOf(team.teamId), (instance: TeamQuotaDO) => {
      Object.assign(instance as object, {
        counted: () => {
          throw new Error("quota object unreachable");
        },
      });
    });
    await expectError(create(team), 503, /quota of team .* is unavailable .*unreachable.*the create is refused/);
    await runInDurableObject(quotaOf(team.teamId), (instance: TeamQuotaDO) => {
      delete (instance as unknown as { counted?: unknown }).counted;
    });
    await expectStatus(create(team), 201);
  });

  it("refuses a pause with 503 when the quota cannot be read (the sandbox keeps running); an auto-pause at timeout is put off, not a kill, and pauses once the quota answers", async () => {
    const id = (await expectStatus(create(team), 201)).sandboxID as string;
    const auto = (await expectStatus(call("/v2/sandboxes", { key: team.key, body: { templateID: team.template, timeout: 300, autoPause: true } }), 201)).sandboxID as string;
    const undo = await breakStore("load", "SQLITE_IOERR: disk I/O error");
    try {
      await expectError(call(`/sandboxes/${id}/pause`, { key: team.key, body: {} }), 503, /quota of team .* is unavailable .*SQLITE_IOERR/);
      expect((await expectStatus(call(`/sandboxes/${id}`, { key: team.key }), 200)).state).toBe("running");
      await expectStatus(call(`/sandboxes/${auto}/timeout`, { key: team.key, body: { timeout: 0 } }), 204);
      await waitFor(async () => ((await expectStatus(call(`/admin/sandboxes/${auto}`), 200)).events ?? []).some((e: { reason: string }) => e.reason === "TimeoutPauseDeferred"));
      const admin = await expectStatus(call(`/admin/sandboxes/${auto}`), 200);
      expect(admin.events).toContainEqual(expect.objectContaining({ type: "Warning", reason: "TimeoutPauseDeferred", source: "team quota", message: expect.stringMatching(/tried again in 5 s .*SQLITE_IOERR/) }));
      expect((await expectStatus(call(`/sandboxes/${auto}`, { key: team.key }), 200)).state).toBe("running");
    } finally {
      await undo();
    }
    // The next try (5 s later) finds the quota answering: paused, and counted.
    await waitFor(async () => (await expectStatus(call(`/sandboxes/${auto}`, { key: team.key }), 200)).state === "paused", 15_000);
    await waitFor(async () => (await usage(team)).pausedSandboxes === 1);
    await expectStatus(call(`/sandboxes/${auto}`, { key: team.key, method: "DELETE" }), 204);
    await expectStatus(call(`/sandboxes/${id}/pause`, { key: team.key, body: {} }), 204);
    await expectStatus(call(`/sandboxes/${id}`, { key: team.key, method: "DELETE" }), 204);
    // The kill's release, made while the quota could not be read, is retried (or reconciled).
    await waitFor(async () => (await usage(team)).runningSandboxes === (await expectStatus(call("/v2/sandboxes", { key: team.key }), 200)).length);
  }, 40_000);

  it("refuses the create with 503 when the reservation cannot be written", async () => {
    const before = (await usage(team)).runningSandboxes;
    const undo = await breakStore("put", "SQLITE_FULL: database or disk is full");
    const refused = await Promise.all(Array.from({ length: 5 }, () => create(team)));
    for (const r of refused) await expectError(r, 503, /SQLITE_FULL/);
    await undo();
    expect(await usage(team)).toMatchObject({ runningSandboxes: before });
    expect(await expectStatus(call("/v2/sandboxes", { key: team.key }), 200)).toHaveLength(before);
  });
});

describe("a create that fails after its claim", () => {
  let team: TestTeam & { teamId: string };
  let agent: ScriptedAgent;
  beforeAll(async () => {
    team = await quotaTeam({ runningSandboxes: 50 }, { replicas: 2 });
    agent = agents.at(-1)!;
  });

  /** Waits for a warm member, runs `create` with the quota object's env swapped, restores it. */
  async function withQuotaEnv(swap: (real: Env) => Env, run: () => Promise<Response>): Promise<Response> {
    await waitFor(async () => ((await expectStatus(call(`/admin/teams/${team.name}/templates/${team.template}`), 200)).pool?.available ?? 0) > 0);
    let real: Env | undefined;
    await runInDurableObject(quotaOf(team.teamId), (instance: TeamQuotaDO) => {
      const i = instance as unknown as { env: Env };
      real = i.env;
      i.env = swap(real);
    });
    try {
      return await run();
    } finally {
      await runInDurableObject(quotaOf(team.teamId), (instance: TeamQuotaDO) => {
        (instance as unknown as { env: Env }).env = real!;
      });
    }
  }

  /** The refusal names the claimed sandbox: no slot kept, and its warm member deleted on the cluster. */
  async function expectGivenBack(res: Response, why: RegExp, before: number): Promise<void> {
    expect(res.status).toBe(500);
    const { message } = (await res.json()) as { message: string };
    expect(message).toMatch(why);
    expect(message).toMatch(/was claimed but its create failed .*: it was not created; its quota reservation and its warm member are released/);
    const id = /Sandbox "([a-z0-9]+)"/.exec(message)![1]!;
    expect((await usage(team)).runningSandboxes).toBe(before);
    await waitFor(async () => agent.received.some((r) => r.intent.sandboxId === id && r.intent.desired.state === "deleted"));
  }

  it("is an internal error, not a refusal, and gives the member and the reservation back when no group was asked", async () => {
    const before = (await usage(team)).runningSandboxes;
    const res = await withQuotaEnv(
      (real) => ({ ...real, SANDBOX_GROUP: { idFromName: () => { throw new Error("group binding lost"); } } as unknown as Env["SANDBOX_GROUP"] }),
      () => create(team),
    );
    await expectGivenBack(res, /group binding lost/, before);
    await expectStatus(create(team), 201);
  });

  it("asks the group whether the sandbox exists when the group's create throws", async () => {
    const before = (await usage(team)).runningSandboxes;
    const res = await withQuotaEnv(
      (real) => ({
        ...real,
        SANDBOX_GROUP: {
          idFromName: (n: string) => real.SANDBOX_GROUP.idFromName(n),
          get: (id: DurableObjectId) => {
            const group = real.SANDBOX_GROUP.get(id);
            return { create: () => Promise.reject(new Error("group reset")), quotaHeld: (ids: string[]) => group.quotaHeld(ids) };
          },
        } as unknown as Env["SANDBOX_GROUP"],
      }),
      () => create(team),
    );
    await expectGivenBack(res, /group reset/, before);
  });
});

/** Delays every call the sandbox's group makes to the team quota by `ms`; returns the undo. */
async function slowQuotaCalls(sandboxId: string, ms: number): Promise<() => Promise<void>> {
  type Link = { quota: (s: unknown) => Record<string, (...args: unknown[]) => Promise<unknown>> };
  const group = sandboxGroupStub(env, sandboxId);
  await runInDurableObject(group, (instance: SandboxGroupDO) => {
    const link = (instance as unknown as { quota: Link }).quota;
    const real = Object.getPrototypeOf(link).quota as Link["quota"];
    link.quota = (s) => {
      const stub = real.call(link, s);
      const slow = (m: string) => async (...args: unknown[]) => {
        await new Promise((r) => setTimeout(r, ms));
        return stub[m]!(...args);
      };
      return { release: slow("release"), reserve: slow("reserve") };
    };
  });
  return () =>
    runInDurableObject(group, (instance: SandboxGroupDO) => {
      delete (instance as unknown as { quota: { quota?: unknown } }).quota.quota;
    });
}

async function waitFor(check: () => Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > end) throw new Error("condition not met in time");
    await new Promise((r) => setTimeout(r, 20));
  }
}
