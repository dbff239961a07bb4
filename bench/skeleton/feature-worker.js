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
//   - the team's quota: one object per team counts its running sandboxes, their vCPUs and memory,
//     and its creates of the last minute (issue 10 §4); a create reserves in memory (refused past
//     any limit), claims from the pool, stores the reservation under the claimed id, and hands the
//     member to its group itself, so the Worker makes one object call per create (as
//     TeamQuotaDO.create does; the reservation is committed before the group is asked);
//   - the index row in libSQL before the response: the cluster object group-commits the rows of
//     concurrent creates into one multi-row upsert, sent straight to sqld over HTTP (Hrana
//     pipeline); ours does the same from ClusterDO (IndexQueue, directIndexWriter).
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
// fails closed). But it keeps the claimed sandboxes in the pool's object, which the product
// cannot: connect, kill, pause and timeouts address a sandbox by id in its SandboxGroupDO.
// `/group-trip/...` (FeatureClaimGroup, FeatureLeasePool; notes s17-claim) is the one-trip design
// that keeps that ownership: the Worker calls the group the sandbox will live in, which holds
// members leased to it by the pool and credits leased by the quota object, and tells the pool and
// the quota of each claim off the answer path. bench/skeleton-trips.ts runs the designs in
// alternating rounds. (Their leased credits count running sandboxes only, not vCPUs, memory or
// creates per minute as FeatureQuota does since session 28.)
// Since session 28 (notes s28-skel), the per-create work later issues require, each where ours does it:
//   - the request's id echoed in X-Request-Id (issue 15 §1), its count and duration by route,
//     method and status, the create's by result, stock, stage and object call (issue 15 §2), in
//     per-isolate counts handed to one metrics object at most every 5 s;
//   - the template the create names, from libSQL through a 10 s per-isolate cache (unknown: 404;
//     it gives the sandbox its resources, issue 2), and the OpenKruise metadata extensions taken
//     out of the metadata (issue 2, openkruise-agents.md §3.4);
//   - a fresh envdAccessToken, carried in the intent to the agent and returned in the 201 with
//     E2B's other `Sandbox` fields (e2b-protocol.md §1);
//   - the group's alarm moved to the sandbox's end when that is the earliest (E2B's timeout);
//   - the agent's answer awaited for at most 10 s (OpenKruise's `waitReadyTimeout`), a failed
//     create's sandbox deleted;
//   - a team's first intent of an agent session preceded by its traffic policies and security
//     profiles (issue 14 §2-3: no sandbox starts without its team's restrictions);
//   - every agent frame parsed by the protocol's zod schemas (schema/protocol/README.md); the
//     agent answers with the protocol's ack frame carrying the observations made with the acks,
//     and a pool's member is ready when observed Running (our agent acks a create `accepted`
//     before it runs);
//   - each sandbox's desired intent kept by the cluster after its ack, an intent not newer than it
//     dropped (issue 2: resync on reconnect, idempotent intents);
//   - the pool's claims counted in its stored config (the admin API's and console's pool status).
// The cluster object writes the intents of concurrent enqueues in one frame and deletes answered
// outbox rows in batches after 50 ms, as ClusterDO does. Left out: state machines, redelivery,
// tracing (off in the bench: its cost when off is the request id), and what ours does only for
// other requests or bodies than the bench's (network rules, snapshots, auto-pause probes).
import { DurableObject } from "cloudflare:workers";
import { z } from "zod";
import { NewSandbox } from "../../schema/api/sandbox.ts";
import { AgentMessageSchema, parseFrame } from "../../schema/protocol/messages.ts";

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
/** W3C traceparent: its trace id is the request's id. */
const TRACEPARENT = /^[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}$/;
const EXTENSION_PREFIX = "e2b.agents.kruise.io/";
/** The team's quota limits (issue 10 §4), high enough never to refuse in the bench (the checks are what they cost). */
const LIMITS = { runningSandboxes: 1e9, vcpus: 1e9, memoryMB: 1e12, createsPerMinute: 1e9 };
const MINUTE_MS = 60_000;
/** How long a Worker isolate serves a template it read (ours: TEMPLATE_CACHE_TTL_MS). */
const TEMPLATE_TTL_MS = 10_000;
/** Bound on waiting for the agent's answer (ours: DEFAULT_WAIT_MS; OpenKruise's `waitReadyTimeout`). */
const WAIT_MS = 10_000;
/** An isolate's metrics go to the metrics object at most this often (ours: FLUSH_MS). */
const METRICS_FLUSH_MS = 5_000;
const MS_BUCKETS = [1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000];
const STAGE_TEMPLATE = 'edge_create_stage_duration_ms{stage="template"}';
const STAGE_CLAIM = 'edge_create_stage_duration_ms{stage="claim"}';
const STAGE_START = 'edge_create_stage_duration_ms{stage="start"}';
const DO_CALL_QUOTA = 'edge_do_call_duration_ms{method="create",object="team_quota"}';
const CLAIMS_WARM = 'edge_claims_total{stock="warm"}';
const CLAIMS_COLD = 'edge_claims_total{stock="cold"}';
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
  async fetch(request, env, ctx) {
    const url = new URL(request.url);
    if (url.pathname === "/health") return new Response("ok");
    if (url.pathname === "/connect") return cluster(env).fetch(request);
    const started = Date.now();
    // Every control-plane request has an id, its trace id (the caller's traceparent's when it sent
    // one), echoed in X-Request-Id (issue 15 §1; ours: functions/tracing.ts, tracing off).
    const requestId = TRACEPARENT.exec(request.headers.get("traceparent") ?? "")?.[1] ?? crypto.randomUUID().replaceAll("-", "");
    // Every error is E2B's JSON (ours: onError); the bench shows the message.
    const res = await serve(request, env, url).catch((err) => error(500, `Internal server error: ${err?.stack ?? err}`));
    res.headers.set("x-request-id", requestId);
    // Requests by route, method and status, and their duration (issue 15 §2; ours: measureRequests).
    count(`edge_http_requests_total{method="${request.method}",route="${url.pathname}",status="${res.status}"}`);
    observe(`edge_http_request_duration_ms{method="${request.method}",route="${url.pathname}"}`, Date.now() - started);
    const flushing = flushMetrics(env);
    if (flushing) ctx.waitUntil(flushing);
    return res;
  },
};

