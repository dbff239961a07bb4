// Step claims (controllers/drivers/local/builder/step-claim.ts): one build of a step key at a time
// on a machine. A claim is never seen half written, so a waiter never mistakes a claim being made
// for a dead one; a wait ends on the caller's signal and after its bound, naming the owner; and a
// build waiting on a hung owner fails by itself (its progress lines would otherwise keep the
// edge's silence check from ever failing it) or when its builder is disposed. A dead builder's
// claim is taken over by one waiter only, however many race for it.
import { createHash } from "node:crypto";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { Worker } from "node:worker_threads";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { claimStep, removeDeadClaims } from "../../../../../controllers/drivers/local/builder/step-claim.ts";
import { TemplateBuilder } from "../../../../../controllers/drivers/local/builder/builder.ts";
import { layerIdOf, planSteps } from "../../../../../controllers/drivers/local/builder/plan.ts";
import { RootfsStore } from "../../../../../controllers/drivers/local/rootfs/store.ts";
import type { BuildEvents, BuildFrame } from "../../../../../schema/protocol/build.ts";

const root = mkdtempSync(join(tmpdir(), "step-claim-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));
let n = 0;
const layersDir = () => {
  const dir = join(root, `l${n++}`);
  mkdirSync(dir);
  return dir;
};

/** A live owner's mark as a claim holds it: this test process (pid and start time). */
function liveMark(): string {
  const stat = readFileSync(`/proc/${process.pid}/stat`, "utf8");
  return `${process.pid} ${stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19]}`;
}

const noWait = { onWait: () => undefined, pollMs: 10 };

describe("step claims", () => {
  it("a claim is there whole at once, under its name only", async () => {
    const dir = layersDir();
    const release = await claimStep(dir, "step-a", { ...noWait, hasLayer: () => false });
    expect(typeof release).toBe("function");
    expect(readFileSync(join(dir, ".claim-step-a"), "utf8")).toBe(liveMark());
    expect(readdirSync(dir)).toEqual([".claim-step-a"]);
    (release as () => void)();
    expect(readdirSync(dir)).toEqual([]);
  });

  it("a waiter that reads an empty claim (one being made) waits for it rather than taking it over", async () => {
    const dir = layersDir();
    const file = join(dir, ".claim-step-b");
    writeFileSync(file, "");
    let layer = false;
    const waited = claimStep(dir, "step-b", { ...noWait, hasLayer: () => layer });
    await new Promise((r) => setTimeout(r, 100));
    // The owner's mark lands, the owner publishes the layer and releases its claim.
    expect(readFileSync(file, "utf8")).toBe("");
    writeFileSync(file, liveMark());
    layer = true;
    rmSync(file);
    expect(await waited).toBe("cached");
  });

  it("a wait on a live owner ends after maxWaitMs with an error naming it, and at once on an abort", async () => {
    const dir = layersDir();
    writeFileSync(join(dir, ".claim-step-c"), liveMark());
    await expect(claimStep(dir, "step-c", { ...noWait, hasLayer: () => false, maxWaitMs: 100 })).rejects.toThrow(`gave up waiting for another build of the same step on this machine (pid ${process.pid})`);
    const stop = new AbortController();
    const waiting = claimStep(dir, "step-c", { ...noWait, pollMs: 600_000, hasLayer: () => false, signal: stop.signal });
    setTimeout(() => stop.abort(new Error("stopped")), 50);
    await expect(waiting).rejects.toThrow();
  }, 10_000);
});

describe("a build waiting on another build's claim", () => {
  /** A store with a `base` of one (empty) layer, a build of one RUN step from it, and that step's
   * layer claimed by a live owner that never finishes. */
  function setup(stepTimeoutMs: number) {
    const dir = join(root, `store${n++}`);
    const store = new RootfsStore(dir);
    mkdirSync(join(dir, "layers", "base-l", "rootfs"), { recursive: true });
    writeFileSync(join(dir, "layers", "base-l", "layer.json"), JSON.stringify({ id: "base-l" }));
    store.putTemplate("base", ["base-l"]);
    const frame: BuildFrame = { type: "build", buildId: `b${n}`, teamId: "team", from: { rootfs: "base" }, steps: [{ type: "RUN", args: ["true"], force: false }], force: false, cpuCount: 1, memoryMB: 512, output: `b-${n}`, filesPath: "" };
    const id = layerIdOf(planSteps({ teamId: "team", buildId: frame.buildId, baseLayers: ["base-l"], steps: frame.steps, force: false }).steps[0]!.key);
    writeFileSync(join(dir, "layers", `.claim-${id}`), liveMark());
    const items: BuildEvents["items"] = [];
    const builder = new TemplateBuilder({ store, fetchFile: () => Promise.reject(new Error("no files")), send: (it) => (items.push(...it), true), stepTimeoutMs, flushMs: 10 });
    const result = () => items.find((i) => i.result)?.result;
    return { builder, frame, result, messages: () => items.flatMap((i) => i.logs.map((l) => l.message)) };
  }

  it("fails by itself once the owner has held the step past the step timeout, saying so", async () => {
    const b = setup(200);
    b.builder.start(b.frame);
    await expect.poll(b.result, { timeout: 5_000, interval: 20 }).toMatchObject({ status: "error", step: "1" });
    expect((b.result() as { message: string }).message).toContain(`gave up waiting for another build of the same step on this machine (pid ${process.pid})`);
    expect(b.messages().some((m) => m.includes("waiting for another build of the same step"))).toBe(true);
    b.builder.dispose();
  }, 10_000);

  it("fails at once when its builder is disposed", async () => {
    const b = setup(600_000);
    b.builder.start(b.frame);
    await expect.poll(() => b.messages().some((m) => m.includes("waiting for another build")), { timeout: 5_000, interval: 20 }).toBe(true);
    b.builder.dispose();
    await expect.poll(b.result, { timeout: 5_000, interval: 20 }).toMatchObject({ status: "error" });
    expect((b.result() as { message: string }).message).toContain("the builder stopped");
  }, 10_000);
});

describe("taking over a dead builder's claim", () => {
  it("is done by one of the waiters only, however they interleave", async () => {
    // Threads of this process, so truly parallel on several cores, released together in each
    // round onto a claim left by a dead builder. Before the takeover was atomic (read, re-read,
    // delete), a waiter that had re-read the dead claim deleted the fresh claim another had just
    // made in its place, and both built. The claim names a pid no process has: its builder is gone.
    const { winners, dir } = await race(400, false, (round) => writeFileSync(join(round, ".claim-step"), "2147483646 1"));
    expect(winners.filter((w) => w !== 1), "rounds in which other than exactly one waiter built").toEqual([]);
    for (let r = 0; r < winners.length; r++) expect(readdirSync(join(dir, `round-${r}`)).sort()).toEqual(["layer"]);
  }, 60_000);

  it("is done by one waiter only when a taker died holding its marker, however they interleave", async () => {
    // Review L2: a waiter that found the marker's taker dead read it, re-read it and deleted it; a
    // second waiter doing the same could delete the fresh marker a third had made meanwhile, and
    // a fourth then made its own: two takers past the marker, both finding the claim dead, both
    // built. The threads' file-system calls wait a random moment each, so the steps interleave.
    const { winners, dir } = await race(200, true, (round) => {
      const dead = "2147483646 1";
      writeFileSync(join(round, ".claim-step"), dead);
      const marker = `.claim-step.takeover-${createHash("sha256").update(dead).digest("hex").slice(0, 16)}`;
      symlinkSync("2147483645 1", join(round, marker));
    });
    expect(winners.filter((w) => w !== 1), "rounds in which other than exactly one waiter built").toEqual([]);
    // Every marker went once the claim was taken over (the dead taker's with it).
    for (let r = 0; r < winners.length; r++) expect(readdirSync(join(dir, `round-${r}`)).sort()).toEqual(["layer"]);
  }, 120_000);

  it("the start-up sweep removes dead claims and what dead takers left, and keeps live ones", () => {
    const dir = layersDir();
    const dead = "2147483646 1";
    writeFileSync(join(dir, ".claim-dead"), dead);
    writeFileSync(join(dir, ".claim-live"), liveMark());
    writeFileSync(join(dir, ".claim-x.tmp-2147483646-abcd"), dead);
    symlinkSync(dead, join(dir, ".claim-y.takeover-0123456789abcdef"));
    symlinkSync(liveMark(), join(dir, ".claim-z.takeover-0123456789abcdef"));
    removeDeadClaims(dir, readdirSync(dir));
    expect(readdirSync(dir).sort()).toEqual([".claim-live", ".claim-z.takeover-0123456789abcdef"]);
  });
});

/** Rounds of WORKERS threads released together onto a step `prepare` left in the round's
 * directory; answers how many took the claim and built in each round, and the rounds' parent. */
async function race(rounds: number, jitter: boolean, prepare: (dir: string) => void): Promise<{ winners: number[]; dir: string }> {
  const WORKERS = 8;
  const dir = join(root, `race${n++}`);
  const shared = new SharedArrayBuffer(4 * (2 + rounds));
  const state = new Int32Array(shared);
  const workers = Array.from({ length: WORKERS }, () => new Worker(new URL("./step-claim-taker.ts", import.meta.url), { workerData: { root: dir, rounds, shared, jitter } }));
  const exited = workers.map((w) => new Promise((ok, fail) => w.once("error", fail).once("exit", ok)));
  try {
    for (let r = 0; r < rounds; r++) {
      mkdirSync(join(dir, `round-${r}`), { recursive: true });
      prepare(join(dir, `round-${r}`));
      Atomics.store(state, 1, 0);
      Atomics.store(state, 0, r + 1);
      Atomics.notify(state, 0);
      while (Atomics.load(state, 1) < WORKERS) await new Promise((ok) => setTimeout(ok, 1));
    }
    await Promise.all(exited);
  } finally {
    for (const w of workers) void w.terminate();
  }
  return { winners: Array.from({ length: rounds }, (_, r) => state[2 + r]!), dir };
}
