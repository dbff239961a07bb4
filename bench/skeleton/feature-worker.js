// The feature skeleton for `npm run bench -- edge` (bench/skeleton.ts): the bare skeleton
// (worker.js) plus the work issue 2 requires of every create, each in the plainest way, so the
// bench can tell what the required features cost from what our implementation adds on top:
//   - the body read (413 past the limit), parsed and validated by the project's own zod schema
//     (`NewSandbox`, schema/api/sandbox.ts), a 400 for bad input;
//   - the key's HMAC-SHA256 with the pepper, memoised per isolate (as functions/auth does),
//     compared in constant time with the admin key's;
//   - the pool's refill: the claim deletes the member and inserts its replacement in one commit;
//     the replacements' intents leave in one cluster call per flush (batched across concurrent
//     claims, as PoolDO does); the agent's answer is routed back to the pool (one call per
//     answered frame), which records the members ready (one commit per call);
//   - the create's answer: the group awaits the agent's answer through the cluster object and
//     records the sandbox Running before it answers (a row written later came back Pending
//     after a group restart: 7782a89 reverted that saving in SandboxGroupDO);
//   - the team's quota: one object per team counts its running sandboxes; a create reserves in
//     memory (refused past the limit), claims from the pool, stores the reservation under the
//     claimed id, and hands the member to its group itself, so the Worker makes one object call
//     per create (as TeamQuotaDO.create does; the reservation is committed before the group is
//     asked);
//   - the index row in libSQL before the response: the cluster object group-commits the rows of
//     concurrent creates into one multi-row upsert, sent straight to sqld over HTTP (Hrana
//     pipeline); ours hands them to SandboxIndexDO, which does the same through @libsql/client.
//     Until the cluster answers, the sandbox's own row (written before the call, with its intent)
//     stands for the index row; when the answer does not say libSQL has it, the row goes to the
//     group's outbox, so a create answers while libSQL is down (ours: the group's index outbox,
//     IndexOutbox.carry; session 15 dropped the outbox row written and deleted per create);
// `/one-trip/...`: the same required work in the one-round-trip design of issue 16.2 (FeatureShard;
// issue 16 notes, session 11): the Worker calls one object, the pool's, which holds the warm
// members, the claimed sandboxes' rows and index outbox, and quota credits leased from the team's
// quota object (FeatureLedger) ahead of need; a create spends a credit, pops a member, writes the sandbox Pending, its index
// row and the refill member in one commit, and hands the claim's intent and the refill's to the
// cluster in one call, then records Running. The lease (a quota call per LEASE creates) is off the
// answer path unless the credits ran out (then it is awaited, and no credit means a refusal:
// fails closed). bench/skeleton-trips.ts runs both designs in alternating rounds.
// The cluster object writes the intents of concurrent enqueues in one frame and deletes answered
// outbox rows in batches after 50 ms, as ClusterDO does. Left out, as in the bare skeleton: the
// template lookup (a pool that was never filled answers 404), state machines, alarms, redelivery,
// timeouts on the agent's answer.
import { DurableObject } from "cloudflare:workers";
import { z } from "zod";
import { NewSandbox } from "../../schema/api/sandbox.ts";

const KEY_PATTERN = /^e2b_[0-9a-f]{40}$/;
const MAX_BODY_BYTES = 1 << 20;
const UNQUEUE_MS = 50;
const RETRY_MS = 2_000;
const TEAM_ID = "skeleton-team";
/** High enough never to refuse in the bench (the check is what it costs). */
const QUOTA_RUNNING = 1e9;
/** Quota credits a one-trip pool leases at a time (FeatureShard). */
const LEASE = 64;
const KEY_ID = "skeleton-key";
const INDEX_COLUMNS = [
  "id", "team_id", "key_id", "template_id", "alias", "state", "phase", "metadata", "started_at", "end_at",
  "cpu_count", "memory_mb", "disk_size_mb", "envd_version", "rev",
];
const UPSERT =
  `INSERT INTO skeleton_sandboxes (${INDEX_COLUMNS.join(", ")}) VALUES `;