async function serve(request, env, url) {
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
  if (url.pathname.endsWith("/fill")) await putTemplate(env, json.templateID);
  if (url.pathname === "/fill") return Response.json(await pool(env, json.templateID).fill(json.templateID, json.count));
  if (url.pathname === "/one-trip/fill") return Response.json(await shard(env, json.templateID).fill(json.templateID, json.count));
  if (url.pathname === "/group-trip/fill") return Response.json(await leasePool(env, json.templateID).fill(json.templateID, json.count));
  const parsed = NewSandbox.safeParse(json);
  if (!parsed.success) return error(400, `Invalid body: ${z.prettifyError(parsed.error).replaceAll("\n", "; ")}`);
  const body = parsed.data;
  // The OpenKruise metadata extensions (issue 2; openkruise-agents.md §3.4): taken out of the
  // metadata before it is stored (ours: parseCreateExtensions).
  const metadata = {};
  const ext = {};
  for (const k in body.metadata) {
    if (k.startsWith(EXTENSION_PREFIX)) ext[k.slice(EXTENSION_PREFIX.length)] = body.metadata[k];
    else metadata[k] = body.metadata[k];
  }
  // The template the create names: unknown is a 404, and it gives the sandbox its resources
  // (issue 2; ours: resolveTemplateCached, a 10 s per-isolate cache over libSQL).
  const template = await timed(STAGE_TEMPLATE, () => templateOf(env, body.templateID));
  if (!template) return error(404, `Template "${body.templateID}" not found`);
  const spec = {
    templateID: body.templateID,
    timeoutS: body.timeout ?? 300,
    metadata,
    cpu: template.cpu,
    memoryMB: template.memoryMB,
    diskSizeMB: template.diskSizeMB,
    envdVersion: template.envdVersion,
    // A secured sandbox's token (every v2 create, and v1 unless `secure: false`): the agent gives it
    // to envd, the SDK sends it on every envd call (e2b-protocol.md §1 `Sandbox.envdAccessToken`).
    envdAccessToken: body.secure === false ? null : token(),
  };
  const callStarted = Date.now();
  const res = url.pathname.startsWith("/one-trip/sandboxes")
    ? await shard(env, body.templateID).create(spec, url.pathname === "/one-trip/sandboxes/quota-per-create")
    : url.pathname === "/group-trip/sandboxes"
      ? await claimGroup(env, body.templateID).claimCreate(body.templateID, spec)
      : await quota(env).create(body.templateID, spec);
  // Creates by result, claims by stock, the create's stages and the object call's latency (issue
  // 15 §2; ours: create-sandbox.ts).
  const callMs = Date.now() - callStarted;
  observe(DO_CALL_QUOTA, callMs);
  count(`edge_creates_total{result="${res.ok ? "ok" : res.status}"}`);
  if (res.claimMs !== undefined) {
    observe(STAGE_CLAIM, res.claimMs);
    count(res.warm ? CLAIMS_WARM : CLAIMS_COLD);
    observe(STAGE_START, Math.max(0, callMs - res.claimMs));
  }
  if (!res.ok) return error(res.status, res.message);
  return Response.json(
    {
      sandboxID: res.id,
      templateID: body.templateID,
      clientID: "skeleton",
      envdVersion: template.envdVersion,
      trafficAccessToken: null,
      domain: env.SANDBOX_DOMAIN ?? null,
      ...(spec.envdAccessToken === null ? {} : { envdAccessToken: spec.envdAccessToken }),
    },
    { status: 201 },
  );
}

export class FeatureQuota extends DurableObject {
  constructor(ctx, env) {
    super(ctx, env);
    this.sql = ctx.storage.sql;
    this.sql.exec("CREATE TABLE IF NOT EXISTS reservations (id TEXT PRIMARY KEY, cpu INTEGER NOT NULL, memory_mb INTEGER NOT NULL, generation INTEGER NOT NULL, at INTEGER NOT NULL)");
    const held = this.sql.exec("SELECT COUNT(*) AS n, COALESCE(SUM(cpu), 0) AS cpu, COALESCE(SUM(memory_mb), 0) AS memory FROM reservations").one();
    this.running = held.n;
    this.cpu = held.cpu;
    this.memoryMB = held.memory;
    /** Times of the creates of the last minute, oldest first from `head` (memory only, as ours). */
    this.creates = [];
    this.head = 0;
  }

