// The cluster's SQLite rows inside a real Durable Object: a desired table written before the team
// had a column of its own (it was an index over the intent's JSON) is extended on load, so the
// teams of the sandboxes it already held still decide which security profiles its agent gets
// (liveTeams, hasTeam), and a new intent of the same sandbox replaces its team; rows the older code
// writes after that (a rollback) get their team on the next open.
import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import type { ClusterDO } from "../../durable-objects/cluster/cluster-do.ts";
import { openClusterStore, type IntentWrite } from "../../durable-objects/cluster/store.ts";
import { IntentSchema, type SandboxId } from "../../schema/protocol/index.ts";
import { unique } from "./helpers.ts";

describe("cluster store", () => {
  it("extends an older desired table and keeps the teams of its rows", async () => {
    const stub = env.CLUSTER.get(env.CLUSTER.idFromName(unique("store")));
    await runInDurableObject(stub, (_i: ClusterDO, state) => {
      const sql = state.storage.sql;
      sql.exec(`CREATE TABLE desired (sandbox_id TEXT PRIMARY KEY, generation INTEGER NOT NULL, owner TEXT NOT NULL, state TEXT NOT NULL,
        intent TEXT NOT NULL)`);
      sql.exec("CREATE INDEX desired_team ON desired (json_extract(intent, '$.team'))");
      const intent = (id: string, team: string | null) => IntentSchema.parse({ sandboxId: id, generation: 1, owner: { kind: "sandbox" }, desired: { state: "running" }, template: { id: "t", revision: "r1" }, team, issuedAt: 1 });
      for (const i of [intent("olda", "team-a"), intent("oldn", null)]) {
        sql.exec("INSERT INTO desired VALUES (?, 1, ?, 'running', ?)", i.sandboxId, JSON.stringify(i.owner), JSON.stringify(i));
      }
      const store = openClusterStore(sql);
      expect(store.liveTeams()).toEqual(["team-a"]);
      expect([store.hasTeam("team-a"), store.hasTeam("team-b")]).toEqual([true, false]);
      // A newer intent of the same sandbox, now of team-b: team-a has no sandbox here any more.
      store.saveDesired({ ...intent("olda", "team-b"), generation: 2 });
      store.saveDesired(intent("newc", "team-c"));
      const again = openClusterStore(sql);
      expect(again.liveTeams().sort()).toEqual(["team-b", "team-c"]);
      expect([again.hasTeam("team-a"), again.hasTeam("team-b")]).toEqual([false, true]);
      expect(again.load().desired.get("olda" as SandboxId)?.generation).toBe(2);
      // The code from before the column, after a rollback, writes its five columns: team NULL.
      // The next open by this code fills it in (the column exists, so no migration runs).
      const oldWrite = intent("rolled", "team-d");
      sql.exec("INSERT OR REPLACE INTO desired (sandbox_id, generation, owner, state, intent) VALUES (?, 1, ?, 'running', ?)", oldWrite.sandboxId, JSON.stringify(oldWrite.owner), JSON.stringify(oldWrite));
      const rolledForward = openClusterStore(sql);
      expect(rolledForward.liveTeams().sort()).toEqual(["team-b", "team-c", "team-d"]);
      expect(rolledForward.hasTeam("team-d")).toBe(true);
    });
  });

  it("writes a turn's intent writes in a few statements, storing what the same writes one by one store", async () => {
    const intent = (id: string, generation: number, team: string | null = "team-a") =>
      IntentSchema.parse({ sandboxId: id, generation, owner: { kind: "sandbox" }, desired: { state: "running" }, template: { id: "t", revision: `r${generation}` }, team, issuedAt: generation });
    const save = (id: string, generation: number, team?: string | null): IntentWrite => {
      const i = intent(id, generation, team);
      return { op: "save", intent: i, text: JSON.stringify(i) };
    };
    const queue = (seq: number, id: string, generation: number): IntentWrite => ({ op: "queue", seq, sandboxId: id as SandboxId, generation });
    // Runs longer than one statement's parameters allow, a sandbox saved twice in one run and
    // dropped and saved again, and a seq queued and unqueued in the same batch (an intent
    // superseded in the turn that queued it), between runs of the other table's writes.
    const writes: IntentWrite[] = [];
    for (let n = 0; n < 40; n++) writes.push(save(`s${n}`, 1), queue(n + 1, `s${n}`, 1));
    writes.push(save("s3", 2, "team-b"), { op: "unqueue", seqs: [4] }, queue(41, "s3", 2));
    writes.push({ op: "drop", sandboxId: "s5" as SandboxId }, { op: "drop", sandboxId: "s6" as SandboxId }, { op: "unqueue", seqs: [6, 7] });
    writes.push(save("s5", 3, null), queue(42, "s5", 3));
    for (let n = 0; n < 70; n++) writes.push(queue(100 + n, `q${n}`, 1));
    writes.push({ op: "unqueue", seqs: Array.from({ length: 120 }, (_, n) => 130 + n) });
    const rows = (sql: SqlStorage) => ({
      desired: sql.exec("SELECT * FROM desired ORDER BY sandbox_id").toArray(),
      outbox: sql.exec("SELECT * FROM outbox ORDER BY seq").toArray(),
    });
    const stored = async (write: (store: ReturnType<typeof openClusterStore>) => void) =>
      runInDurableObject(env.CLUSTER.get(env.CLUSTER.idFromName(unique("writes"))), (_i: ClusterDO, state) => {
        const store = openClusterStore(state.storage.sql);
        write(store);
        return rows(state.storage.sql);
      });
    const batched = await stored((store) => store.writeIntents(writes));
    const oneByOne = await stored((store) => writes.forEach((w) => store.writeIntents([w])));
    expect(batched).toEqual(oneByOne);
    expect(batched.desired).toHaveLength(39); // s6 dropped; s5 saved again
    expect(batched.outbox.map((r) => r.seq)).toEqual([...Array.from({ length: 40 }, (_, n) => n + 1).filter((n) => ![4, 6, 7].includes(n)), 41, 42, ...Array.from({ length: 30 }, (_, n) => 100 + n)]);
  });
});