const UPSERT_TAIL =
  ` ON CONFLICT (id) DO UPDATE SET ${INDEX_COLUMNS.slice(1).map((c) => `${c} = excluded.${c}`).join(", ")} WHERE skeleton_sandboxes.rev < excluded.rev`;
const ROW = `(${INDEX_COLUMNS.map(() => "?").join(", ")})`;

export default {
  async fetch(request, env) {
    const url = new URL(request.url);
    if (url.pathname === "/health") return new Response("ok");
    if (url.pathname === "/connect") return cluster(env).fetch(request);
    const key = request.headers.get("x-api-key");
    if (!key || !KEY_PATTERN.test(key) || !equalHex(await hmac(key, env.KEY_PEPPER), await hmac(env.ADMIN_API_KEY, env.KEY_PEPPER))) {
      return error(401, "Invalid API key");
    }
    if (Number(request.headers.get("content-length") ?? "0") > MAX_BODY_BYTES) return error(413, "Request body too large");
    let json;
    try {
      json = JSON.parse(await request.text());
    } catch {
      return error(400, "Request body is not valid JSON");
    }
    if (url.pathname === "/fill") return Response.json(await pool(env, json.templateID).fill(json.templateID, json.count));
    if (url.pathname === "/one-trip/fill") return Response.json(await shard(env, json.templateID).fill(json.templateID, json.count));
    const parsed = NewSandbox.safeParse(json);
    if (!parsed.success) return error(400, `Invalid body: ${z.prettifyError(parsed.error).replaceAll("\n", "; ")}`);
    const body = parsed.data;
    const spec = { templateID: body.templateID, timeoutS: body.timeout ?? 300, metadata: body.metadata ?? {} };
    const res = url.pathname.startsWith("/one-trip/sandboxes")
      ? await shard(env, body.templateID).create(spec, url.pathname === "/one-trip/sandboxes/quota-per-create")
      : await quota(env).create(body.templateID, spec);
    if (!res.ok) return error(res.status, res.message);
    return Response.json({ sandboxID: res.id, templateID: body.templateID, clientID: "skeleton", envdVersion: "0.2.0" }, { status: 201 });
  },
};

export class FeatureQuota extends DurableObject {
  constructor(ctx, env) {
    super(ctx, env);
    this.sql = ctx.storage.sql;
    this.sql.exec("CREATE TABLE IF NOT EXISTS reservations (id TEXT PRIMARY KEY, cpu INTEGER NOT NULL, memory_mb INTEGER NOT NULL)");
    this.running = this.sql.exec("SELECT COUNT(*) AS n FROM reservations").one().n;
  }

  async create(template, spec) {
    if (this.running >= QUOTA_RUNNING) return { ok: false, status: 429, message: "quota runningSandboxes" };
    this.running++;
    const claimed = await pool(this.env, template).claim();
    if (!claimed.ok) {
      this.running--;
      return claimed;
    }
    this.sql.exec("INSERT INTO reservations (id, cpu, memory_mb) VALUES (?, 2, 512)", claimed.id);
    // Stored before the member leaves for its group (concurrent creates share the commit).
    await this.ctx.storage.sync();
    const res = await group(this.env, claimed.id).create(claimed.id, spec);
    return res.ok ? { ok: true, id: claimed.id } : { ok: false, status: 502, message: "not acknowledged" };
  }
}

/** The team's quota ledger as the one-trip design uses it: credits leased to pools, counted as running. */
export class FeatureLedger extends DurableObject {
  constructor(ctx, env) {
    super(ctx, env);
    this.sql = ctx.storage.sql;
    this.sql.exec("CREATE TABLE IF NOT EXISTS leases (holder TEXT PRIMARY KEY, credits INTEGER NOT NULL)");
    this.running = this.sql.exec("SELECT COALESCE(SUM(credits), 0) AS n FROM leases").one().n;
  }

  /** Up to `n` credits for `holder`, stored before the answer (the output gate holds it). */
  lease(holder, n) {
    const granted = Math.max(0, Math.min(n, QUOTA_RUNNING - this.running));
    if (!granted) return 0;
    this.running += granted;
    this.sql.exec("INSERT INTO leases (holder, credits) VALUES (?, ?) ON CONFLICT (holder) DO UPDATE SET credits = credits + excluded.credits", holder, granted);
    return granted;
  }
}

