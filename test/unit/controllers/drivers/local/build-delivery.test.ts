// A build's result reaches the edge at least once (schema/protocol/build.ts BUILD_ACKS_FEATURE):
// the builder keeps it, in its journal too, until the edge acks it, and sends it again on the next
// session; a build whose frames the link refuses is stopped (its running step killed) and ends as
// an error. The real agent link (controllers/agent/link.ts) against a WebSocket server standing in
// for the edge; ENV-only builds need no root, and the stopped step is a stand-in (runStep mocked:
// it prints until its signal fires).
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { afterEach, describe, expect, it, vi } from "vitest";
import { WebSocketServer } from "ws";
import { Link } from "../../../../../controllers/agent/link.ts";
import { TemplateBuilder, type BuilderOptions } from "../../../../../controllers/drivers/local/builder/builder.ts";
import { RootfsStore } from "../../../../../controllers/drivers/local/rootfs/store.ts";
import { BUILD_ACKS_FEATURE, BUILD_FEATURE, type BuildEvents, type BuildFrame } from "../../../../../schema/protocol/build.ts";
import { AgentMessageSchema, PROTOCOL_VERSION } from "../../../../../schema/protocol/index.ts";
import { storeWithBase as baseStore, tmpDirs } from "./build-store.ts";

/** What the mocked step saw: started, and stopped by its signal. `exitsOnStop`: the step had
 * already exited when the stop came (it exits 0 with an empty layer), so the build goes on to
 * commit that layer while it is stopped. */
const step = { started: 0, stopped: 0, exitsOnStop: false };
vi.mock("../../../../../controllers/drivers/local/builder/sandbox.ts", async (importOriginal) => ({
  ...(await importOriginal<typeof import("../../../../../controllers/drivers/local/builder/sandbox.ts")>()),
  // A step that prints until it is killed (as bwrap is, by the signal runStep passes to spawn).
  runStep: (r: { onLine(l: string, s: "stdout" | "stderr"): void; signal?: AbortSignal; staging: string }) =>
    new Promise((done, fail) => {
      step.started++;
      const tick = setInterval(() => r.onLine("tick", "stdout"), 5);
      r.signal?.addEventListener("abort", () => {
        clearInterval(tick);
        step.stopped++;
        if (!step.exitsOnStop) return fail(r.signal!.reason);
        mkdirSync(join(r.staging, "rootfs"), { recursive: true });
        done({ code: 0 });
      });
    }),
}));

const { tmp, removeTmp } = tmpDirs("build-delivery-");
const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
  removeTmp();
});
const storeWithBase = () => baseStore(tmp());

const envBuild = (buildId: string): BuildFrame => ({ type: "build", buildId, teamId: "team", from: { rootfs: "base" }, steps: [{ type: "ENV", args: ["A", "1"], force: false }], force: false, cpuCount: 1, memoryMB: 512, output: `b-${buildId}`, filesPath: "" });

type Frame = BuildEvents & { session: number };

/** A stand-in edge: welcomes with `features`, records every buildEvents frame with the session
 * (1, 2, …) it came on, and answers through `onEvents` (the socket, the frame, the session). */
async function edge(features: string[], onEvents: (ws: import("ws").WebSocket, f: Frame) => void = () => {}) {
  const wss = new WebSocketServer({ host: "127.0.0.1", port: 0 });
  cleanups.push(() => new Promise((r) => wss.close(r)));
  await new Promise((r) => wss.once("listening", r));
  const frames: Frame[] = [];
  let sessions = 0;
  wss.on("connection", (ws) => {
    const session = ++sessions;
    ws.on("message", (data) => {
      const text = String(data);
      if (text === '{"type":"ping"}') return;
      const msg = AgentMessageSchema.parse(JSON.parse(text));
      if (msg.type === "hello") {
        ws.send(JSON.stringify({ type: "welcome", protocol: PROTOCOL_VERSION, cluster: "c", sessionId: `s${session}`, heartbeatIntervalMs: 60_000, resync: { orphans: 0, recreated: 0, redelivered: 0 }, features }));
        return;
      }
      if (msg.type !== "buildEvents") return;
      const f = { ...msg, session };
      frames.push(f);
      onEvents(ws, f);
    });
  });
  return { url: `http://127.0.0.1:${(wss.address() as AddressInfo).port}`, frames, sessions: () => sessions };
}