  /** Every limit of issue 10 §4 a create grows (running sandboxes, vCPUs, memory, creates per
   * minute), checked and counted in one synchronous step (exact under concurrency). */
  reserve(cpu, memoryMB, now) {
    while (this.head < this.creates.length && this.creates[this.head] <= now - MINUTE_MS) this.head++;
    if (this.head > 1024) {
      this.creates = this.creates.slice(this.head);
      this.head = 0;
    }
    const over =
      this.running + 1 > LIMITS.runningSandboxes ? "runningSandboxes"
      : this.cpu + cpu > LIMITS.vcpus ? "vcpus"
      : this.memoryMB + memoryMB > LIMITS.memoryMB ? "memoryMB"
      : this.creates.length - this.head + 1 > LIMITS.createsPerMinute ? "createsPerMinute"
      : null;
    if (over) return over;
    this.running++;
    this.cpu += cpu;
    this.memoryMB += memoryMB;
    this.creates.push(now);
    return null;
  }

  unreserve(cpu, memoryMB) {
    this.running--;
    this.cpu -= cpu;
    this.memoryMB -= memoryMB;
  }

  async create(template, spec) {
    const started = Date.now();
    const over = this.reserve(spec.cpu, spec.memoryMB, started);
    if (over) return { ok: false, status: 429, message: `quota ${over}` };
    const claimed = await pool(this.env, template).claim();
    const claimMs = Date.now() - started;
    if (!claimed.ok) {
      this.unreserve(spec.cpu, spec.memoryMB);
      return { ...claimed, claimMs };
    }
    this.sql.exec("INSERT INTO reservations (id, cpu, memory_mb, generation, at) VALUES (?, ?, ?, 2, ?)", claimed.id, spec.cpu, spec.memoryMB, Date.now());
    // Stored before the member leaves for its group (concurrent creates share the commit).
    await this.ctx.storage.sync();
    const res = await group(this.env, claimed.id).create(claimed.id, spec);
    return res.ok ? { ok: true, id: claimed.id, claimMs, warm: true } : { ok: false, status: 502, message: "not acknowledged", claimMs, warm: true };
  }
}

/** The team's quota ledger as the one-trip design uses it: credits leased to pools, counted as running. */
export class FeatureLedger extends DurableObject {
  constructor(ctx, env) {
    super(ctx, env);
    this.sql = ctx.storage.sql;
    this.sql.exec("CREATE TABLE IF NOT EXISTS leases (holder TEXT PRIMARY KEY, credits INTEGER NOT NULL)");
    this.sql.exec("CREATE TABLE IF NOT EXISTS reservations (id TEXT PRIMARY KEY, cpu INTEGER NOT NULL, memory_mb INTEGER NOT NULL)");
    this.running =
      this.sql.exec("SELECT COALESCE(SUM(credits), 0) AS n FROM leases").one().n + this.sql.exec("SELECT COUNT(*) AS n FROM reservations").one().n;
  }