/** One pool in the one-trip design: warm members, claimed sandboxes, leased quota credits. */
export class FeatureShard extends DurableObject {
  constructor(ctx, env) {
    super(ctx, env);
    this.sql = ctx.storage.sql;
    this.sql.exec("CREATE TABLE IF NOT EXISTS members (id TEXT PRIMARY KEY, state TEXT NOT NULL)");
    this.sql.exec("CREATE TABLE IF NOT EXISTS config (template TEXT NOT NULL, credits INTEGER NOT NULL)");
    this.sql.exec(SANDBOX_TABLES);
    const config = this.sql.exec("SELECT template, credits FROM config").toArray()[0];
    this.template = config?.template ?? null;
    this.credits = config?.credits ?? 0;
    this.leasing = null;
    this.ready = this.sql.exec("SELECT id FROM members WHERE state = 'ready' ORDER BY rowid").toArray().map((r) => r.id);
    this.head = 0;
  }

  fill(template, count) {
    if (this.template === null) this.sql.exec("INSERT INTO config (template, credits) VALUES (?, 0)", template);
    this.template = template;
    return addReady(this, count);
  }

  /** More credits from the team's ledger; concurrent callers share one call. */
  lease() {
    this.leasing ??= quotaLedger(this.env)
      .lease(`${TEAM_ID}/${this.template}`, LEASE)
      .then((n) => {
        this.credits += n;
        this.sql.exec("UPDATE config SET credits = ?", this.credits);
      })
      .finally(() => (this.leasing = null));
    return this.leasing;
  }

  /** `perCreate`: no leased credits, the quota object is asked on every create (what the lease
   * saves: one call and the quota's commit on the answer path). */
  async create(spec, perCreate = false) {
    if (this.template === null) return { ok: false, status: 404, message: "template not found" };
    if (perCreate) {
      const granted = await quotaLedger(this.env).lease(`${TEAM_ID}/${this.template}/each`, 1).catch(() => 0);
      if (!granted) return { ok: false, status: 429, message: "quota runningSandboxes" };
      this.credits++;
    }
    if (this.credits <= 0) await this.lease().catch(() => undefined);
    if (this.credits <= 0) return { ok: false, status: 429, message: "quota runningSandboxes" };
    if (this.head >= this.ready.length) return { ok: false, status: 503, message: "no warm sandbox" };
    const id = popReady(this);
    this.credits--;
    const fresh = newId();
    const refill = { sandboxId: fresh, generation: 1, owner: { kind: "shard", id: `${TEAM_ID}/${this.template}` }, desired: { state: "running" }, template: { id: this.template } };
    // One commit: the credit spent, the member claimed and replaced, the sandbox and its index row
    // (createSandbox writes before its first await).
    this.sql.exec("UPDATE config SET credits = ?", this.credits);
    this.sql.exec("DELETE FROM members WHERE id = ?", id);
    this.sql.exec("INSERT INTO members (id, state) VALUES (?, 'creating')", fresh);
    if (this.credits < LEASE / 2) void this.lease().catch(() => undefined);
    if (!(await createSandbox(this, id, spec, [refill]))) return { ok: false, status: 502, message: "not acknowledged" };
    return { ok: true, id };
  }

  /** The agent answered for these members: they are ready to be claimed. */
  markReady(ids) {
    return markReady(this, ids);
  }
}

export class FeaturePool extends DurableObject {
  constructor(ctx, env) {
    super(ctx, env);
    this.sql = ctx.storage.sql;
    this.sql.exec("CREATE TABLE IF NOT EXISTS members (id TEXT PRIMARY KEY, state TEXT NOT NULL)");
    this.sql.exec("CREATE TABLE IF NOT EXISTS config (template TEXT NOT NULL)");
    this.template = this.sql.exec("SELECT template FROM config").toArray()[0]?.template ?? null;
    this.ready = this.sql.exec("SELECT id FROM members WHERE state = 'ready' ORDER BY rowid").toArray().map((r) => r.id);
    this.head = 0;
    // As PoolDO: a member still creating is its own durable intent, sent again on load.
    this.outgoing = this.sql.exec("SELECT id FROM members WHERE state = 'creating'").toArray().map((r) => this.intent(r.id));
    this.flushing = false;
    if (this.outgoing.length) void this.flush();
  }

