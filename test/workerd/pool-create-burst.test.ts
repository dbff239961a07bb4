// The burst through the real create route: 200 concurrent POST /sandboxes against a
// template whose pool keeps 100 warm members, with the scripted agent acking over the agent link.
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { call, createTeam, expectStatus, startAgent, unique } from "./helpers.ts";
import { waitFor } from "../support/wait-for.ts";

describe("create route with a warm pool", () => {
  it("200 concurrent creates against a pool of 100 give 200 distinct running sandboxes", async () => {
    const team = await createTeam(unique("burst"), { replicas: 100 });
    // Past the default quota of 100 running sandboxes (wrangler.toml).
    await expectStatus(call(`/admin/teams/${team.name}/quota`, { method: "PUT", body: { runningSandboxes: 1000 } }), 200);
    const agent = await startAgent(team.cluster);
    const pool = env.POOL.get(env.POOL.idFromName(`${(await expectStatus(call("/teams", { key: team.key }), 200))[0].teamID}/${team.template}`));
    await waitFor(async () => (await pool.status()).available === 100);
    const warm = new Set(agent.running());
    const responses = await Promise.all(
      Array.from({ length: 200 }, () => call("/sandboxes", { key: team.key, body: { templateID: team.template, timeout: 300 } })),
    );
    const bodies = await Promise.all(responses.map((r) => expectStatus(r, 201)));
    const ids = bodies.map((b) => b.sandboxID as string);
    expect(new Set(ids).size).toBe(200);
    expect(ids.filter((id) => warm.has(id))).toHaveLength(100);
    // None lost: the agent runs every one of them (the on-demand ones once created).
    await agent.waitUntil(() => ids.every((id) => agent.sandboxes.get(id)?.phase === "Running"), 30_000);
    const list = await expectStatus(call("/v2/sandboxes?limit=100", { key: team.key }), 200);
    expect(list.length).toBe(100);
  }, 60_000);
});
