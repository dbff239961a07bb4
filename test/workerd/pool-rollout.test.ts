// A template change rolls its warm pool, seen through the admin API with the scripted agent on
// the real agent link. The agent reports a member ready only when the test says so, so each step
// shows how many old members the pool replaced while its replacements were still creating.
import { describe, expect, it } from "vitest";
import type { Intent } from "../../schema/protocol/index.ts";
import { waitFor } from "../support/wait-for.ts";
import { call, createTeam, expectStatus, startAgent, unique } from "./helpers.ts";

describe("rolling update through the admin API", () => {
  it("replaces warm members at most maxUnavailable at a time, a claim mid-rollout gets a current member, a claimed one is left alone", async () => {
    const team = await createTeam(unique("roll"));
    const agent = await startAgent(team.cluster, { observe: false });
    const path = `/admin/teams/${team.name}/templates/${team.template}`;
    const put = (image: string) =>
      expectStatus(call(path, { method: "PUT", body: { spec: { cluster: team.cluster, replicas: 4, image, updateStrategy: { maxUnavailable: 1 } } } }), 200);
    const status = async () => (await expectStatus(call(path), 200)).pool;
    const poolIntents = (rev: string, state: Intent["desired"]["state"]) =>
      agent.received.filter((r) => r.intent.owner.kind === "pool" && r.intent.template?.revision === rev && r.intent.desired.state === state).map((r) => r.intent);
    const reported = new Set<string>();
    /** Reports Running + ready for `id` at the generation the agent holds. */
    const ready = (id: string) => {
      const s = agent.sandboxes.get(id)!;
      reported.add(`${id}@${s.generation}`);
      agent.report({ sandboxId: id, generation: s.generation, phase: "Running", ready: true, endpoint: { runtime: `http://${id}.scripted.invalid:49983` }, revision: s.intent.template?.revision, observedAt: Date.now() });
    };
    /** Warm members of `rev` the agent runs and has not yet reported ready. */
    const unreported = (rev: string) =>
      poolIntents(rev, "running").filter((i) => agent.sandboxes.get(i.sandboxId)?.generation === i.generation && !reported.has(`${i.sandboxId}@${i.generation}`));

    const first = await put("base");
    const rev1: string = first.revision;
    await agent.waitUntil(() => unreported(rev1).length === 4);
    for (const i of unreported(rev1)) ready(i.sandboxId);
    await waitFor(async () => (await status()).available === 4);
    expect(await status()).toMatchObject({ updateRevision: rev1, currentRevision: rev1, updatedReplicas: 4, updatedAvailableReplicas: 4, maxUnavailable: 1 });

    // A sandbox claimed before the change stays on its revision, untouched by the rollout.
    const before = await expectStatus(call("/sandboxes", { key: team.key, body: { templateID: team.template, timeout: 300 } }), 201);
    await agent.waitUntil(() => unreported(rev1).length === 1);
    for (const i of unreported(rev1)) ready(i.sandboxId);
    await waitFor(async () => (await status()).available === 4);

    const changed = await put("base-v2");
    const rev2: string = changed.revision;
    expect(rev2).not.toBe(rev1);
    expect(changed.pool).toMatchObject({ updateRevision: rev2, currentRevision: rev1, updatedReplicas: 1, updatedAvailableReplicas: 0, available: 3, creating: 1 });
    await agent.waitUntil(() => unreported(rev2).length === 1 && poolIntents(rev1, "deleted").length === 1);
    expect(poolIntents(rev1, "deleted")).toHaveLength(1);

    // A claim now gets the current member still creating, not one of the three old available ones.
    const creating = unreported(rev2)[0]!.sandboxId;
    const claim = expectStatus(call("/sandboxes", { key: team.key, body: { templateID: team.template, timeout: 300 } }), 201);
    await agent.waitUntil(() => agent.sandboxes.get(creating)?.intent.owner.kind === "sandbox");
    ready(creating);
    expect((await claim).sandboxID).toBe(creating);

    // Each replacement made ready lets exactly one more old member go.
    let rounds = 0;
    while (!((await status()).currentRevision === rev2 && (await status()).updatedAvailableReplicas === 4)) {
      await agent.waitUntil(() => unreported(rev2).length > 0);
      const deletedBefore = poolIntents(rev1, "deleted").length;
      const readyBefore = poolIntents(rev2, "running").filter((i) => reported.has(`${i.sandboxId}@${i.generation}`)).length;
      expect(unreported(rev2)).toHaveLength(1);
      // Old members gone ≤ their replacements ready (the claimed one counts as neither) + 1.
      expect(deletedBefore).toBeLessThanOrEqual(readyBefore + 1);
      ready(unreported(rev2)[0]!.sandboxId);
      await waitFor(async () => unreported(rev2).length > 0 || ((await status()).updatedAvailableReplicas === 4 && (await status()).currentRevision === rev2));
      expect(++rounds).toBeLessThan(10);
    }
    expect(poolIntents(rev1, "deleted").map((i) => i.sandboxId).sort()).toEqual(
      poolIntents(rev1, "running").map((i) => i.sandboxId).filter((id) => id !== before.sandboxID).sort(),
    );
    expect(await status()).toMatchObject({ updateRevision: rev2, currentRevision: rev2, updatedReplicas: 4, updatedAvailableReplicas: 4, available: 4, creating: 0 });
    // The sandbox claimed before the change got no intent from the pool, and still runs.
    expect(agent.sandboxes.get(before.sandboxID)?.intent).toMatchObject({ owner: { kind: "sandbox" }, desired: { state: "running" }, template: { revision: rev1 } });
    await expectStatus(call(`/sandboxes/${before.sandboxID}`, { key: team.key }), 200);
  });

  it("an opt-in flag put as an explicit false is the revision without it (the warm members are the same: nothing rolls); true is a new one", async () => {
    const team = await createTeam(unique("roll-false"));
    const agent = await startAgent(team.cluster, { observe: false });
    const path = `/admin/teams/${team.name}/templates/${team.template}`;
    const put = async (flags: Record<string, boolean>) => (await expectStatus(call(path, { method: "PUT", body: { spec: { cluster: team.cluster, replicas: 1, ...flags } } }), 200)).revision as string;
    const absent = await put({});
    await agent.waitUntil(() => agent.received.some((r) => r.intent.owner.kind === "pool" && r.intent.desired.state === "running"));
    for (const flag of ["codeInterpreter", "nestedUserNamespaces"]) {
      expect(await put({ [flag]: false }), flag).toBe(absent);
      expect(await put({ [flag]: true }), flag).not.toBe(absent);
      expect(await put({}), flag).toBe(absent);
    }
    expect(await put({ codeInterpreter: false, nestedUserNamespaces: false })).toBe(absent);
    expect((await expectStatus(call(path), 200)).pool).toMatchObject({ updateRevision: absent });
  });

  it("refuses a malformed updateStrategy with a 400", async () => {
    const team = await createTeam(unique("roll-bad"));
    for (const maxUnavailable of ["20", "-1", -1, "1000%", 1.5]) {
      const res = await expectStatus(call(`/admin/teams/${team.name}/templates/${team.template}`, { method: "PUT", body: { spec: { updateStrategy: { maxUnavailable } } } }), 400);
      expect(res.message).toMatch(/maxUnavailable/);
    }
  });
});