  fill(template, count) {
    if (this.template === null) this.sql.exec("INSERT INTO config (template) VALUES (?)", template);
    this.template = template;
    return addReady(this, count);
  }

  claim() {
    if (this.template === null) return { ok: false, status: 404, message: "template not found" };
    if (this.head >= this.ready.length) return { ok: false, status: 503, message: "no warm sandbox" };
    const id = popReady(this);
    const fresh = newId();
    this.sql.exec("DELETE FROM members WHERE id = ?", id);
    this.sql.exec("INSERT INTO members (id, state) VALUES (?, 'creating')", fresh);
    this.outgoing.push(this.intent(fresh));
    void this.flush();
    return { ok: true, id };
  }

  /** The agent answered for these members: they are ready to be claimed. */
  markReady(ids) {
    return markReady(this, ids);
  }

  intent(id) {
    return { sandboxId: id, generation: 1, owner: { kind: "pool", id: `${TEAM_ID}/${this.template}` }, desired: { state: "running" }, template: { id: this.template } };
  }

  async flush() {
    if (this.flushing) return;
    this.flushing = true;
    try {
      while (this.outgoing.length) {
        const batch = this.outgoing.splice(0);
        const ok = await cluster(this.env).enqueue(batch, {}).catch(() => false);
        if (!ok) {
          this.outgoing.unshift(...batch);
          setTimeout(() => void this.flush(), RETRY_MS);
          return;
        }
      }
    } finally {
      this.flushing = false;
    }
  }
}

export class FeatureGroup extends DurableObject {
  constructor(ctx, env) {
    super(ctx, env);
    this.sql = ctx.storage.sql;
    this.sql.exec(SANDBOX_TABLES);
  }

  async create(id, spec) {
    return { ok: await createSandbox(this, id, spec, []) };
  }
}

export class FeatureCluster extends DurableObject {
  constructor(ctx, env) {
    super(ctx, env);
    this.sql = ctx.storage.sql;
    this.sql.exec("CREATE TABLE IF NOT EXISTS outbox (seq INTEGER PRIMARY KEY, sandbox_id TEXT NOT NULL, intent TEXT NOT NULL)");
    this.seq = this.sql.exec("SELECT COALESCE(MAX(seq), 0) AS n FROM outbox").one().n;
    /** seq → resolve of an awaited answer, or the pool owning the intent (its answer is routed there). */
    this.waiters = new Map();
    this.poolOf = new Map();
    this.unsent = [];
    this.sendTimer = null;
    this.answered = [];
    this.unqueueTimer = null;
    this.indexQueue = [];
    this.indexing = false;
  }

  async fetch() {
    const pair = new WebSocketPair();
    this.ctx.acceptWebSocket(pair[1]);
    return new Response(null, { status: 101, webSocket: pair[0] });
  }

  /** Durably queues intents; answers once the index rows are committed and, if asked, the agent answered. */
  async enqueue(intents, opts) {
    const ws = this.ctx.getWebSockets()[0];
    if (!ws) return false;
    const answers = [];
    for (const intent of intents) {
      const seq = ++this.seq;
      this.sql.exec("INSERT INTO outbox (seq, sandbox_id, intent) VALUES (?, ?, ?)", seq, intent.sandboxId, JSON.stringify(intent));
      if (opts.awaitAnswer && intent.owner.kind === "sandbox") answers.push(new Promise((resolve) => this.waiters.set(seq, resolve)));
      else if (intent.owner.kind !== "sandbox") this.poolOf.set(seq, { pool: intent.owner.id, kind: intent.owner.kind, id: intent.sandboxId });
      this.unsent.push({ seq, intent });
    }
    this.sendTimer ??= setTimeout(() => {
      this.sendTimer = null;
      this.ctx.getWebSockets()[0]?.send(JSON.stringify({ items: this.unsent.splice(0) }));
    }, 0);
    const [, indexed] = await Promise.all([Promise.all(answers), Promise.all((opts.index ?? []).map((row) => this.indexRow(row).then(() => true, () => false)))]);
    return { indexed: indexed.every(Boolean) };
  }