/** The agent's wiring (agent.ts): a builder whose events leave through a real link. */
function agent(url: string, store: RootfsStore, journalDir: string, more: Partial<BuilderOptions> = {}) {
  const logs: string[] = [];
  const b: TemplateBuilder = new TemplateBuilder({ store, journalDir, flushMs: 10, log: (m) => logs.push(m), fetchFile: () => Promise.reject(new Error("no files")), send: (items) => link.sendBuildEvents(items), ...more });
  const link: Link = new Link({
    edgeUrl: url,
    clusterId: "c",
    token: "t",
    log: () => {},
    hello: async () => ({ agentId: "a", driver: "local", ingress: { url: "http://127.0.0.1:1" }, capabilities: { builder: true }, inventory: [] }),
    onIntent: () => "pending",
    onBuildAcks: (ids) => b.acked(ids),
    onWelcome: () => b.relinked(),
  });
  cleanups.push(() => (link.close(), b.dispose()));
  link.start();
  return { b, link, logs };
}

const results = (frames: Frame[], id: string) => frames.flatMap((f) => f.items.filter((i) => i.buildId === id && i.result).map((i) => ({ session: f.session, ack: f.ack, result: i.result! })));

describe("a build's result is delivered at least once", () => {
  it("a session lost right after the result left: the result goes again on the next session, and the build is forgotten (journal too) only once the edge acks it", async () => {
    const journal = tmp();
    let b!: TemplateBuilder;
    let journalAtAck: string[] | undefined;
    const e = await edge([BUILD_FEATURE, BUILD_ACKS_FEATURE], (ws, f) => {
      if (!f.items.some((i) => i.result)) return;
      // The first session drops with the frame unanswered (an edge isolate restart, a link
      // reconnect); the next one stores it and acks.
      if (f.session === 1) return ws.terminate();
      journalAtAck = readdirSync(journal);
      ws.send(JSON.stringify({ type: "buildAcks", buildIds: f.items.filter((i) => i.result).map((i) => i.buildId) }));
    });
    ({ b } = agent(e.url, await storeWithBase(), journal));
    b.start(envBuild("dropped-once"));
    await expect.poll(() => results(e.frames, "dropped-once").length, { timeout: 10_000, interval: 20 }).toBe(2);
    expect(results(e.frames, "dropped-once")).toEqual([
      { session: 1, ack: true, result: { status: "ready", user: "user", workdir: "/home/user", env: { A: "1" } } },
      { session: 2, ack: true, result: { status: "ready", user: "user", workdir: "/home/user", env: { A: "1" } } },
    ]);
    // Kept (with its result) until the ack, forgotten after it.
    expect(journalAtAck).toEqual(["dropped-once.json"]);
    await expect.poll(() => b.active, { timeout: 5_000, interval: 20 }).toBe(0);
    expect(readdirSync(journal)).toEqual([]);
    // Acked: not sent again.
    await new Promise((r) => setTimeout(r, 200));
    expect(results(e.frames, "dropped-once")).toHaveLength(2);
  });

  it("an agent restarted before the ack sends the result again from its journal, without running the build again", async () => {
    const journal = tmp();
    const store = await storeWithBase();
    const e1 = await edge([BUILD_FEATURE, BUILD_ACKS_FEATURE]);
    const first = agent(e1.url, store, journal);
    first.b.start(envBuild("restarted"));
    await expect.poll(() => results(e1.frames, "restarted").length, { timeout: 10_000, interval: 20 }).toBe(1);
    // Never acked; the agent stops (its journal keeps the result).
    for (const c of cleanups.splice(0).reverse()) await c();
    expect(JSON.parse(readFileSync(join(journal, "restarted.json"), "utf8")).result).toMatchObject({ status: "ready" });
    const e2 = await edge([BUILD_FEATURE, BUILD_ACKS_FEATURE], (ws, f) => ws.send(JSON.stringify({ type: "buildAcks", buildIds: f.items.filter((i) => i.result).map((i) => i.buildId) })));
    const second = agent(e2.url, store, journal);
    expect(second.b.resume()).toBe(1);
    await expect.poll(() => second.b.active, { timeout: 10_000, interval: 20 }).toBe(0);
    expect(results(e2.frames, "restarted").map((r) => r.result)).toEqual([{ status: "ready", user: "user", workdir: "/home/user", env: { A: "1" } }]);
    const lines = e2.frames.flatMap((f) => f.items.flatMap((i) => i.logs.map((l) => l.message)));
    expect(lines).not.toContainEqual(expect.stringMatching(/resuming it/));
    expect(second.logs).toContain("sending a build's result again after an agent restart");
    expect(readdirSync(journal)).toEqual([]);
  });

  it("a result the edge does not ack while the session stays up (its store failed) goes again on the same session after resultResendMs, and is forgotten once acked", async () => {
    const journal = tmp();
    const e = await edge([BUILD_FEATURE, BUILD_ACKS_FEATURE], (ws, f) => {
      const done = f.items.filter((i) => i.result).map((i) => i.buildId);
      // The first result is dropped without a word (its writes threw on the edge); the session stays.
      if (done.length && results(e.frames, "unacked").length > 1) ws.send(JSON.stringify({ type: "buildAcks", buildIds: done }));
    });
    const { b } = agent(e.url, await storeWithBase(), journal, { resultResendMs: 300 });
    b.start(envBuild("unacked"));
    await expect.poll(() => results(e.frames, "unacked").length, { timeout: 10_000, interval: 20 }).toBe(1);
    // Not sooner than resultResendMs: not sent again on each flush.
    await new Promise((r) => setTimeout(r, 150));
    expect(results(e.frames, "unacked")).toHaveLength(1);
    expect(readdirSync(journal)).toEqual(["unacked.json"]);
    await expect.poll(() => results(e.frames, "unacked").length, { timeout: 5_000, interval: 20 }).toBe(2);
    expect(results(e.frames, "unacked").map((r) => r.session)).toEqual([1, 1]);
    expect(e.sessions()).toBe(1);
    await expect.poll(() => b.active, { timeout: 5_000, interval: 20 }).toBe(0);
    expect(readdirSync(journal)).toEqual([]);
  });

  it("a result the edge never acks is dropped once kept resultKeepMs after the build ended, and an agent restarted later drops it from its journal without sending it", async () => {
    const journal = tmp();
    const store = await storeWithBase();
    const e = await edge([BUILD_FEATURE, BUILD_ACKS_FEATURE]);
    const first = agent(e.url, store, journal, { resultResendMs: 50, resultKeepMs: 400 });
    first.b.start(envBuild("never-acked"));
    await expect.poll(() => first.b.active, { timeout: 10_000, interval: 20 }).toBe(0);
    // Sent again meanwhile, then dropped, here and in the journal.
    expect(results(e.frames, "never-acked").length).toBeGreaterThan(1);
    expect(first.logs).toContain("build result dropped: the edge has not acked it since the build ended");
    expect(readdirSync(journal)).toEqual([]);
    for (const c of cleanups.splice(0).reverse()) await c();

    // The journal keeps when a build ended: a restart does not start the bound again.
    const e1 = await edge([BUILD_FEATURE, BUILD_ACKS_FEATURE]);
    const second = agent(e1.url, store, journal, { resultResendMs: 60_000 });
    second.b.start(envBuild("old-result"));
    await expect.poll(() => results(e1.frames, "old-result").length, { timeout: 10_000, interval: 20 }).toBe(1);
    for (const c of cleanups.splice(0).reverse()) await c();
    const file = join(journal, "old-result.json");
    const entry = JSON.parse(readFileSync(file, "utf8"));
    expect(entry.endedAt).toBeGreaterThan(Date.now() - 60_000);
    writeFileSync(file, JSON.stringify({ ...entry, endedAt: Date.now() - 3 * 60 * 60_000 }));
    const e2 = await edge([BUILD_FEATURE, BUILD_ACKS_FEATURE]);
    const third = agent(e2.url, store, journal);
    expect(third.b.resume()).toBe(1);
    await expect.poll(() => third.b.active, { timeout: 10_000, interval: 20 }).toBe(0);
    expect(results(e2.frames, "old-result")).toEqual([]);
    expect(readdirSync(journal)).toEqual([]);
  });

  it("an edge that does not ack results (an older one) gets each result once, and the build is forgotten when it left", async () => {
    const journal = tmp();
    const e = await edge([BUILD_FEATURE]);
    const { b } = agent(e.url, await storeWithBase(), journal);
    b.start(envBuild("older-edge"));
    await expect.poll(() => b.active, { timeout: 10_000, interval: 20 }).toBe(0);
    expect(results(e.frames, "older-edge")).toEqual([{ session: 1, ack: undefined, result: expect.objectContaining({ status: "ready" }) }]);
    expect(readdirSync(journal)).toEqual([]);
  });
});

