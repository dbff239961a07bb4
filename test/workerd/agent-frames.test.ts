// The agent is untrusted: a malformed ack or observations frame (the two that come with every
// create, or one ack frame carrying both), or one past a bound, closes the session without touching any state, and the intent it
// would have acked is delivered again to the next session.
import { env, exports } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { IntentSchema } from "../../schema/protocol/index.ts";
import { fetchTransport, ScriptedAgent } from "../support/scripted-agent.ts";

describe("agent frames", () => {
  it("a malformed or unbounded ack or observations frame closes the session and changes nothing", async () => {
    for (const [n, bad] of [
      { type: "ack", items: [{ seq: 1, sandboxId: "sbxframe0", generation: -1, result: "applied" }] },
      { type: "observations", items: [{ sandboxId: "sbxframe1", generation: 1, phase: "Running", ready: "yes", observedAt: 1 }] },
      // Past a bound: an error message longer than any the edge keeps (the agent cuts its own).
      { type: "observations", items: [{ sandboxId: "sbxframe2", generation: 1, phase: "Running", ready: true, observedAt: 1, message: "x".repeat(5000) }] },
      { type: "observations", items: [{ sandboxId: "sbxframe3", generation: 1, phase: "Running", ready: true, observedAt: 1, conditions: Array.from({ length: 65 }, (_, i) => ({ type: `C${i}`, status: "True" })) }] },
      // A well-formed ack beside an observation past a bound (ackObservations): the whole frame is
      // refused, so the ack is not applied either.
      { type: "ack", items: [{ seq: 1, sandboxId: "sbxframe4", generation: 1, result: "applied" }], observations: [{ sandboxId: "sbxframe4", generation: 1, phase: "Running", ready: true, observedAt: 1, message: "x".repeat(5000) }] },
      // Refused by a pattern, an enum, a lower bound. The enum's message is over a close frame's
      // 123 bytes: the session must close all the same.
      { type: "ack", items: [{ seq: 1, sandboxId: "SBX-frame5", generation: 1, result: "applied" }] },
      { type: "observations", items: [{ sandboxId: "sbxframe6", generation: 1, phase: "Exploded", ready: true, observedAt: 1 }] },
      { type: "ack", items: [] },
    ].entries()) {
      const cluster = `c-frames-${n}`;
      const stub = env.CLUSTER.get(env.CLUSTER.idFromName(cluster));
      const link = fetchTransport((url, init) => exports.default.fetch(url, init), "test-cluster-token", cluster);
      const agent = new ScriptedAgent({ ackDelayMs: 60_000, observe: false });
      await agent.connect(link);
      const intent = IntentSchema.parse({ sandboxId: `sbxframe${n}`, generation: 1, owner: { kind: "sandbox" }, desired: { state: "running" }, template: { id: "base", revision: "r1" }, issuedAt: Date.now() });
      const queued = await stub.enqueue([intent]);
      expect(queued.ok).toBe(true);
      await agent.waitUntil(() => agent.received.length === 1);
      agent.sendRaw(JSON.stringify(bad));
      await agent.waitUntil(() => agent.closed !== null);
      expect(agent.closed?.code).toBe(4400);
      expect(agent.errors.join()).toMatch(/bad_frame/);
      // The intent is still unacked, and delivered again to the next session.
      expect(await stub.status()).toMatchObject({ connected: false, pending: 1 });
      const next = new ScriptedAgent();
      expect((await next.connect(link)).resync.redelivered).toBe(1);
      await next.waitUntil(() => next.running().includes(`sbxframe${n}`));
      next.disconnect();
    }
  });
});
