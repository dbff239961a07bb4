// A template's PoolAutoscaler through the admin API, with the scripted agent on the real agent
// link reporting members ready only when the test says so: a claim burst drains the warm stock
// and the autoscaler grows the pool; once the new members are ready and the burst is over, it
// shrinks it back after its scale-down window. Status says what it decided and why.
import { describe, expect, it } from "vitest";
import { waitFor } from "../support/wait-for.ts";
import { call, createTeam, expectError, expectStatus, startAgent, unique } from "./helpers.ts";

describe("PoolAutoscaler through the admin API", () => {
  it("a claim burst scales the pool up, the end of it scales it back down, with the decision and events in its status", async () => {
    const team = await createTeam(unique("pa"));
    const agent = await startAgent(team.cluster, { observe: false });
    const tpl = `/admin/teams/${team.name}/templates/${team.template}`;
    const readyAll = () => {
      for (const id of agent.running()) {
        const s = agent.sandboxes.get(id)!;
        if (s.intent.owner.kind !== "pool") continue;
        agent.report({ sandboxId: id, generation: s.generation, phase: "Running", ready: true, endpoint: { runtime: `http://${id}.scripted.invalid:49983` }, revision: s.intent.template?.revision, observedAt: Date.now() });
      }
    };
    const pool = async () => (await expectStatus(call(tpl), 200)).pool;
    await expectStatus(call(tpl, { method: "PUT", body: { spec: { cluster: team.cluster, replicas: 2 } } }), 200);
    await agent.waitUntil(() => agent.running().length === 2);
    readyAll();
    await waitFor(async () => (await pool()).available === 2);

    const spec = {
      minReplicas: 1,
      maxReplicas: 10,
      capacityPolicy: { targetAvailable: 2, tolerance: 0, scaleUp: { stabilizationWindowSeconds: 2 }, scaleDown: { stabilizationWindowSeconds: 3 } },
      sampling: { intervalSeconds: 1, windowSeconds: 2 },
    };
    const set = await expectStatus(call(`${tpl}/autoscaler`, { method: "PUT", body: spec }), 200);
    expect(set).toMatchObject({ configured: true, currentReplicas: 2, desiredReplicas: 2, lastDecision: { reason: "WithinTolerance" } });

    // The burst: both warm members are claimed; their replacements are still creating.
    const claims = await Promise.all([0, 1].map(() => expectStatus(call("/sandboxes", { key: team.key, body: { templateID: team.template, timeout: 300 } }), 201)));
    expect(claims).toHaveLength(2);
    const up = await waitFor(async () => {
      const s = await expectStatus(call(`${tpl}/autoscaler`), 200);
      return s.desiredReplicas === 4 && s;
    });
    expect(up.lastDecision).toMatchObject({ reason: "BelowTarget", currentReplicas: 2, desiredReplicas: 4 });
    expect(up.events.filter((e: { reason: string }) => e.reason === "SuccessfulRescale").map((e: { message: string }) => e.message)).toEqual([expect.stringContaining("New size: 4")]);
    expect(await pool()).toMatchObject({ replicas: 4, available: 0, creating: 4 });
    await agent.waitUntil(() => agent.received.filter((r) => r.intent.owner.kind === "pool" && r.intent.desired.state === "running").length === 6);

    // A template PUT while the autoscaler holds the size keeps its size.
    await expectStatus(call(tpl, { method: "PUT", body: { spec: { cluster: team.cluster, replicas: 2 } } }), 200);
    expect(await pool()).toMatchObject({ replicas: 4 });

    // The burst is over: all four become available, above the band; after its window it shrinks.
    readyAll();
    const down = await waitFor(
      async () => {
        const s = await expectStatus(call(`${tpl}/autoscaler`), 200);
        return s.desiredReplicas === 2 && s.lastDecision.reason === "AboveTarget" && s;
      },
      { timeoutMs: 20_000 },
    );
    expect(down.events.filter((e: { reason: string }) => e.reason === "SuccessfulRescale").map((e: { message: string }) => e.message)).toEqual([
      expect.stringContaining("New size: 4"),
      expect.stringContaining("New size: 2"),
    ]);
    expect(down.conditions).toContainEqual(expect.objectContaining({ type: "ScalingActive", status: "True" }));
    await waitFor(async () => (await pool()).replicas === 2 && (await pool()).available === 2);
    expect(agent.received.filter((r) => r.intent.owner.kind === "pool" && r.intent.desired.state === "deleted")).toHaveLength(2);

    await expectStatus(call(`${tpl}/autoscaler`, { method: "DELETE" }), 204);
    expect(await expectStatus(call(`${tpl}/autoscaler`), 200)).toMatchObject({ configured: false });
  });

  it("refuses a bad spec with a 400 and an unknown template with a 404", async () => {
    const team = await createTeam(unique("pa-bad"));
    const path = `/admin/teams/${team.name}/templates/${team.template}/autoscaler`;
    await expectError(call(path, { method: "PUT", body: { maxReplicas: 3, cronPolicies: [{ name: "n", schedule: "* 24 * * *", targetReplicas: 1 }] } }), 400, /hour "24"/);
    await expectError(call(path, { method: "PUT", body: { maxReplicas: 3, cronPolicies: [{ name: "n", schedule: "* * * * *", timeZone: "Atlantis/Capital", targetReplicas: 1 }] } }), 400, /time zone/);
    await expectError(call(path, { method: "PUT", body: { minReplicas: 4, maxReplicas: 3 } }), 400, /minReplicas/);
    await expectError(call(path, { method: "PUT", body: { maxReplicas: 3, capacityPolicy: { targetAvailable: "x" } } }), 400);
    await expectError(call(`/admin/teams/${team.name}/templates/nope/autoscaler`, { method: "PUT", body: { maxReplicas: 3 } }), 404);
  });
});
