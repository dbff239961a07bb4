// The cluster session machine, row by row: (desired + outbox, event) → (effects, seqs).
import { describe, expect, it } from "vitest";
import { initialState, transition, type ClusterEffect, type ClusterEvent, type ClusterState } from "../../../../durable-objects/cluster/machine.ts";
import { IntentSchema, type Intent, type Observation, type Owner, type SandboxId } from "../../../../schema/protocol/index.ts";

const NOW = 5_000_000;
const POOL: Owner = { kind: "pool", id: "t1/base" };
const SBX: Owner = { kind: "sandbox" };

function intent(id: string, generation: number, owner: Owner = SBX, state: "running" | "deleted" = "running"): Intent {
  return IntentSchema.parse({ sandboxId: id, generation, owner, desired: { state }, template: state === "deleted" ? null : { id: "base", revision: "r1" }, issuedAt: NOW });
}

function obs(id: string, generation: number, phase: Observation["phase"] = "Running"): Observation {
  return { sandboxId: id as SandboxId, generation, phase, ready: phase === "Running", endpoint: null, observedAt: NOW };
}

interface Setup {
  connected?: boolean;
  /** Desired entries `id@gen:state:owner` (owner p = pool, s = sandbox). */
  desired?: string[];
  /** Pending outbox rows `seq=id@gen`, with sentAt. */
  outbox?: { seq: number; id: string; gen: number; sentAt?: number | null }[];
}

function cluster(s: Setup): ClusterState {
  const st = initialState(100);
  st.connected = s.connected ?? false;
  for (const d of s.desired ?? []) {
    const [idGen, state, owner] = d.split(":") as [string, string, string];
    const [id, gen] = idGen.split("@") as [string, string];
    st.desired.set(id as SandboxId, { generation: Number(gen), state: state as "running", owner: owner === "p" ? POOL : SBX });
  }
  for (const o of s.outbox ?? []) {
    st.outbox.set(o.seq, { sandboxId: o.id as SandboxId, generation: o.gen, sentAt: o.sentAt ?? null });
    st.pendingSeq.set(o.id as SandboxId, o.seq);
  }
  return st;
}

function summarize(effects: ClusterEffect[]): string[] {
  return effects.map((e) => {
    switch (e.type) {
      case "save-desired":
        return `save:${e.intent.sandboxId}@${e.intent.generation}:${e.intent.desired.state}:${e.intent.owner.kind}`;
      case "drop-desired":
        return `drop:${e.sandboxId}`;
      case "queue":
        return `queue:${e.seq}=${e.sandboxId}${e.intent ? "" : "(copy)"}`;
      case "unqueue":
        return `unqueue:${e.seqs.join(",")}`;
      case "send":
        return `send:${e.seqs.join(",")}`;
      case "welcome":
        return `welcome:o${e.resync.orphans}/r${e.resync.recreated}/d${e.resync.redelivered}`;
      case "route":
        return `route:${e.owner.kind}:${e.observations.map((o) => `${o.sandboxId}=${o.phase}`).join(",")}`;
      case "acked":
        return `acked:${e.items.map((a) => `${a.seq}/${a.result}`).join(",")}`;
    }
  });
}

function hello(inventory: Observation[]): ClusterEvent {
  return { type: "hello", hello: { type: "hello", protocol: 1, agentId: "a", agentVersion: "0", driver: "scripted", isolation: "none", ingress: { url: "http://i" }, capabilities: { pauseStrategies: ["Freeze"], builder: false }, inventory } };
}

interface Row {
  name: string;
  setup: Setup;
  event: ClusterEvent;
  effects: string[];
  seqs?: number[];
}