  /** Spent credits of `holder` become reservations under their sandboxes' ids (idempotent by id), so
   * a release by id finds them (the group-trip design: the group spends, the ledger learns after). */
  convert(holder, ids) {
    let n = 0;
    for (const id of ids) n += this.sql.exec("INSERT INTO reservations (id, cpu, memory_mb) VALUES (?, 2, 512) ON CONFLICT (id) DO NOTHING RETURNING id", id).toArray().length;
    if (n) this.sql.exec("UPDATE leases SET credits = credits - ? WHERE holder = ?", n, holder);
    return true;
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

/**
 * `/group-trip/...`: the one-trip design that keeps the product's ownership (notes s17-claim): a
 * claimed sandbox lives in the SandboxGroupDO its id routes to, as every later call (connect,
 * kill, timeouts) addresses it by id. The pool (FeatureLeasePool) mints its members' ids so they
 * route to its claim group, and leases each member to that group once ready (stored as leased in
 * the pool, then stored by the group before it answers); the team's ledger leases quota credits
 * to the group. A warm claim is Worker → the claim group: it spends a credit, takes a leased
 * member, and writes the member's removal, the sandbox Pending with its index row, and an outbox
 * row (the pool's claim notice and the credit's convert to a reservation under the sandbox's id)
 * in one commit; the intent goes to the cluster, Running, the answer. Off the answer path the
 * outbox leaves in one pool call and one ledger call per batch (both idempotent by id), and its
 * rows go once both answered; the pool forgets the claimed members, inserts their replacements
 * and sends their intents; once the agent answers them the pool leases them to the group.
 */
export class FeatureClaimGroup extends DurableObject {
  constructor(ctx, env) {
    super(ctx, env);
    this.sql = ctx.storage.sql;
    openSandboxTables(this, ctx);
    this.sql.exec("CREATE TABLE IF NOT EXISTS leased_members (id TEXT PRIMARY KEY, template TEXT NOT NULL)");
    this.sql.exec("CREATE TABLE IF NOT EXISTS credits (team TEXT PRIMARY KEY, n INTEGER NOT NULL)");
    this.sql.exec("CREATE TABLE IF NOT EXISTS claim_outbox (id TEXT PRIMARY KEY, template TEXT NOT NULL)");
    /** The members leased to it, oldest first (popReady). */
    this.ready = this.sql.exec("SELECT id FROM leased_members ORDER BY rowid").toArray().map((r) => r.id);
    this.head = 0;
    this.credits = this.sql.exec("SELECT n FROM credits WHERE team = ?", TEAM_ID).toArray()[0]?.n ?? 0;
    this.leasing = null;
    /** Claims committed and not yet told to the pool and the ledger (their outbox rows). */
    this.untold = this.sql.exec("SELECT id, template FROM claim_outbox").toArray().map((r) => ({ id: r.id, template: r.template }));
    if (this.untold.length) void this.tell();
  }

  /** Members the pool leases to this group: claimable here only, stored before the answer. */
  leaseMembers(template, ids) {
    for (const id of ids) {
      if (this.sql.exec("INSERT INTO leased_members (id, template) VALUES (?, ?) ON CONFLICT (id) DO NOTHING RETURNING id", id, template).toArray().length) this.ready.push(id);
    }
    return true;
  }

  /** More credits from the team's ledger; concurrent callers share one call. */
  lease() {
    return leaseCredits(this, `group:${this.ctx.id}`, () =>
      this.sql.exec("INSERT INTO credits (team, n) VALUES (?, ?) ON CONFLICT (team) DO UPDATE SET n = excluded.n", TEAM_ID, this.credits),
    );
  }

  async claimCreate(template, spec) {
    if (this.credits <= 0) await this.lease().catch(() => undefined);
    if (this.credits <= 0) return { ok: false, status: 429, message: "quota runningSandboxes" };
    // No leased member: the product would answer "fallback" and the Worker would take today's chain.
    if (this.head >= this.ready.length) return { ok: false, status: 503, message: "no leased warm sandbox" };
    const id = popReady(this);
    this.credits--;
    // One commit with the sandbox's rows (createSandbox writes before its first await).
    this.sql.exec("UPDATE credits SET n = ? WHERE team = ?", this.credits, TEAM_ID);
    this.sql.exec("DELETE FROM leased_members WHERE id = ?", id);
    this.sql.exec("INSERT INTO claim_outbox (id, template) VALUES (?, ?)", id, template);
    this.untold.push({ id, template });
    void this.tell();
    if (this.credits < LEASE / 2) void this.lease().catch(() => undefined);
    if (!(await createSandbox(this, id, spec, []))) return { ok: false, status: 502, message: "not acknowledged" };
    return { ok: true, id };
  }

  alarm() {
    return expire(this);
  }

  /** The claim notices and credit converts, batched, after the claims' commit; rows go once both answered. */
  tell() {
    return drain(this, "untold", true, async (batch) => {
      const byPool = new Map();
      for (const c of batch) byPool.set(c.template, [...(byPool.get(c.template) ?? []), c.id]);
      const ids = batch.map((c) => c.id);
      await Promise.all([
        ...[...byPool].map(([template, members]) => leasePool(this.env, template).claimed(members)),
        quotaLedger(this.env).convert(`group:${this.ctx.id}`, ids),
      ]);
      inChunks(ids, (chunk) => this.sql.exec(`DELETE FROM claim_outbox WHERE id IN (${chunk.map(() => "?").join(", ")})`, ...chunk));
      return true;
    });
  }
}

/** The pool of the group-trip design: members' lifecycle and refill; ready members are leased to the claim group. */
export class FeatureLeasePool extends DurableObject {
  constructor(ctx, env) {
    super(ctx, env);
    this.sql = ctx.storage.sql;
    this.template = openPoolTables(this.sql);
    this.outgoing = this.sql.exec("SELECT id FROM members WHERE state = 'creating'").toArray().map((r) => this.intent(r.id));
    /** Ready members stored as leased whose lease the group has not answered. */
    this.unleased = this.sql.exec("SELECT id FROM members WHERE state = 'leasing'").toArray().map((r) => r.id);
    if (this.outgoing.length) void this.flush();
    if (this.unleased.length) void this.leaseOut();
  }

  async fill(template, count) {
    if (this.template === null) this.sql.exec("INSERT INTO config (template) VALUES (?)", template);
    this.template = template;
    const ids = [];
    for (let i = 0; i < count; i++) ids.push(claimGroupId(template));
    for (const id of ids) this.sql.exec("INSERT INTO members (id, state) VALUES (?, 'leasing')", id);
    this.unleased.push(...ids);
    await this.leaseOut();
    return { available: count };
  }

  /** Members the claim group handed out (idempotent): forgotten, replaced, the replacements' intents sent. */
  claimed(ids) {
    for (const id of ids) {
      if (!this.sql.exec("DELETE FROM members WHERE id = ? RETURNING id", id).toArray().length) continue;
      const fresh = claimGroupId(this.template);
      this.sql.exec("INSERT INTO members (id, state) VALUES (?, 'creating')", fresh);
      this.outgoing.push(this.intent(fresh));
    }
    void this.flush();
    return true;
  }

  /** The agent answered for these members: stored as leased, then leased to the claim group. */
  markReady(ids) {
    for (const id of ids) {
      if (this.sql.exec("UPDATE members SET state = 'leasing' WHERE id = ? AND state = 'creating' RETURNING id", id).toArray().length) this.unleased.push(id);
    }
    void this.leaseOut();
    return true;
  }

  intent(id) {
    return { sandboxId: id, generation: 1, owner: { kind: "lpool", id: `${TEAM_ID}/${this.template}` }, desired: { state: "running" }, template: { id: this.template }, team: TEAM_ID };
  }

  /** Leases after their rows are stored (a pool that restarts sends them again: idempotent by id). */
  leaseOut() {
    return drain(this, "unleased", true, async (batch) => {
      if (!(await claimGroup(this.env, this.template).leaseMembers(this.template, batch))) return false;
      inChunks(batch, (ids) => this.sql.exec(`UPDATE members SET state = 'leased' WHERE id IN (${ids.map(() => "?").join(", ")})`, ...ids));
      return true;
    });
  }

  flush() {
    return drain(this, "outgoing", false, (batch) => cluster(this.env).enqueue(batch, {}));
  }
}

/** One pool in the one-trip design: warm members, claimed sandboxes, leased quota credits. */
export class FeatureShard extends DurableObject {
  constructor(ctx, env) {
    super(ctx, env);
    this.sql = ctx.storage.sql;
    this.sql.exec("CREATE TABLE IF NOT EXISTS members (id TEXT PRIMARY KEY, state TEXT NOT NULL)");
    this.sql.exec("CREATE TABLE IF NOT EXISTS config (template TEXT NOT NULL, credits INTEGER NOT NULL)");
    openSandboxTables(this, ctx);
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
    return leaseCredits(this, `${TEAM_ID}/${this.template}`, () => this.sql.exec("UPDATE config SET credits = ?", this.credits));
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
    const refill = { sandboxId: fresh, generation: 1, owner: { kind: "shard", id: `${TEAM_ID}/${this.template}` }, desired: { state: "running" }, template: { id: this.template }, team: TEAM_ID };
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

  alarm() {
    return expire(this);
  }
}

export class FeaturePool extends DurableObject {
  constructor(ctx, env) {
    super(ctx, env);
    this.sql = ctx.storage.sql;
    this.template = openPoolTables(this.sql);
    this.ready = this.sql.exec("SELECT id FROM members WHERE state = 'ready' ORDER BY rowid").toArray().map((r) => r.id);
    this.head = 0;
    // As PoolDO: a member still creating is its own durable intent, sent again on load.
    this.outgoing = this.sql.exec("SELECT id FROM members WHERE state = 'creating'").toArray().map((r) => this.intent(r.id));
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
    // The pool's claims, stored with them: the admin API's and the console's pool status (issue 15
    // §4: pools with stock and claims; ours: PoolDO's counters, once per commit).
    this.sql.exec("UPDATE config SET claimed = claimed + 1");
    this.outgoing.push(this.intent(fresh));
    void this.flush();
    return { ok: true, id };
  }

  /** The agent answered for these members: they are ready to be claimed. */
  markReady(ids) {
    return markReady(this, ids);
  }

  intent(id) {
    return { sandboxId: id, generation: 1, owner: { kind: "pool", id: `${TEAM_ID}/${this.template}` }, desired: { state: "running" }, template: { id: this.template }, team: TEAM_ID };
  }

  flush() {
    return drain(this, "outgoing", false, (batch) => cluster(this.env).enqueue(batch, {}));
  }
}

export class FeatureGroup extends DurableObject {
  constructor(ctx, env) {
    super(ctx, env);
    this.sql = ctx.storage.sql;
    openSandboxTables(this, ctx);
  }

  async create(id, spec) {
    return { ok: await createSandbox(this, id, spec, []) };
  }

  alarm() {
    return expire(this);
  }
}

export class FeatureCluster extends DurableObject {
  constructor(ctx, env) {
    super(ctx, env);
    this.sql = ctx.storage.sql;
    // Each sandbox's desired intent, kept after its ack: what a reconnecting agent's inventory is
    // resynced against (issue 2: "full-inventory resync on reconnect"); the outbox names the
    // unacked ones. Ours: ClusterDO's desired and outbox rows.
    this.sql.exec("CREATE TABLE IF NOT EXISTS desired (sandbox_id TEXT PRIMARY KEY, generation INTEGER NOT NULL, intent TEXT NOT NULL)");
    this.sql.exec("CREATE TABLE IF NOT EXISTS outbox (seq INTEGER PRIMARY KEY, sandbox_id TEXT NOT NULL, generation INTEGER NOT NULL)");
    this.seq = this.sql.exec("SELECT COALESCE(MAX(seq), 0) AS n FROM outbox").one().n;
    /** Each sandbox's desired generation: an intent not newer changes nothing (a redelivered or raced one). */
    this.generations = new Map(this.sql.exec("SELECT sandbox_id, generation FROM desired").toArray().map((r) => [r.sandbox_id, r.generation]));
    /** seq → resolve of an awaited answer, or the pool owning the intent (its answer is routed there). */
    this.waiters = new Map();
    this.poolOf = new Map();
    this.unsent = [];
    this.sendTimer = null;
    this.answered = [];
    this.unqueueTimer = null;
    this.indexQueue = [];
    this.indexing = false;
    this.sweepTimer = null;
    /** Teams whose traffic policies and security profiles this agent session holds (ours: HeldTeams). */
    this.teamsHeld = new Set();
  }

  async fetch() {
    const pair = new WebSocketPair();
    this.teamsHeld.clear();
    this.ctx.acceptWebSocket(pair[1]);
    return new Response(null, { status: 101, webSocket: pair[0] });
  }

  /** Durably queues intents; answers once the index rows are committed and, if asked, the agent answered. */
  async enqueue(intents, opts) {
    const ws = this.ctx.getWebSockets()[0];
    if (!ws) return false;
    const answers = [];
    const until = Date.now() + WAIT_MS;
    for (const intent of intents) {
      const known = this.generations.get(intent.sandboxId);
      if (known !== undefined && intent.generation <= known) {
        // Stale: acknowledged by nobody (ours: seq 0).
        if (opts.awaitAnswer && intent.owner.kind === "sandbox") answers.push(false);
        continue;
      }
      this.generations.set(intent.sandboxId, intent.generation);
      const seq = ++this.seq;
      this.sql.exec(
        "INSERT INTO desired (sandbox_id, generation, intent) VALUES (?, ?, ?) ON CONFLICT (sandbox_id) DO UPDATE SET generation = excluded.generation, intent = excluded.intent",
        intent.sandboxId,
        intent.generation,
        JSON.stringify(intent),
      );
      this.sql.exec("INSERT INTO outbox (seq, sandbox_id, generation) VALUES (?, ?, ?)", seq, intent.sandboxId, intent.generation);
      if (opts.awaitAnswer && intent.owner.kind === "sandbox") answers.push(new Promise((resolve) => this.waiters.set(seq, { resolve, until })));
      else if (intent.owner.kind !== "sandbox") this.poolOf.set(intent.sandboxId, { pool: intent.owner.id, kind: intent.owner.kind });
      this.unsent.push({ seq, intent });
    }
    this.sendTimer ??= setTimeout(() => {
      this.sendTimer = null;
      const items = this.unsent.splice(0);
      // A team's first sandbox of the session: its traffic policies and security profiles go
      // first, so no sandbox starts without its team's restrictions (issue 14 §2-3; ours:
      // ClusterDO.flushIntents). The bench's team has none: the frame says so.
      const teams = new Set();
      for (const { intent } of items) if (intent.desired.state !== "deleted" && !this.teamsHeld.has(intent.team)) teams.add(intent.team);
      const ws = this.ctx.getWebSockets()[0];
      if (teams.size) {
        ws?.send(JSON.stringify({ type: "teamSets", teams: [...teams], trafficPolicies: [], securityProfiles: [] }));
        for (const t of teams) this.teamsHeld.add(t);
      }
      ws?.send(JSON.stringify({ items }));
    }, 0);
    if (answers.length) this.sweepTimer ??= setTimeout(() => this.sweep(), 1_000);
    const [acked, indexed] = await Promise.all([Promise.all(answers), Promise.all((opts.index ?? []).map((row) => this.indexRow(row).then(() => true, () => false)))]);
    return { acked: acked.every(Boolean), indexed: indexed.every(Boolean) };
  }

  /** Answers `false` to waiters past their bound (one timer a second while any wait). Bounds grow
   * with seq (one WAIT_MS for all), so the walk stops at the first that is not due. */
  sweep() {
    this.sweepTimer = null;
    const now = Date.now();
    for (const [seq, w] of this.waiters) {
      if (w.until > now) break;
      this.waiters.delete(seq);
      w.resolve(false);
    }
    if (this.waiters.size) this.sweepTimer = setTimeout(() => this.sweep(), 1_000);
  }

  webSocketMessage(ws, message) {
    // Every agent frame is parsed by the protocol's own zod schemas, bounded (schema/protocol/
    // README.md: "Both sides parse every frame with these zod schemas"; a cluster's frames carry
    // what tenants wrote in their namespaces); a bad one ends the session, as ClusterDO does.
    const parsed = typeof message === "string" ? parseFrame(AgentMessageSchema, message) : { ok: false, error: "frames are JSON text" };
    if (!parsed.ok) return ws.close(4400, "bad_frame");
    const msg = parsed.value;
    if (msg.type !== "ack") return;
    for (const { seq } of msg.items) {
      this.answered.push(seq);
      const waiter = this.waiters.get(seq);
      if (waiter) {
        this.waiters.delete(seq);
        waiter.resolve(true);
      }
    }
    // A pool's member is ready when the agent observes it Running and ready (its create is acked
    // `accepted` before it runs, as our agent does): the observations go to their pools, one call
    // per pool per frame. An awaited sandbox's observation repeats its ack: dropped.
    const toPools = new Map();
    for (const o of msg.observations ?? []) {
      if (o.phase !== "Running" || !o.ready) continue;
      const member = this.poolOf.get(o.sandboxId);
      if (!member) continue;
      this.poolOf.delete(o.sandboxId);
      const key = `${member.kind}:${member.pool}`;
      const ids = toPools.get(key);
      if (ids) ids.push(o.sandboxId);
      else toPools.set(key, [o.sandboxId]);
    }
    for (const [key, ids] of toPools) {
      const [kind, name] = [key.slice(0, key.indexOf(":")), key.slice(key.indexOf(":") + 1)];
      const ns = kind === "shard" ? this.env.SHARD : kind === "lpool" ? this.env.LPOOL : this.env.POOL;
      ns.get(ns.idFromName(name)).markReady(ids).catch((err) => console.warn(`pool ${name}: ${err}`));
    }
    // Deleted a little later in one batch: a write here would hold the awaited replies behind its commit.
    this.unqueueTimer ??= setTimeout(() => {
      this.unqueueTimer = null;
      const seqs = this.answered.splice(0);
      inChunks(seqs, (chunk) => this.sql.exec(`DELETE FROM outbox WHERE seq IN (${chunk.map(() => "?").join(", ")})`, ...chunk));
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
  // The token goes to the agent with the intent (envd checks it); the team names the policy and
  // profile sets the agent must hold first (FeatureCluster).
  const intent = { sandboxId: id, generation: 2, owner: { kind: "sandbox" }, desired: { state: "running" }, template: { id: spec.templateID }, envdAccessToken: spec.envdAccessToken, team: TEAM_ID };
  const row = [id, TEAM_ID, KEY_ID, spec.templateID, null, "running", "Running", JSON.stringify(spec.metadata), now, endAt, spec.cpu, spec.memoryMB, spec.diskSizeMB, spec.envdVersion, 1];
  // The sandbox's row, with its intent, stands for its index row until the cluster answers (a
  // redelivery of the intent would write the index row again; as SandboxGroupDO since session
  // 15, IndexOutbox.carry): the index row goes to the outbox only when the answer does not say
  // libSQL has it, so a create still answers when libSQL is down (sent again later).
  obj.sql.exec("INSERT INTO sandboxes (id, phase, spec, end_at) VALUES (?, 'Pending', ?, ?)", id, JSON.stringify({ ...spec, intent }), endAt);
  // E2B's timeout: the sandbox is killed at its end, by the object's one alarm at the earliest end
  // (issue 2: "one alarm for all timers"; ours: SandboxGroupDO.arm), moved only when this end is earlier.
  if (obj.alarmAt === null || endAt < obj.alarmAt) {
    obj.alarmAt = endAt;
    void obj.ctx.storage.setAlarm(endAt);
  }
  const res = await cluster(obj.env).enqueue([intent, ...more], { awaitAnswer: true, index: [row] });
  if (!res || !res.acked) {
    // Not taken within WAIT_MS (or no agent): the create fails and the sandbox goes (ours: `abandon`).
    obj.sql.exec("DELETE FROM sandboxes WHERE id = ?", id);
    if (res) void cluster(obj.env).enqueue([{ ...intent, generation: 3, desired: { state: "deleted" } }], {});
    return false;
  }
  obj.sql.exec("UPDATE sandboxes SET phase = 'Running' WHERE id = ?", id);
  if (!res.indexed) obj.sql.exec("INSERT INTO index_outbox (id, rev, op) VALUES (?, 1, ?)", id, JSON.stringify(row));
  return true;
}

/** The sandbox tables of `obj` (FeatureGroup, FeatureShard, FeatureClaimGroup) and the time of its alarm. */
function openSandboxTables(obj, ctx) {
  obj.sql.exec(SANDBOX_TABLES);
  obj.alarmAt = null;
  void ctx.blockConcurrencyWhile(async () => {
    obj.alarmAt = await ctx.storage.getAlarm();
  });
}

/** The alarm: sandboxes past their end are deleted, a delete intent each; the alarm moves to the next end. */
async function expire(obj) {
  const gone = obj.sql.exec("DELETE FROM sandboxes WHERE end_at <= ? RETURNING id", Date.now()).toArray();
  obj.alarmAt = obj.sql.exec("SELECT MIN(end_at) AS at FROM sandboxes").one().at;
  if (obj.alarmAt !== null) await obj.ctx.storage.setAlarm(obj.alarmAt);
  const deletes = gone.map((r) => ({ sandboxId: r.id, generation: 3, owner: { kind: "sandbox" }, desired: { state: "deleted" }, template: null, team: TEAM_ID }));
  if (deletes.length) await cluster(obj.env).enqueue(deletes, {});
}

/**
 * Sends what `obj[queue]` holds in batches, one call at a time, after the object's writes are
 * stored when `sync`; a batch whose `send` fails (false or a throw) goes back to the front and is
 * sent again after RETRY_MS. Items queued meanwhile join the next batch.
 */
async function drain(obj, queue, sync, send) {
  const busy = `${queue}Busy`;
  if (obj[busy]) return;
  obj[busy] = true;
  try {
    if (sync) await obj.ctx.storage.sync();
    while (obj[queue].length) {
      const batch = obj[queue].splice(0);
      if (!(await send(batch).catch(() => false))) {
        obj[queue].unshift(...batch);
        setTimeout(() => void drain(obj, queue, sync, send), RETRY_MS);
        return;
      }
    }
  } finally {
    obj[busy] = false;
  }
}

/** More quota credits for `obj` (FeatureShard, FeatureClaimGroup) from the team's ledger, stored by
 * `save`; concurrent callers share one call. */
function leaseCredits(obj, holder, save) {
  obj.leasing ??= quotaLedger(obj.env)
    .lease(holder, LEASE)
    .then((n) => {
      obj.credits += n;
      save();
    })
    .finally(() => (obj.leasing = null));
  return obj.leasing;
}

/** A pool's tables (FeaturePool, FeatureLeasePool); its template, or null before its fill. */
function openPoolTables(sql) {
  sql.exec("CREATE TABLE IF NOT EXISTS members (id TEXT PRIMARY KEY, state TEXT NOT NULL)");
  sql.exec("CREATE TABLE IF NOT EXISTS config (template TEXT NOT NULL, claimed INTEGER NOT NULL DEFAULT 0)");
  return sql.exec("SELECT template FROM config").toArray()[0]?.template ?? null;
}

/** `f` over slices of `xs` small enough for one statement's bound variables (SQLite in a Durable Object allows 100). */
function inChunks(xs, f) {
  for (let i = 0; i < xs.length; i += 100) f(xs.slice(i, i + 100));
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

/** The oldest ready member of `pool` (or leased member of a FeatureClaimGroup; the caller checked there is one). */
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

/** One statement over sqld's HTTP API (Hrana v2 pipeline); its rows, each an array of values; throws on any error. */
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
  return first.response.result.rows.map((row) => row.map((v) => (v.type === "integer" ? Number(v.value) : v.type === "null" ? null : v.value)));
}

const templates = new Map();

/** The template `id` of the team, read from libSQL at most once per TEMPLATE_TTL_MS per isolate
 * (null when there is none). Only read values are kept: a request awaiting a read another request
 * started is taken by workerd for hung (and canceled) when that read's I/O is not its own. */
async function templateOf(env, id) {
  const key = `${TEAM_ID}/${id}`;
  const now = Date.now();
  const hit = templates.get(key);
  if (hit && hit.until > now) return hit.value;
  const rows = await libsqlExecute(env.LIBSQL_URL, "SELECT cpu_count, memory_mb, disk_size_mb, envd_version FROM skeleton_templates WHERE team_id = ? AND id = ?", [TEAM_ID, id]);
  const value = rows.length ? { cpu: rows[0][0], memoryMB: rows[0][1], diskSizeMB: rows[0][2], envdVersion: rows[0][3] } : null;
  if (templates.size >= 10_000) templates.clear();
  templates.set(key, { value, until: now + TEMPLATE_TTL_MS });
  return value;
}

/** The admin side of a pool's fill: its template in libSQL (as the admin API's template PUT). */
async function putTemplate(env, id) {
  await libsqlExecute(
    env.LIBSQL_URL,
    "INSERT INTO skeleton_templates (team_id, id, cpu_count, memory_mb, disk_size_mb, envd_version) VALUES (?, ?, 2, 512, 1024, '0.2.0') ON CONFLICT (team_id, id) DO NOTHING",
    [TEAM_ID, id],
  );
  templates.delete(`${TEAM_ID}/${id}`);
}

const HEX = Array.from({ length: 256 }, (_, b) => b.toString(16).padStart(2, "0"));

/** A fresh access token: 24 random bytes, hex. */
function token() {
  let s = "";
  for (const b of crypto.getRandomValues(new Uint8Array(24))) s += HEX[b];
  return s;
}

/** What this isolate counted since its last flush (ours: durable-objects/metrics/). */
let counted = { counters: {}, histograms: {} };
let metricsFlushedAt = 0;
let metricsFlush = null;

function count(key) {
  counted.counters[key] = (counted.counters[key] ?? 0) + 1;
}

/** One observation in milliseconds into a histogram of MS_BUCKETS. */
function observe(key, ms) {
  let h = counted.histograms[key];
  if (!h) h = counted.histograms[key] = { buckets: new Array(MS_BUCKETS.length + 1).fill(0), sum: 0, count: 0 };
  let i = 0;
  while (i < MS_BUCKETS.length && ms > MS_BUCKETS[i]) i++;
  h.buckets[i]++;
  h.sum += ms;
  h.count++;
}

async function timed(key, work) {
  const started = Date.now();
  try {
    return await work();
  } finally {
    observe(key, Date.now() - started);
  }
}

/** Hands the isolate's counts to the metrics object at most once per METRICS_FLUSH_MS; the flush
 * it starts, for the request's waitUntil. */
function flushMetrics(env) {
  const now = Date.now();
  if (metricsFlush || now - metricsFlushedAt < METRICS_FLUSH_MS) return null;
  const delta = counted;
  counted = { counters: {}, histograms: {} };
  metricsFlushedAt = now;
  metricsFlush = env.METRICS.get(env.METRICS.idFromName("edge"))
    .add(delta)
    .catch(() => undefined)
    .finally(() => (metricsFlush = null));
  return metricsFlush;
}

/** The sum of every isolate's counts, stored (ours: EdgeMetricsDO). */
export class FeatureMetrics extends DurableObject {
  constructor(ctx, env) {
    super(ctx, env);
    void ctx.blockConcurrencyWhile(async () => {
      this.totals = (await ctx.storage.get("totals")) ?? { counters: {}, histograms: {} };
    });
  }

  async add(delta) {
    const totals = this.totals;
    for (const [k, n] of Object.entries(delta.counters)) totals.counters[k] = (totals.counters[k] ?? 0) + n;
    for (const [k, d] of Object.entries(delta.histograms)) {
      const h = (totals.histograms[k] ??= { buckets: new Array(MS_BUCKETS.length + 1).fill(0), sum: 0, count: 0 });
      d.buckets.forEach((n, i) => (h.buckets[i] += n));
      h.sum += d.sum;
      h.count += d.count;
    }
    await this.ctx.storage.put("totals", totals);
  }
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
const leasePool = (env, template) => env.LPOOL.get(env.LPOOL.idFromName(`${TEAM_ID}/${template}`));
/** The claim group of a pool (k = 1): the group its members' ids route to, by their first character. */
const claimGroupChar = (template) => ALPHABET[[...`${TEAM_ID}/${template}`].reduce((h, c) => (h * 31 + c.charCodeAt(0)) >>> 0, 7) % 36];
const claimGroup = (env, template) => env.CLAIMGROUP.get(env.CLAIMGROUP.idFromName(claimGroupChar(template)));
/** A member id of the pool of `template`: its first character routes it to the pool's claim group. */
const claimGroupId = (template) => claimGroupChar(template) + newId().slice(1);
const cluster = (env) => env.CLUSTER.get(env.CLUSTER.idFromName("local"));

const ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789";

function newId() {
  let id = "";
  for (const b of crypto.getRandomValues(new Uint8Array(20))) id += ALPHABET[b % 36];
  return id;
}
