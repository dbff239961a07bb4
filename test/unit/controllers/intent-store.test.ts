// The agent's intent store as a restarted agent finds it: what was made durable, the newest of
// what a crash left, and what an older agent wrote.
import { mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, truncateSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { IntentStore } from "../../../controllers/agent/intent-store.ts";
import { IntentSchema } from "../../../schema/protocol/index.ts";

const intent = (id: string, generation: number, state: "running" | "deleted" = "running") =>
  IntentSchema.parse({
    sandboxId: id,
    generation,
    owner: { kind: "sandbox" },
    desired: { state },
    template: { id: "base", revision: "r1", image: "base", user: "user", workdir: "/home/user", resources: { cpuCount: 1, memoryMB: 256 } },
    issuedAt: 0,
  });

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});
const scratch = () => {
  const d = mkdtempSync(join(tmpdir(), "intent-store-"));
  dirs.push(d);
  return d;
};

describe("IntentStore", () => {
  it("keeps on disk what was made durable, one file per sandbox, and nothing of a delete", async () => {
    const dir = scratch();
    const store = new IntentStore(dir);
    store.offer(intent("a", 1));
    expect(new IntentStore(dir).get("a")).toBeUndefined(); // not acked yet: the edge redelivers it
    store.durable("a");
    store.offer(intent("a", 2));
    store.durable("a");
    store.offer(intent("b", 1));
    store.durable("b");
    await store.settled(); // a's first file is gone once its second is on disk
    expect(readdirSync(dir)).toHaveLength(2);
    const restarted = new IntentStore(dir);
    expect([restarted.get("a")?.generation, restarted.get("b")?.generation]).toEqual([2, 1]);
    store.offer(intent("b", 2, "deleted"));
    store.durable("b");
    expect(new IntentStore(dir).ids()).toEqual(["a"]);
  });

  it("after a crash between a write and the removal of the file before it, holds the newer; reads an older agent's file and drops torn ones", async () => {
    const dir = scratch();
    const store = new IntentStore(dir);
    store.offer(intent("a", 1));
    store.durable("a");
    await store.settled();
    const [first] = readdirSync(dir);
    // The same as the next write, but the file before it left in place (the crash).
    const kept = join(dir, "kept");
    renameSync(join(dir, first!), kept);
    store.offer(intent("a", 2));
    store.durable("a");
    await store.settled();
    renameSync(kept, join(dir, first!));
    expect(readdirSync(dir)).toHaveLength(2);
    writeFileSync(join(dir, "c.json"), JSON.stringify(intent("c", 3))); // an older agent's name
    writeFileSync(join(dir, "d.7.json"), "{\"sandboxId\":"); // torn
    writeFileSync(join(dir, "e.9.json.tmp"), JSON.stringify(intent("e", 1))); // a write cut short
    const restarted = new IntentStore(dir);
    expect(restarted.get("a")?.generation).toBe(2);
    expect(restarted.get("c")?.generation).toBe(3);
    expect(restarted.ids().sort()).toEqual(["a", "c"]);
    await restarted.settled();
    expect(readdirSync(dir)).toHaveLength(2);
    // Its next file is named after all it found: the newest stays the newest.
    restarted.offer(intent("c", 4));
    restarted.durable("c");
    expect(new IntentStore(dir).get("c")?.generation).toBe(4);
  });

  /** Generations 1 and 2 of sandbox a made durable, the second one's sweep not run: a's newest file. */
  const twoWritten = (dir: string) => {
    const store = new IntentStore(dir);
    for (const generation of [1, 2]) {
      store.offer(intent("a", generation));
      store.durable("a");
    }
    return join(dir, readdirSync(dir).sort((x, y) => Number(y.split(".")[1]) - Number(x.split(".")[1]))[0]!);
  };

  it("after a host crash that left the newest file empty, holds the intent before it", () => {
    const dir = scratch();
    const newest = twoWritten(dir); // acked; the host dies before its data reached the disk
    truncateSync(newest, 0); // a new file's data lost with delayed allocation
    const restarted = new IntentStore(dir);
    expect(restarted.get("a")?.generation).toBe(1); // the edge resends what is newer
  });

  it("after an agent killed mid-write (a prefix of the newest file under its own name), holds the intent before it and writes after both", () => {
    const dir = scratch();
    const newest = twoWritten(dir);
    truncateSync(newest, Math.floor(readFileSync(newest, "utf8").length / 2)); // the write cut short
    const restarted = new IntentStore(dir);
    expect(restarted.get("a")?.generation).toBe(1);
    restarted.offer(intent("a", 3));
    restarted.durable("a");
    expect(new IntentStore(dir).get("a")?.generation).toBe(3);
  });

  it("forgets a delete as it is offered, before its pass: a crash does not bring the sandbox back", async () => {
    const dir = scratch();
    const store = new IntentStore(dir);
    store.offer(intent("a", 1));
    store.durable("a");
    store.offer(intent("a", 2));
    store.durable("a");
    store.offer(intent("a", 3, "deleted")); // queued behind other passes; the agent dies
    expect(new IntentStore(dir).get("a")).toBeUndefined();
    await store.settled();
    expect(readdirSync(dir)).toEqual([]);
  });
});