const rows: Row[] = [
  {
    name: "enqueue without an agent records the desired state and queues the intent",
    setup: {},
    event: { type: "enqueue", intents: [intent("a", 1)] },
    effects: ["save:a@1:running:sandbox", "queue:100=a"],
    seqs: [100],
  },
  {
    name: "enqueue with an agent connected also sends it",
    setup: { connected: true },
    event: { type: "enqueue", intents: [intent("a", 1), intent("b", 1)] },
    effects: ["save:a@1:running:sandbox", "queue:100=a", "save:b@1:running:sandbox", "queue:101=b", "send:100,101"],
    seqs: [100, 101],
  },
  {
    name: "an intent not newer than the desired generation is dropped (idempotent)",
    setup: { connected: true, desired: ["a@2:running:s"] },
    event: { type: "enqueue", intents: [intent("a", 2), intent("a", 1)] },
    effects: [],
    seqs: [0, 0],
  },
  {
    name: "a newer intent supersedes the sandbox's pending one, which is acked as stale",
    setup: { desired: ["a@1:running:p"], outbox: [{ seq: 7, id: "a", gen: 1 }] },
    event: { type: "enqueue", intents: [intent("a", 2)] },
    effects: ["save:a@2:running:sandbox", "unqueue:7", "acked:7/stale", "queue:100=a"],
    seqs: [100],
  },
  {
    name: "an ack removes the intent from the outbox; a duplicate ack changes nothing",
    setup: { connected: true, desired: ["a@1:running:s"], outbox: [{ seq: 7, id: "a", gen: 1 }] },
    event: { type: "ack", items: [{ seq: 7, sandboxId: "a" as SandboxId, generation: 1, result: "applied" }, { seq: 7, sandboxId: "a" as SandboxId, generation: 1, result: "applied" }] },
    effects: ["unqueue:7", "acked:7/applied"],
  },
  {
    name: "an ack naming another sandbox than the seq's is ignored",
    setup: { connected: true, desired: ["a@1:running:s"], outbox: [{ seq: 7, id: "a", gen: 1 }] },
    event: { type: "ack", items: [{ seq: 7, sandboxId: "b" as SandboxId, generation: 1, result: "applied" }] },
    effects: [],
  },
  {
    name: "a rejected intent reaches its owner as a Failed observation",
    setup: { connected: true, desired: ["a@1:running:p"], outbox: [{ seq: 7, id: "a", gen: 1 }] },
    event: { type: "ack", items: [{ seq: 7, sandboxId: "a" as SandboxId, generation: 1, result: "rejected", message: "no such image" }] },
    effects: ["unqueue:7", "acked:7/rejected", "route:pool:a=Failed"],
  },
  {
    name: "hello diffs the inventory: orphan deleted, missing recreated, gone forgotten, outbox redelivered",
    setup: {
      desired: ["run@2:running:s", "miss@1:running:p", "gone@3:deleted:s", "pend@1:running:p"],
      outbox: [{ seq: 5, id: "pend", gen: 1 }],
    },
    event: hello([obs("run", 2), obs("orphan", 4)]),
    effects: [
      "save:orphan@5:deleted:cluster",
      "queue:100=orphan",
      "queue:101=miss(copy)",
      "route:sandbox:run=Running",
      "route:sandbox:gone=Deleted",
      "drop:gone",
      "welcome:o1/r1/d1",
      "send:5,100,101",
    ],
  },
  {
    name: "hello resends the desired intent of a sandbox the agent runs at an older generation",
    setup: { desired: ["a@3:running:s"] },
    event: hello([obs("a", 2)]),
    effects: ["queue:100=a(copy)", "route:sandbox:a=Running", "welcome:o0/r1/d0", "send:100"],
  },
  {
    name: "observations go to their owners, grouped per pool and per sandbox",
    setup: { connected: true, desired: ["p1@1:running:p", "p2@1:running:p", "s1@2:running:s"] },
    event: { type: "observations", items: [obs("p1", 1), obs("s1", 2), obs("p2", 1)] },
    effects: ["route:pool:p1=Running,p2=Running", "route:sandbox:s1=Running"],
  },
  {
    name: "an observation of a sandbox nobody wants becomes an orphan delete",
    setup: { connected: true },
    event: { type: "observations", items: [obs("ghost", 1)] },
    effects: ["save:ghost@2:deleted:cluster", "queue:100=ghost", "send:100"],
  },
  {
    name: "a Deleted observation at the desired generation forgets the sandbox after routing it",
    setup: { connected: true, desired: ["a@2:deleted:s"] },
    event: { type: "observations", items: [obs("a", 2, "Deleted")] },
    effects: ["route:sandbox:a=Deleted", "drop:a"],
  },
  {
    name: "unacked intents sent before the cutoff are sent again",
    setup: { connected: true, desired: ["a@1:running:s", "b@1:running:s"], outbox: [{ seq: 1, id: "a", gen: 1, sentAt: NOW - 60_000 }, { seq: 2, id: "b", gen: 1, sentAt: NOW }] },
    event: { type: "redeliver", olderThan: NOW - 30_000 },
    effects: ["send:1"],
  },
  {
    name: "nothing is sent while disconnected",
    setup: { connected: false, desired: ["a@1:running:s"], outbox: [{ seq: 1, id: "a", gen: 1, sentAt: NOW - 60_000 }] },
    event: { type: "redeliver", olderThan: NOW - 30_000 },
    effects: [],
  },
];

describe("cluster machine", () => {
  it.each(rows)("$name", (row) => {
    const out = transition(cluster(row.setup), row.event, NOW);
    expect(summarize(out.effects)).toEqual(row.effects);
    if (row.seqs) expect(out.seqs).toEqual(row.seqs);
  });

  it("a disconnect forgets what was sent, so the next hello redelivers everything unacked", () => {
    const st = cluster({ connected: true });
    transition(st, { type: "enqueue", intents: [intent("a", 1), intent("b", 1)] }, NOW);
    transition(st, { type: "ack", items: [{ seq: 100, sandboxId: "a" as SandboxId, generation: 1, result: "applied" }] }, NOW);
    transition(st, { type: "disconnect" }, NOW);
    expect(summarize(transition(st, { type: "enqueue", intents: [intent("c", 1)] }, NOW).effects)).not.toContain("send:102");
    const out = transition(st, hello([obs("a", 1), obs("b", 1)]), NOW);
    expect(summarize(out.effects).filter((e) => e.startsWith("send") || e.startsWith("welcome"))).toEqual(["welcome:o0/r0/d2", "send:101,102"]);
  });
});
