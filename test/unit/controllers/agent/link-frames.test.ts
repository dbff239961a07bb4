// The agent's link, seen from the edge's end of its WebSocket: what frames a reconcile pass that
// settles a generation (an observation and an ack in the same tick) puts on the wire. Each frame
// is an invocation of the edge's ClusterDO, so an edge that reads observations inside an ack frame
// gets one; an older edge, whose welcome does not list the feature, still gets two it understands.
import { afterEach, describe, expect, it } from "vitest";
import { WebSocketServer, type WebSocket } from "ws";
import type { AddressInfo } from "node:net";
import { Link } from "../../../../controllers/agent/link.ts";
import { ACK_OBSERVATIONS_FEATURE, AgentMessageSchema, IntentSchema, PROTOCOL_VERSION, type ObservationInput } from "../../../../schema/protocol/index.ts";
import { MAX_FRAME_SANDBOXES, MAX_LIST_ITEMS, MAX_MESSAGE_LENGTH } from "../../../../schema/api/limits.ts";
import { FRAME_MAX_BYTES } from "../../../../schema/protocol/batches.ts";

const servers: WebSocketServer[] = [];
const links: Link[] = [];
afterEach(async () => {
  for (const l of links.splice(0)) l.close();
  await Promise.all(servers.splice(0).map((s) => new Promise((r) => s.close(r))));
});

const intent = (id: string) =>
  IntentSchema.parse({ sandboxId: id, generation: 1, owner: { kind: "sandbox" }, desired: { state: "running" }, template: { id: "base", revision: "r1" }, issuedAt: Date.now() });

/** An edge that welcomes with `features`, sends one intent per id and records every frame after the hello. */
async function edge(features: string[], ids: string[]) {
  const wss = new WebSocketServer({ host: "127.0.0.1", port: 0 });
  servers.push(wss);
  await new Promise((r) => wss.once("listening", r));
  const frames: { type: string; items?: unknown[]; observations?: unknown[] }[] = [];
  /** Each recorded frame's size on the wire, in bytes. */
  const sizes: number[] = [];
  let socket: WebSocket | undefined;
  wss.on("connection", (ws) => {
    socket = ws;
    ws.on("message", (data) => {
      const text = String(data);
      if (text === '{"type":"ping"}') return;
      const msg = JSON.parse(text) as { type: string };
      if (msg.type === "hello") {
        ws.send(JSON.stringify({ type: "welcome", protocol: PROTOCOL_VERSION, cluster: "c", sessionId: "s", heartbeatIntervalMs: 60_000, resync: { orphans: 0, recreated: 0, redelivered: 0 }, features }));
        if (ids.length) ws.send(JSON.stringify({ type: "intents", items: ids.map((id, k) => ({ seq: k + 1, intent: intent(id) })) }));
        return;
      }
      // As the edge reads it: a frame its schema refuses is a bad_frame there.
      const parsed = AgentMessageSchema.safeParse(msg);
      frames.push(parsed.success ? msg : { type: `refused: ${parsed.error.issues[0]?.message}` });
      sizes.push(Buffer.byteLength(text));
    });
  });
  return { url: `http://127.0.0.1:${(wss.address() as AddressInfo).port}`, frames, sizes, socket: () => socket };
}

/** An observation at the schema's bounds: a failure whose message and conditions' messages are as
 * long as they may be (~270 KB of JSON). */
const heavy = (sandboxId: string, generation = 1) => ({
  sandboxId,
  generation,
  phase: "Failed" as const,
  ready: false,
  reason: "ReconcileError",
  message: "m".repeat(MAX_MESSAGE_LENGTH),
  observedAt: 1,
  conditions: Array.from({ length: MAX_LIST_ITEMS }, (_, k) => ({ type: `Check${k}`, status: "False" as const, reason: "Failed", message: "c".repeat(MAX_MESSAGE_LENGTH) })),
});
/** Enough heavy observations for one frame past the 32 MiB the edge's runtime takes. */
const HEAVY = 130;

/** A link whose agent settles each intent it gets as the reconciler's pass does: it reports the
 * sandbox, then acks its generation, in the same tick. */
function agentLink(url: string, observation: (id: string, generation: number) => ObservationInput = (sandboxId, generation) => ({ sandboxId, generation, phase: "Running", ready: true, endpoint: { runtime: "embedded:" }, observedAt: Date.now() })): Link {
  const link: Link = new Link({
    edgeUrl: url,
    clusterId: "c",
    token: "t",
    hello: async () => ({ agentId: "a", driver: "local", ingress: { url: "http://127.0.0.1:1" }, inventory: [] }),
    onIntent(seq, i) {
      queueMicrotask(() => {
        link.observe(observation(i.sandboxId, i.generation));
        link.ack({ seq, sandboxId: i.sandboxId, generation: i.generation, result: "applied" });
      });
      return "pending";
    },
    log: () => {},
  });
  links.push(link);
  link.start();
  return link;
}

