// The cluster's SQLite rows inside a real Durable Object: a desired table written before the team
// had a column of its own (it was an index over the intent's JSON) is extended on load, so the
// teams of the sandboxes it already held still decide which security profiles its agent gets
// (liveTeams, hasTeam), and a new intent of the same sandbox replaces its team; rows the older code
// writes after that (a rollback) get their team on the next open.
import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import type { ClusterDO } from "../../durable-objects/cluster/cluster-do.ts";
import { openClusterStore } from "../../durable-objects/cluster/store.ts";
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
});
