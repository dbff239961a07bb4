// A sandbox whose pid 1 ended and starts again (the local driver reports it Pending with a Ready
// condition False, reason Pid1Restarting): the edge shows it not ready in the admin API, E2B's
// detail and list still say running, and the gateway holds its requests until a report says it
// is ready, instead of forwarding them to a runtime that has no sandbox by that id (whose 502 the
// SDK reads as a killed sandbox). The scripted agent has no ingress: a request let through to the
// forward ends in the gateway's agent-unavailable 503, whose message tells it from the restart's.
import { env, exports } from "cloudflare:workers";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MAX_HELD_PER_SANDBOX } from "../../durable-objects/sandbox/sandbox-group-do.ts";
import { sandboxGroupStub } from "../../durable-objects/sandbox/stub.ts";
import type { ObservationInput } from "../../schema/protocol/index.ts";
import type { ScriptedAgent } from "../support/scripted-agent.ts";
import { waitFor } from "../support/wait-for.ts";
import { call, createTeam, expectStatus, startAgent, unique, type TestTeam } from "./helpers.ts";

let team: TestTeam;
let agent: ScriptedAgent;

beforeAll(async () => {
  team = await createTeam(unique("restart"));
  agent = await startAgent(team.cluster);
});
afterAll(() => agent.disconnect());

const MESSAGE = "its init process (pid 1) ended: the sandbox starts again, its files kept and its processes gone";
const gw = (id: string, path: string, headers: Record<string, string> = {}) => exports.default.fetch(`http://edge.test${path}`, { headers: { "e2b-sandbox-id": id, ...headers } });
const ready = async (id: string) => ((await expectStatus(call(`/admin/sandboxes/${id}`), 200)).conditions as { type: string; status: string; reason: string }[]).find((c) => c.type === "Ready");

function report(id: string, restarting: boolean, by = agent): void {
  const obs: ObservationInput = restarting
    ? { sandboxId: id, generation: by.sandboxes.get(id)!.generation, phase: "Pending", ready: false, endpoint: null, message: MESSAGE, observedAt: Date.now(), conditions: [{ type: "Ready", status: "False", reason: "Pid1Restarting", message: MESSAGE }] }
    : { sandboxId: id, generation: by.sandboxes.get(id)!.generation, phase: "Running", ready: true, endpoint: { runtime: `http://${id}.scripted.invalid:49983` }, observedAt: Date.now() };
  by.report(obs);
}

async function restartingSandbox(of = team, by = agent): Promise<{ id: string; token: string }> {
  const sbx = await expectStatus(call("/sandboxes", { key: of.key, body: { templateID: of.template, timeout: 600, secure: true } }), 201);
  report(sbx.sandboxID, true, by);
  await waitFor(async () => (await ready(sbx.sandboxID))?.reason === "Pid1Restarting", { what: "Ready False Pid1Restarting in the admin API" });
  return { id: sbx.sandboxID, token: sbx.envdAccessToken };
}

