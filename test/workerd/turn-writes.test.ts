// Writes held to the end of the turn (durable-objects/turn-writes.ts) commit all or none, and a
// failed batch resets the object: its memory already held every caller's change, so without the
// reset an owner's resend of an intent that was never stored would be dropped as a repeat.
import { env } from "cloudflare:workers";
import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { ClusterDO } from "../../durable-objects/cluster/cluster-do.ts";
import type { IntentWrite } from "../../durable-objects/cluster/store.ts";
import { IntentSchema, type Intent } from "../../schema/protocol/index.ts";
import { unique } from "./helpers.ts";

function intent(id: string): Intent {
  return IntentSchema.parse({ sandboxId: id, generation: 1, owner: { kind: "sandbox" }, desired: { state: "running" }, template: { id: "base", revision: "r1" }, issuedAt: Date.now() });
}

describe("writes held to the end of the turn", () => {
  it("a write that fails takes its whole batch with it, and the object reloads: a resend of a neighbour's intent is taken as new", async () => {
    const cluster = env.CLUSTER.get(env.CLUSTER.idFromName(unique("turn")));
    const poison = `sbxpoison${Date.now()}`;
    const victim = `sbxvictim${Date.now()}`;
    await runInDurableObject(cluster, (instance: ClusterDO) => {
      const o = instance as unknown as { load(): unknown; store: { writeIntents(ws: IntentWrite[]): void } };
      o.load();
      const real = o.store.writeIntents.bind(o.store);
      o.store.writeIntents = (ws) => {
        if (ws.some((w) => w.op === "save" && w.intent.sandboxId === poison)) throw new Error("scripted: the row is too big");
        real(ws);
      };
    });
    // Both in one turn: one batch, one commit.
    const first = await Promise.allSettled([cluster.enqueue([intent(poison)]), cluster.enqueue([intent(victim)])]);
    for (const r of first) expect(r.status === "rejected" || r.value.ok === false).toBe(true);
    // The owner sends the victim's intent again; the object holds only what was stored.
    const again = await cluster.enqueue([intent(victim)]);
    expect(again.ok && again.seqs[0]).toBeGreaterThan(0);
    const status = await cluster.status();
    expect(status.pending).toBe(1);
  });
});