  webSocketMessage(_ws, message) {
    const toPools = new Map();
    for (const { seq } of JSON.parse(message).items) {
      this.answered.push(seq);
      const waiter = this.waiters.get(seq);
      if (waiter) {
        this.waiters.delete(seq);
        waiter(true);
        continue;
      }
      const member = this.poolOf.get(seq);
      if (!member) continue;
      this.poolOf.delete(seq);
      const key = `${member.kind}:${member.pool}`;
      const ids = toPools.get(key);
      if (ids) ids.push(member.id);
      else toPools.set(key, [member.id]);
    }
    for (const [key, ids] of toPools) {
      const [kind, name] = [key.slice(0, key.indexOf(":")), key.slice(key.indexOf(":") + 1)];
      const ns = kind === "shard" ? this.env.SHARD : this.env.POOL;
      ns.get(ns.idFromName(name)).markReady(ids).catch((err) => console.warn(`pool ${name}: ${err}`));
    }
    // Deleted a little later in one batch: a write here would hold the awaited replies behind its commit.
    this.unqueueTimer ??= setTimeout(() => {
      this.unqueueTimer = null;
      const seqs = this.answered.splice(0);
      this.sql.exec(`DELETE FROM outbox WHERE seq IN (${seqs.map(() => "?").join(", ")})`, ...seqs);
    }, UNQUEUE_MS);
  }

  indexRow(row) {
    return new Promise((done, fail) => {
      this.indexQueue.push({ row, done, fail });
      if (!this.indexing) void this.flushIndex();
    });
  }

  /** One request to sqld at a time; rows queued meanwhile leave together in the next one. */
  async flushIndex() {
    this.indexing = true;
    try {
      while (this.indexQueue.length) {
        const batch = this.indexQueue.splice(0, 500);
        try {
          await libsqlExecute(this.env.LIBSQL_URL, UPSERT + batch.map(() => ROW).join(", ") + UPSERT_TAIL, batch.flatMap((b) => b.row));
          for (const b of batch) b.done();
        } catch (err) {
          for (const b of batch) b.fail(err);
        }
      }
    } finally {
      this.indexing = false;
    }
  }
}

const SANDBOX_TABLES = `
CREATE TABLE IF NOT EXISTS sandboxes (id TEXT PRIMARY KEY, phase TEXT NOT NULL, spec TEXT NOT NULL, end_at INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS index_outbox (id TEXT PRIMARY KEY, rev INTEGER NOT NULL, op TEXT NOT NULL);
`;

/**
 * A claimed sandbox's rows in `obj` (a group, or a one-trip pool): Pending with its index row,
 * written before the first await (so in the caller's commit), then its intent and `more` to the
 * cluster, awaiting the agent's answer; Running before the answer. Whether the agent answered.
 */
async function createSandbox(obj, id, spec, more) {
  const now = Date.now();
  const endAt = now + spec.timeoutS * 1000;
  const intent = { sandboxId: id, generation: 2, owner: { kind: "sandbox" }, desired: { state: "running" }, template: { id: spec.templateID } };
  const row = [id, TEAM_ID, KEY_ID, spec.templateID, null, "running", "Running", JSON.stringify(spec.metadata), now, endAt, 2, 512, 1024, "0.2.0", 1];
  // The sandbox's row, with its intent, stands for its index row until the cluster answers (a
  // redelivery of the intent would write the index row again; as SandboxGroupDO since session
  // 15, IndexOutbox.carry): the index row goes to the outbox only when the answer does not say
  // libSQL has it, so a create still answers when libSQL is down (sent again later).
  obj.sql.exec("INSERT INTO sandboxes (id, phase, spec, end_at) VALUES (?, 'Pending', ?, ?)", id, JSON.stringify({ ...spec, intent }), endAt);
  const res = await cluster(obj.env).enqueue([intent, ...more], { awaitAnswer: true, index: [row] });
  if (!res) return false;
  obj.sql.exec("UPDATE sandboxes SET phase = 'Running' WHERE id = ?", id);
  if (!res.indexed) obj.sql.exec("INSERT INTO index_outbox (id, rev, op) VALUES (?, 1, ?)", id, JSON.stringify(row));
  return true;
}

