// E2B pause returns once the sandbox is paused (E2B's POST /sandboxes/{id}/pause and the SDKs'
// pause answer only then), with a scripted agent that carries a pause out late: it holds the pause
// intent, acks it `accepted` on release and reports the sandbox Paused, as the Kubernetes driver
// does for a pod that takes a while to stop. What a user does right after the answer (get, list,
// snapshot, connect) finds the sandbox paused; a pause that runs out of time or fails says so, and
// kubectl's pause (a request over the agent link) is not held on the agent that sent it.
import { env, exports } from "cloudflare:workers";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sandboxHandle } from "../../../durable-objects/sandbox/stub.ts";
import { CrdLink } from "../../support/crd-link.ts";
import { fetchTransport, ScriptedAgent } from "../../support/scripted-agent.ts";
import { waitFor } from "../../support/wait-for.ts";
import { call, createTeam, expectError, expectStatus, startAgent, unique, type TestTeam } from "../helpers.ts";

let team: TestTeam;
let agent: ScriptedAgent;
/** Sandboxes whose pause the agent holds until `agent.release(id)`. */
const slow = new Set<string>();
/** Sandboxes whose pause the agent rejects. */
const refused = new Set<string>();

beforeAll(async () => {
  team = await createTeam(unique("pause"), { replicas: 1 });
  agent = await startAgent(team.cluster, {
    hold: (i) => i.desired.state === "paused" && slow.has(i.sandboxId),
    holdAcks: true,
    reject: (i) => (i.desired.state === "paused" && refused.has(i.sandboxId) ? "scripted: cannot freeze" : undefined),
  });
  await agent.waitUntil(() => agent.running().length >= 1);
});
afterAll(() => agent.disconnect());

async function create(): Promise<string> {
  return (await expectStatus(call("/v2/sandboxes", { key: team.key, body: { templateID: team.template } }), 201)).sandboxID;
}
const pause = (id: string, body: unknown = {}) => call(`/sandboxes/${id}/pause`, { key: team.key, body });
const state = async (id: string) => (await expectStatus(call(`/sandboxes/${id}`, { key: team.key }), 200)).state;

/** Carries out the held pause of `id` (later intents of it are not held). */
function release(id: string): void {
  slow.delete(id);
  agent.release(id);
}

/** Releases the held pause of `id` a little after the agent got it, whatever the edge does meanwhile. */
function releaseLater(id: string): void {
  void agent.waitUntil(() => agent.held.has(id), 15_000).then(() => setTimeout(() => release(id), 300));
}

describe("pause", () => {
  it("answers 204 only once the agent has paused it: get, list, a snapshot and connect right after find it paused", async () => {
    const id = await create();
    slow.add(id);
    releaseLater(id);
    await expectStatus(pause(id), 204);
    // The agent carried it out before the answer.
    expect(agent.sandboxes.get(id)?.phase).toBe("Paused");
    expect(await state(id)).toBe("paused");
    const listed = await expectStatus(call("/v2/sandboxes?state=paused", { key: team.key }), 200);
    expect(listed.map((s: { sandboxID: string }) => s.sandboxID)).toContain(id);
    // A snapshot is refused while a sandbox is pausing; right after the pause it is taken, paused.
    await expectStatus(call(`/sandboxes/${id}/snapshots`, { key: team.key, body: {} }), 201);
    expect(await state(id)).toBe("paused");
    await expectStatus(pause(id), 409);
    await expectStatus(call(`/sandboxes/${id}/connect`, { key: team.key, body: { timeout: 60 } }), 201);
    expect(agent.sandboxes.get(id)?.phase).toBe("Running");
  });

  it("a pause the agent has not finished in time is an error saying it continues; the sandbox then pauses", async () => {
    const id = await create();
    slow.add(id);
    // The route's bound is DEFAULT_WAIT_MS (10 s); the group's own call takes a shorter one.
    const res = await sandboxHandle(env, id).pause({ teamId: "", admin: true }, undefined, 300);
    expect(res).toMatchObject({ ok: false, error: { code: "internal_server_error", message: expect.stringMatching(/did not pause within 300 ms; the pause continues/) } });
    expect(await state(id)).toBe("paused");
    await expectStatus(pause(id), 409); // E2B's "already paused"
    release(id);
    await waitFor(async () => (await sandboxHandle(env, id).inspect())?.phase === "Paused", { what: "the sandbox paused" });
    expect(agent.sandboxes.get(id)?.phase).toBe("Paused");
  });

  it("a pause the agent refuses is a 500 naming why", async () => {
    const id = await create();
    refused.add(id);
    await expectError(pause(id), 500, /failed pausing: .*scripted: cannot freeze/);
  });

  it("an unknown sandbox is E2B's 404", async () => {
    await expectError(pause("nosuchsandbox0000000"), 404);
  });
});

describe("kubectl pause", () => {
  it("is answered once stored, not held on the agent that asked (it carries the pause out itself)", async () => {
    const cluster = unique("pause-kubectl");
    const own = await createTeam(cluster, { cluster });
    const held = new ScriptedAgent({ hold: (i) => i.desired.state === "paused", holdAcks: true });
    const crd = new CrdLink();
    await crd.connect(held, fetchTransport((url, init) => exports.default.fetch(url, init) as never, "test-cluster-token", cluster));
    try {
      const id = (await expectStatus(call("/v2/sandboxes", { key: own.key, body: { templateID: own.template } }), 201)).sandboxID as string;
      const generation = (await sandboxHandle(env, id).inspect())!.generation;
      // Answered while the agent still holds the pause (a reply held on its ack would time out here).
      expect(await crd.call("requests", { sandboxId: id, namespace: own.name, action: "pause", generation }, 5_000)).toMatchObject({ result: "applied" });
      await held.waitUntil(() => held.held.has(id));
      expect(held.sandboxes.get(id)?.phase).toBe("Running");
      held.release(id);
      await waitFor(async () => (await sandboxHandle(env, id).inspect())?.phase === "Paused", { what: "the sandbox paused" });
    } finally {
      held.disconnect();
    }
  });
});