describe("a build whose events the link refuses", () => {
  /** A builder whose link, once `refusing`, refuses every frame with log lines, as the link's own
   * check would; before that it takes frames ("ack") or, `down`, is down (nothing leaves). */
  function refusable(store: RootfsStore, journalDir?: string, down = false) {
    const sent: BuildEvents["items"] = [];
    const logs: string[] = [];
    const link = { refusing: false };
    const b = new TemplateBuilder({
      store,
      ...(journalDir ? { journalDir } : {}),
      flushMs: 10,
      log: (m) => logs.push(m),
      fetchFile: () => Promise.reject(new Error("no files")),
      send: (items) => {
        if (link.refusing && items.some((i) => i.logs.length)) throw new Error("agent frame invalid");
        if (down) return false;
        sent.push(...items);
        return "ack";
      },
    });
    cleanups.push(() => b.dispose());
    return { b, sent, logs, link };
  }
  it("is stopped: its running step is killed, and it ends as an error the edge gets (and acks) at once", async () => {
    step.started = step.stopped = 0;
    const store = await storeWithBase();
    const journal = tmp();
    const { b, sent, logs, link } = refusable(store, journal);
    b.start({ ...envBuild("refused"), steps: [{ type: "RUN", args: ["while :; do echo tick; done", ""], force: false }] });
    await expect.poll(() => step.started, { timeout: 10_000, interval: 10 }).toBe(1);
    // An ack for a build still running (a buggy or hostile edge) is ignored: the build is not forgotten.
    b.acked(["refused"]);
    expect(b.active).toBe(1);
    expect(readdirSync(journal)).toEqual(["refused.json"]);
    // Once the step runs, every frame with log lines is refused.
    link.refusing = true;
    await expect.poll(() => sent.find((i) => i.result)?.result, { timeout: 10_000, interval: 20 }).toEqual({ status: "error", message: "the build's events could not be sent to the edge (see the agent's log): it was stopped" });
    expect(step.stopped).toBe(1);
    expect(logs).toContain("build given up: its events cannot be sent; stopping it");
    b.acked(["refused"]);
    expect(b.active).toBe(0);
  });

  it("given up before an agent restart (its run not yet stopped): the restarted agent sends its error end and does not run it again", async () => {
    step.started = step.stopped = 0;
    const journal = tmp();
    const store = await storeWithBase();
    // The first agent's link is down (nothing leaves, nothing is journaled by a send) until the
    // end, when its frames are refused so that its step stops.
    const { b: first, link } = refusable(store, journal, true);
    first.start({ ...envBuild("restart-given-up"), steps: [{ type: "RUN", args: ["true", ""], force: false }] });
    await expect.poll(() => step.started, { timeout: 10_000, interval: 10 }).toBe(1);
    // The journal entry as #unsent leaves it when the agent dies before the run stopped.
    const file = join(journal, "restart-given-up.json");
    writeFileSync(file, JSON.stringify({ ...JSON.parse(readFileSync(file, "utf8")), givenUp: true }));
    const e = await edge([BUILD_FEATURE, BUILD_ACKS_FEATURE], (ws, f) => ws.send(JSON.stringify({ type: "buildAcks", buildIds: f.items.filter((i) => i.result).map((i) => i.buildId) })));
    const second = agent(e.url, store, journal);
    expect(second.b.resume()).toBe(1);
    await expect.poll(() => second.b.active, { timeout: 10_000, interval: 20 }).toBe(0);
    expect(results(e.frames, "restart-given-up").map((r) => r.result)).toEqual([{ status: "error", message: "the build's events could not be sent to the edge (see the agent's log): it was stopped" }]);
    expect(step.started).toBe(1);
    link.refusing = true;
    await expect.poll(() => step.stopped, { timeout: 10_000, interval: 10 }).toBe(1);
  });

  it("stopped while its last step's layer is committed: its template is not published (its end is the error the edge gets)", async () => {
    step.started = step.stopped = 0;
    step.exitsOnStop = true;
    cleanups.push(() => (step.exitsOnStop = false));
    const store = await storeWithBase();
    const { b, sent, link } = refusable(store);
    b.start({ ...envBuild("late-stop"), steps: [{ type: "RUN", args: ["while :; do echo tick; done", ""], force: false }] });
    await expect.poll(() => step.started, { timeout: 10_000, interval: 10 }).toBe(1);
    link.refusing = true;
    await expect.poll(() => sent.find((i) => i.result)?.result, { timeout: 10_000, interval: 20 }).toEqual({ status: "error", message: "the build's events could not be sent to the edge (see the agent's log): it was stopped" });
    expect(step.stopped).toBe(1);
    expect(store.template("b-late-stop")).toBeUndefined();
  });
});