async function until(check: () => boolean, ms = 5_000): Promise<void> {
  for (const end = Date.now() + ms; !check(); await new Promise((r) => setTimeout(r, 5))) {
    if (Date.now() > end) throw new Error(`condition not met in ${ms} ms`);
  }
}

describe("agent link frames", () => {
  it("to an edge that reads observations in an ack frame, a settled pass is one frame", async () => {
    const e = await edge(["builds", ACK_OBSERVATIONS_FEATURE], ["sbxone", "sbxtwo"]);
    agentLink(e.url);
    await until(() => e.frames.length > 0);
    // Both intents came in one frame: their acks and observations leave together, in one.
    await new Promise((r) => setTimeout(r, 100));
    expect(e.frames).toEqual([
      {
        type: "ack",
        items: [expect.objectContaining({ seq: 1, sandboxId: "sbxone", result: "applied" }), expect.objectContaining({ seq: 2, sandboxId: "sbxtwo", result: "applied" })],
        observations: [expect.objectContaining({ sandboxId: "sbxone", phase: "Running", ready: true }), expect.objectContaining({ sandboxId: "sbxtwo", phase: "Running", ready: true })],
      },
    ]);
  });

  it("to an older edge (no ackObservations in its welcome), acks and observations are two frames, acks first", async () => {
    const e = await edge(["builds"], ["sbxold"]);
    agentLink(e.url);
    await until(() => e.frames.length >= 2);
    await new Promise((r) => setTimeout(r, 100));
    expect(e.frames).toEqual([
      { type: "ack", items: [expect.objectContaining({ seq: 1, sandboxId: "sbxold", result: "applied" })] },
      { type: "observations", items: [expect.objectContaining({ sandboxId: "sbxold", phase: "Running" })] },
    ]);
  });

  it("acks buffered past a frame's bound while disconnected leave in frames the edge takes, all of them, in order", async () => {
    const e = await edge(["builds", ACK_OBSERVATIONS_FEATURE], []);
    const link = new Link({
      edgeUrl: e.url,
      clusterId: "c",
      token: "t",
      hello: async () => ({ agentId: "a", driver: "local", ingress: { url: "http://127.0.0.1:1" }, inventory: [] }),
      onIntent: () => "pending",
      log: () => {},
    });
    links.push(link);
    // Not started yet: what a long outage leaves buffered.
    const n = MAX_FRAME_SANDBOXES + 5;
    for (let k = 1; k <= n; k++) link.ack({ seq: k, sandboxId: `sbx${k}`, generation: 1, result: "applied" });
    link.start();
    await until(() => e.frames.length >= 2, 25_000);
    await new Promise((r) => setTimeout(r, 100));
    expect(e.frames.map((f) => [f.type, f.items?.length, f.observations?.length])).toEqual([
      ["ack", MAX_FRAME_SANDBOXES, undefined],
      ["ack", 5, undefined],
    ]);
    const seqs = e.frames.flatMap((f) => (f.type === "ack" ? (f.items as { seq: number }[]).map((a) => a.seq) : []));
    expect(seqs).toEqual(Array.from({ length: n }, (_, k) => k + 1));
  }, 30_000);

  it("an inventory past a frame's bound goes as the hello and inventory frames the edge takes, all of it, in order", async () => {
    const wss = new WebSocketServer({ host: "127.0.0.1", port: 0 });
    servers.push(wss);
    await new Promise((r) => wss.once("listening", r));
    const frames: { type: string; more?: boolean; ids: string[] }[] = [];
    wss.on("connection", (ws) =>
      ws.on("message", (data) => {
        const text = String(data);
        if (text === '{"type":"ping"}') return;
        const parsed = AgentMessageSchema.safeParse(JSON.parse(text));
        if (!parsed.success) return void frames.push({ type: `refused: ${parsed.error.issues[0]?.message}`, ids: [] });
        const msg = parsed.data;
        if (msg.type === "hello") frames.push({ type: "hello", more: msg.more, ids: msg.inventory.map((o) => o.sandboxId) });
        if (msg.type === "inventory") frames.push({ type: "inventory", more: msg.more, ids: msg.items.map((o) => o.sandboxId) });
      }),
    );
    const n = MAX_FRAME_SANDBOXES + 5;
    const ids = Array.from({ length: n }, (_, k) => `sbx${k}`);
    const link = new Link({
      edgeUrl: `http://127.0.0.1:${(wss.address() as AddressInfo).port}`,
      clusterId: "c",
      token: "t",
      hello: async () => ({ agentId: "a", driver: "local", ingress: { url: "http://127.0.0.1:1" }, inventory: ids.map((sandboxId) => ({ sandboxId, generation: 1, phase: "Running", ready: true, observedAt: 1 })) }),
      onIntent: () => "pending",
      log: () => {},
    });
    links.push(link);
    link.start();
    await until(() => frames.length >= 2, 25_000);
    await until(() => frames.at(-1)!.more !== true, 25_000);
    // Cut by count, and by bytes too (100,000 of these are just past FRAME_MAX_BYTES).
    expect(frames.map((f) => [f.type, f.more])).toEqual([["hello", true], ...frames.slice(1, -1).map(() => ["inventory", true]), ["inventory", false]]);
    for (const f of frames) expect(f.ids.length).toBeLessThanOrEqual(MAX_FRAME_SANDBOXES);
    expect(frames.flatMap((f) => f.ids)).toEqual(ids);
  }, 30_000);

  it("observations at the schema's bounds, more than 32 MiB in one pass, leave in frames under the cap, all of them, in order", async () => {
    const ids = Array.from({ length: HEAVY }, (_, k) => `sbxheavy${k}`);
    const e = await edge(["builds", ACK_OBSERVATIONS_FEATURE], ids);
    agentLink(e.url, heavy);
    const observed = () => e.frames.flatMap((f) => (f.type === "observations" ? f.items! : (f.observations ?? [])) as { sandboxId: string }[]);
    await until(() => observed().length >= HEAVY, 20_000);
    expect(e.frames.every((f) => f.type === "ack" || f.type === "observations")).toBe(true);
    // One frame would have been ~35 MB: the edge's runtime closes the socket on it (1009), and
    // the agent sends it again after each reconnect.
    expect(e.frames.length).toBeGreaterThan(2);
    for (const n of e.sizes) expect(n).toBeLessThanOrEqual(FRAME_MAX_BYTES);
    expect(e.frames.filter((f) => f.type === "ack").flatMap((f) => (f.items as { sandboxId: string }[]).map((a) => a.sandboxId))).toEqual(ids);
    expect(observed().map((o) => o.sandboxId)).toEqual(ids);
  }, 30_000);

  it("an inventory at the schema's bounds past 32 MiB goes as a hello and inventory frames under the cap, all of it, in order", async () => {
    const wss = new WebSocketServer({ host: "127.0.0.1", port: 0 });
    servers.push(wss);
    await new Promise((r) => wss.once("listening", r));
    const frames: { type: string; more?: boolean; ids: string[]; bytes: number }[] = [];
    wss.on("connection", (ws) =>
      ws.on("message", (data) => {
        const text = String(data);
        if (text === '{"type":"ping"}') return;
        const parsed = AgentMessageSchema.safeParse(JSON.parse(text));
        const bytes = Buffer.byteLength(text);
        if (!parsed.success) return void frames.push({ type: `refused: ${parsed.error.issues[0]?.message}`, ids: [], bytes });
        const msg = parsed.data;
        if (msg.type === "hello") frames.push({ type: "hello", more: msg.more, ids: msg.inventory.map((o) => o.sandboxId), bytes });
        if (msg.type === "inventory") frames.push({ type: "inventory", more: msg.more, ids: msg.items.map((o) => o.sandboxId), bytes });
      }),
    );
    const ids = Array.from({ length: HEAVY }, (_, k) => `sbxheavy${k}`);
    const link = new Link({
      edgeUrl: `http://127.0.0.1:${(wss.address() as AddressInfo).port}`,
      clusterId: "c",
      token: "t",
      hello: async () => ({ agentId: "a", driver: "local", ingress: { url: "http://127.0.0.1:1" }, inventory: ids.map((id) => heavy(id)) }),
      onIntent: () => "pending",
      log: () => {},
    });
    links.push(link);
    link.start();
    await until(() => frames.length > 0 && frames.at(-1)!.more !== true, 20_000);
    expect(frames.length).toBeGreaterThan(2);
    expect(frames.map((f) => [f.type, f.more])).toEqual([["hello", true], ...frames.slice(1, -1).map(() => ["inventory", true]), ["inventory", false]]);
    for (const f of frames) expect(f.bytes).toBeLessThanOrEqual(FRAME_MAX_BYTES);
    expect(frames.flatMap((f) => f.ids)).toEqual(ids);
  }, 30_000);
});
