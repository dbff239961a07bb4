// The create skeleton for `npm run bench -- edge` (bench/skeleton.ts): the smallest Worker and
// Durable Objects that do the irreducible work of one create in our architecture, and nothing
// else: an in-memory key check, one RPC to a pool object that pops one row of its SQLite table,
// one RPC to the sandbox's group object (36 groups by the id's first character, as ours) that
// inserts one row and hands the intent to the cluster object, which writes one outbox row, sends
// one WebSocket frame to the connected client and waits for its answer; then the response.
// No validation, no state machine, no index, no refill: the bench compares our create against it.
//
// Plain JavaScript served by workerd as is (no bundler); `/empty` lives in a second Worker of the
// same workerd (see bench/skeleton.ts) and answers without any work, the runtime's own ceiling.
import { DurableObject } from "cloudflare:workers";

export default {
  async fetch(request, env) {
    const url = new URL(request.url);
    if (url.pathname === "/health") return new Response("ok");
    if (url.pathname === "/connect") {
      return env.CLUSTER.get(env.CLUSTER.idFromName("local")).fetch(request);
    }
    if (request.headers.get("x-api-key") !== env.API_KEY) return Response.json({ code: 401, message: "Invalid API key" }, { status: 401 });
    const body = await request.json();
    const pool = env.POOL.get(env.POOL.idFromName(`team/${body.templateID}`));
    if (url.pathname === "/fill") return Response.json(await pool.fill(body.count));
    const id = await pool.claim();
    if (!id) return Response.json({ code: 503, message: "no stock" }, { status: 503 });
    const group = env.GROUP.get(env.GROUP.idFromName(id[0]));
    const ok = await group.create(id, body.templateID, body.timeout);
    if (!ok) return Response.json({ code: 500, message: "not acknowledged" }, { status: 500 });
    return Response.json({ sandboxID: id, templateID: body.templateID, clientID: "skeleton", envdVersion: "0.2.0" }, { status: 201 });
  },
};

export class SkeletonPool extends DurableObject {
  constructor(ctx, env) {
    super(ctx, env);
    ctx.storage.sql.exec("CREATE TABLE IF NOT EXISTS members (id TEXT PRIMARY KEY)");
  }

  fill(count) {
    for (let i = 0; i < count; i++) this.ctx.storage.sql.exec("INSERT INTO members (id) VALUES (?)", newId());
    return this.ctx.storage.sql.exec("SELECT COUNT(*) AS n FROM members").one().n;
  }

  claim() {
    const row = this.ctx.storage.sql.exec("DELETE FROM members WHERE rowid = (SELECT MIN(rowid) FROM members) RETURNING id").toArray()[0];
    return row ? row.id : null;
  }
}

export class SkeletonGroup extends DurableObject {
  constructor(ctx, env) {
    super(ctx, env);
    ctx.storage.sql.exec("CREATE TABLE IF NOT EXISTS sandboxes (id TEXT PRIMARY KEY, template TEXT NOT NULL, end_at INTEGER NOT NULL)");
  }

  create(id, template, timeoutS) {
    this.ctx.storage.sql.exec("INSERT INTO sandboxes (id, template, end_at) VALUES (?, ?, ?)", id, template, Date.now() + timeoutS * 1000);
    return this.env.CLUSTER.get(this.env.CLUSTER.idFromName("local")).enqueue({ sandboxId: id, template, desired: "running" });
  }
}

export class SkeletonCluster extends DurableObject {
  constructor(ctx, env) {
    super(ctx, env);
    ctx.storage.sql.exec("CREATE TABLE IF NOT EXISTS outbox (seq INTEGER PRIMARY KEY, intent TEXT NOT NULL)");
    this.seq = ctx.storage.sql.exec("SELECT COALESCE(MAX(seq), 0) AS n FROM outbox").one().n;
    this.waiters = new Map();
  }

  async fetch() {
    const pair = new WebSocketPair();
    this.ctx.acceptWebSocket(pair[1]);
    return new Response(null, { status: 101, webSocket: pair[0] });
  }

  enqueue(intent) {
    const seq = ++this.seq;
    const frame = JSON.stringify({ seq, intent });
    this.ctx.storage.sql.exec("INSERT INTO outbox (seq, intent) VALUES (?, ?)", seq, frame);
    const ws = this.ctx.getWebSockets()[0];
    if (!ws) return false;
    return new Promise((resolve) => {
      this.waiters.set(seq, resolve);
      ws.send(frame);
    });
  }

  webSocketMessage(_ws, message) {
    const { seq } = JSON.parse(message);
    this.waiters.get(seq)?.(true);
    this.waiters.delete(seq);
  }
}

const ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789";

function newId() {
  let id = "";
  for (const b of crypto.getRandomValues(new Uint8Array(20))) id += ALPHABET[b % 36];
  return id;
}