/** `count` new members of `pool` (FeaturePool, FeatureShard), ready at once. */
function addReady(pool, count) {
  for (let i = 0; i < count; i++) {
    const id = newId();
    pool.sql.exec("INSERT INTO members (id, state) VALUES (?, 'ready')", id);
    pool.ready.push(id);
  }
  return { available: pool.ready.length - pool.head };
}

/** The oldest ready member of `pool` (the caller checked there is one). */
function popReady(pool) {
  const id = pool.ready[pool.head++];
  if (pool.head > 1024) {
    pool.ready = pool.ready.slice(pool.head);
    pool.head = 0;
  }
  return id;
}

/** The agent answered for these members: they are ready to be claimed. */
function markReady(pool, ids) {
  for (const id of ids) {
    if (pool.sql.exec("UPDATE members SET state = 'ready' WHERE id = ? AND state = 'creating' RETURNING id", id).toArray().length) pool.ready.push(id);
  }
  return true;
}

/** One statement over sqld's HTTP API (Hrana v2 pipeline); throws on any error. */
async function libsqlExecute(base, sql, values) {
  const args = values.map((v) =>
    v === null ? { type: "null" } : typeof v === "number" ? { type: "integer", value: String(v) } : { type: "text", value: v },
  );
  const res = await fetch(`${base}/v2/pipeline`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ requests: [{ type: "execute", stmt: { sql, args } }, { type: "close" }] }),
  });
  const text = await res.text();
  if (!res.ok) throw new Error(`libsql: HTTP ${res.status} ${text.slice(0, 200)}`);
  const first = JSON.parse(text).results[0];
  if (first.type !== "ok") throw new Error(`libsql: ${JSON.stringify(first.error ?? first).slice(0, 200)}`);
}

const hmacs = new Map();
let hmacKey = null;

/** Hex HMAC-SHA256(pepper, key), memoised per isolate. */
function hmac(key, pepper) {
  const id = `${pepper}\n${key}`;
  let h = hmacs.get(id);
  if (!h) {
    if (hmacKey?.pepper !== pepper) {
      hmacKey = { pepper, key: crypto.subtle.importKey("raw", new TextEncoder().encode(pepper), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]) };
    }
    h = hmacKey.key
      .then((k) => crypto.subtle.sign("HMAC", k, new TextEncoder().encode(key)))
      .then((mac) => [...new Uint8Array(mac)].map((b) => b.toString(16).padStart(2, "0")).join(""));
    if (hmacs.size >= 10_000) hmacs.clear();
    hmacs.set(id, h);
  }
  return h;
}

function equalHex(a, b) {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a.charCodeAt(i) ^ b.charCodeAt(i);
  return diff === 0;
}

function error(status, message) {
  return Response.json({ code: status, message }, { status });
}

const quota = (env) => env.QUOTA.get(env.QUOTA.idFromName(TEAM_ID));
const quotaLedger = (env) => env.LEDGER.get(env.LEDGER.idFromName(TEAM_ID));
const shard = (env, template) => env.SHARD.get(env.SHARD.idFromName(`${TEAM_ID}/${template}`));
const pool = (env, template) => env.POOL.get(env.POOL.idFromName(`${TEAM_ID}/${template}`));
const group = (env, id) => env.GROUP.get(env.GROUP.idFromName(id[0]));
const cluster = (env) => env.CLUSTER.get(env.CLUSTER.idFromName("local"));

const ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789";

function newId() {
  let id = "";
  for (const b of crypto.getRandomValues(new Uint8Array(20))) id += ALPHABET[b % 36];
  return id;
}
