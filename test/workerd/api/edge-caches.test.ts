// The per-isolate caches of API keys (functions/auth/middleware.ts) and templates
// (durable-objects/store/template-cache.ts), both durable-objects/store/ttl-cache.ts, when the
// request that started a read goes away before the read answers: its client disconnects, workerd
// cancels the request and the read's I/O with it, and the read's promise never settles. Other
// requests of the same key or template must still be answered, then and later (they waited on that
// promise for good, for the cache's whole TTL).
import { env, exports } from "cloudflare:workers";
import { describe, expect, it, vi } from "vitest";
import { TtlCache } from "../../../durable-objects/store/ttl-cache.ts";
import { keyHashOf } from "../../../functions/auth/middleware.ts";
import { waitFor } from "../../support/wait-for.ts";
import { call, createTeam, expectStatus, startAgent, unique } from "../helpers.ts";

/**
 * Holds the sqld's only connection (scripts/lib/sqld.ts runs it with one) in an open transaction
 * of a Hrana stream, so every libSQL request waits inside sqld until `release`: the way to keep
 * a lookup in flight long enough for its client to go. Other test files' queries wait as long
 * (a few hundred ms). Against an sqld with more connections the hold would not block reads (WAL):
 * the tests' check that the lookup is still pending after the abort would then fail, not pass.
 */
async function holdSqld(): Promise<{ release: () => Promise<void> }> {
  const pipeline = async (body: unknown) => {
    const res = await fetch(`${env.LIBSQL_URL}/v2/pipeline`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    const text = await res.text();
    if (!res.ok) throw new Error(`sqld ${res.status}: ${text}`);
    return JSON.parse(text) as { baton: string | null; results: { type: string }[] };
  };
  const held = await pipeline({ baton: null, requests: [{ type: "execute", stmt: { sql: "BEGIN IMMEDIATE" } }] });
  const release = async () => void (await pipeline({ baton: held.baton, requests: [{ type: "execute", stmt: { sql: "ROLLBACK" } }, { type: "close" }] }));
  if (held.results[0]!.type !== "ok") {
    await release().catch(() => undefined);
    throw new Error(`sqld refused BEGIN IMMEDIATE: ${JSON.stringify(held.results[0])}`);
  }
  return { release };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The response, or a failure naming the hang (a request awaiting a lookup that will never answer
 * is not cancelled by workerd here: it waits for good). */
function answered(res: Promise<Response>, ms = 5000): Promise<Response> {
  return Promise.race([res, sleep(ms).then(() => Promise.reject(new Error(`no answer within ${ms} ms`)))]);
}

describe("API-key cache", () => {
  it("answers every one of a key's 20 concurrent first requests (those joining the first one's lookup too)", async () => {
    const team = await createTeam(unique("kc-burst"));
    const statuses = await Promise.all(Array.from({ length: 20 }, async () => (await call("/teams", { key: team.key })).status));
    expect(statuses).toEqual(Array(20).fill(200));
  });

  it("answers a key's request that arrives while the lookup of a request whose client left is in flight", async () => {
    const team = await createTeam(unique("kc-gone"));
    const { second } = await afterAbandonedRead(await keyEntry(team.key), keyRequest(team.key), () => ({ second: call("/teams", { key: team.key }) }));
    const body = await expectStatus(answered(second), 200);
    expect(body).toEqual([expect.objectContaining({ name: team.name })]);
  });

  it("answers a key's later requests after the lookup of a request whose client left", async () => {
    const team = await createTeam(unique("kc-later"));
    await afterAbandonedRead(await keyEntry(team.key), keyRequest(team.key), () => undefined);
    await expectStatus(answered(call("/teams", { key: team.key })), 200);
  });
});

describe("template cache", () => {
  it("creates from a template whose first read's create was abandoned by its client", async () => {
    const team = await createTeam(unique("tc-gone"), { replicas: 1 });
    const agent = await startAgent(team.cluster);
    try {
      await agent.waitUntil(() => agent.running().length >= 1);
      // The key is cached first: the create's first libSQL read is its template's.
      await expectStatus(call("/teams", { key: team.key }), 200);
      const body = JSON.stringify({ templateID: team.template, timeout: 60 });
      const create = (signal?: AbortSignal) =>
        exports.default.fetch("http://edge.test/sandboxes", { method: "POST", headers: { "x-api-key": team.key, "content-type": "application/json" }, body, signal });
      const { second } = await afterAbandonedRead((k) => k.endsWith(`/${team.template}`), create, () => ({ second: create() }));
      await expectStatus(answered(second, 10_000), 201);
    } finally {
      agent.disconnect();
    }
  });
});

const keyRequest = (key: string) => (signal: AbortSignal) => exports.default.fetch("http://edge.test/teams", { headers: { "x-api-key": key }, signal });

/** The key cache's key for an API key (its HMAC). */
const keyEntry = async (key: string) => {
  const hash = await keyHashOf(env, key);
  return (k: string) => k === hash;
};

/**
 * The `first` request, its cache lookup (the entry `entry` matches) pending on sqld's held
 * connection, and its client gone (the request is cancelled with its I/O); then `during()`, whose
 * request, if it makes one, is seen to join that lookup while it is still pending, and sqld let go.
 * The caches share the isolate with the test, so `TtlCache.get` is watched to know when each
 * request has reached its lookup: a test that aborted before the lookup, or whose lookup settled
 * on the abort, would otherwise pass without its point.
 */
async function afterAbandonedRead<T>(entry: (key: string) => boolean, request: (signal: AbortSignal) => Promise<Response>, during: () => T): Promise<T> {
  const gets = vi.spyOn(TtlCache.prototype, "get");
  const lookups = () => gets.mock.calls.flatMap(([key], i) => (entry(key) ? [gets.mock.results[i]!.value as Promise<unknown>] : []));
  const hold = await holdSqld();
  try {
    const gone = new AbortController();
    const first = request(gone.signal);
    first.catch(() => undefined);
    const [lookup] = await waitFor(() => lookups().length >= 1 && lookups(), { what: "the first request's lookup" });
    let settled = false;
    lookup!.then(
      () => (settled = true),
      () => (settled = true),
    );
    await sleep(100); // its libSQL read sent (a few ms of drizzle before the fetch)
    gone.abort();
    await expect(first).rejects.toThrow();
    expect(settled, "the abandoned lookup settled: nothing left pending to join").toBe(false);
    const result = during();
    if (result !== undefined) await waitFor(() => lookups().length >= 2, { what: "the second request joining the lookup", timeoutMs: 5000 });
    expect(settled).toBe(false);
    return result;
  } finally {
    gets.mockRestore();
    // Never thrown over the test's own failure; a hold not released ends when sqld expires its
    // stream (other files' queries wait until then).
    await hold.release().catch((err: unknown) => console.error("edge-caches: releasing sqld's held connection failed", err));
  }
}