describe("a sandbox whose pid 1 starts again", () => {
  it("is not ready in the admin API, running in E2B's detail and list, and its requests wait until it is back, then go on", async () => {
    const { id, token } = await restartingSandbox();
    expect(await ready(id)).toMatchObject({ status: "False", reason: "Pid1Restarting", message: MESSAGE });
    expect(await expectStatus(call(`/sandboxes/${id}`, { key: team.key }), 200)).toMatchObject({ sandboxID: id, state: "running" });
    const listed = (await expectStatus(call("/v2/sandboxes", { key: team.key }), 200)) as { sandboxID: string; state: string }[];
    expect(listed.find((s) => s.sandboxID === id)?.state).toBe("running");

    // envd's /health (what isRunning() sends, which anyone may) and a command with its token.
    const answers: Record<string, Response | undefined> = {};
    const held = [
      gw(id, "/health").then((r) => (answers.health = r)),
      gw(id, "/files?path=/x", { "x-access-token": token }).then((r) => (answers.files = r)),
    ];
    // Not answered while it restarts (the hold's bound is 15 s).
    await new Promise((r) => setTimeout(r, 500));
    expect(Object.keys(answers)).toEqual([]);
    report(id, false);
    await Promise.all(held);
    for (const res of [answers.health!, answers.files!]) {
      // Forwarded once back (here: the scripted cluster's missing ingress), not E2B's 502.
      expect(res.status).toBe(503);
      expect((await res.json()) as { message: string }).toMatchObject({ message: expect.stringContaining("agent") });
    }
    expect(await ready(id)).toMatchObject({ status: "True" });
  });

  it("a request not back within the hold's bound is told to retry (the group's wait times out); one for a sandbox killed meanwhile is E2B's 502", async () => {
    const { id } = await restartingSandbox();
    const waited = await sandboxGroupStub(env, id).restarted(id, 100);
    expect(waited).toMatchObject({ ok: false, error: { code: "sandbox_placement_timeout", message: expect.stringContaining("starting again") } });

    let answered = false;
    const res = gw(id, "/health").finally(() => (answered = true));
    // Held before the kill (else a DELETE that wins the race makes a 502 of any gateway).
    await new Promise((r) => setTimeout(r, 500));
    expect(answered).toBe(false);
    await expectStatus(call(`/sandboxes/${id}`, { key: team.key, method: "DELETE" }), 204);
    const gone = await res;
    expect({ status: gone.status, body: await gone.json() }).toEqual({ status: 502, body: { sandboxId: id, message: "The sandbox was not found", code: 502 } });
  });

  it("past the most requests held for one sandbox, one more is told at once that too many wait (not that it waited), and the held ones go on once it is back", async () => {
    const { id } = await restartingSandbox();
    const group = sandboxGroupStub(env, id);
    const held = Array.from({ length: MAX_HELD_PER_SANDBOX.owner }, () => group.restarted(id, 15_000, "owner"));
    const crowded = await waitFor(async () => {
      const r = await group.restarted(id, 0, "owner");
      return !r.ok && r.error.code !== "sandbox_placement_timeout" && r;
    }, { what: "a refusal other than the wait's timeout" });
    expect(crowded).toMatchObject({ ok: false, error: { code: "sandbox_capacity_unavailable", message: expect.stringContaining(`${MAX_HELD_PER_SANDBOX.owner} requests already wait`) } });
    report(id, false);
    expect((await Promise.all(held)).filter((r) => !r.ok)).toEqual([]);
  });

  it("anyone's requests (envd's /health, no token) past their own bound are told at once that too many wait; the owner's (its token checked) are still held and go on once it is back", async () => {
    const { id, token } = await restartingSandbox();
    // More than both bounds together: on one bound shared by all, the owner's would be refused.
    const anyone = Array.from({ length: MAX_HELD_PER_SANDBOX.owner + MAX_HELD_PER_SANDBOX.anyone + 44 }, () => gw(id, "/health"));
    const answered: Response[] = [];
    for (const p of anyone) void p.then((r) => answered.push(r));
    // Anyone's past their own bound are told at once, as too many waiting; the rest stay held.
    await waitFor(() => answered.length === anyone.length - MAX_HELD_PER_SANDBOX.anyone, { what: "anyone's requests past their bound answered", timeoutMs: 30_000 });
    const crowded = [...answered];
    const told = await Promise.all(crowded.map(async (r) => ({ status: r.status, message: ((await r.json()) as { message: string }).message })));
    expect(told.filter((r) => r.status !== 503 || !r.message.includes("too many requests already wait"))).toEqual([]);

    let ownerDone = false;
    const owner = gw(id, "/files?path=/x", { "x-access-token": token }).finally(() => (ownerDone = true));
    // Anyone's sent after it are still told at once; the owner's is not answered with them.
    const later = Array.from({ length: 8 }, () => gw(id, "/health"));
    const laterAnswered: Response[] = [];
    for (const p of later) void p.then((r) => laterAnswered.push(r));
    await waitFor(() => laterAnswered.length === later.length, { what: "anyone's later requests answered" });
    expect(ownerDone).toBe(false);
    expect(answered).toHaveLength(crowded.length);

    report(id, false);
    const res = await owner;
    // Forwarded once back (here: the scripted cluster's missing ingress, the agent-unavailable
    // answer), not told to retry as crowded.
    expect({ status: res.status, message: ((await res.json()) as { message: string }).message }).toEqual({ status: 503, message: expect.stringContaining("is not connected") });
    // Anyone's held ones go on too.
    const rest = (await Promise.all(anyone)).filter((r) => !crowded.includes(r));
    expect(rest).toHaveLength(MAX_HELD_PER_SANDBOX.anyone);
    for (const r of rest) expect(((await r.json()) as { message: string }).message).not.toContain("starting again");
  });

  it("with its agent away (only the agent can say it is back), a request is answered at once as agent-unavailable, not held", async () => {
    const away = await createTeam(unique("restart-away"));
    const awayAgent = await startAgent(away.cluster);
    const { id } = await restartingSandbox(away, awayAgent);
    awayAgent.disconnect();
    await waitFor(async () => !(await env.CLUSTER.get(env.CLUSTER.idFromName(away.cluster)).status()).connected, { what: "the agent disconnected" });
    const res = await gw(id, "/health");
    expect({ status: res.status, message: ((await res.json()) as { message: string }).message }).toEqual({ status: 503, message: expect.stringContaining("is not connected") });
  });
});
