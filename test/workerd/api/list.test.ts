// GET /v2/sandboxes and GET /sandboxes against the real index in sqld.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ScriptedAgent } from "../../support/scripted-agent.ts";
import { call, createTeam, expectError, expectStatus, startAgent, unique, type TestTeam } from "../helpers.ts";

let team: TestTeam;
let agent: ScriptedAgent;
/** Oldest first. */
const ids: string[] = [];
const startedAt: string[] = [];

beforeAll(async () => {
  team = await createTeam(unique("list"));
  agent = await startAgent(team.cluster);
  for (let i = 0; i < 3; i++) {
    const res = await expectStatus(call("/v2/sandboxes", { key: team.key, body: { templateID: team.template, metadata: { suite: "list", "user id": "a&b", n: String(i) } } }), 201);
    ids.push(res.sandboxID);
    startedAt.push((await expectStatus(call(`/sandboxes/${res.sandboxID}`, { key: team.key }), 200)).startedAt);
    await new Promise((r) => setTimeout(r, 5));
  }
});
afterAll(() => agent.disconnect());

async function list(query: string): Promise<{ ids: string[]; next: string | null }> {
  const res = await call(`/v2/sandboxes${query}`, { key: team.key });
  const body = await expectStatus(res.clone(), 200);
  return { ids: body.map((s: { sandboxID: string }) => s.sandboxID), next: res.headers.get("x-next-token") };
}

describe("GET /v2/sandboxes", () => {
  it("lists newest first with the ListedSandbox shape", async () => {
    const body = await expectStatus(call("/v2/sandboxes", { key: team.key }), 200);
    expect(body.map((s: { sandboxID: string }) => s.sandboxID)).toEqual([...ids].reverse());
    expect(Object.keys(body[0]).sort()).toEqual(["clientID", "cpuCount", "diskSizeMB", "endAt", "envdVersion", "memoryMB", "metadata", "sandboxID", "startedAt", "state", "templateID"]);
    expect(body[0]).toMatchObject({ state: "running", templateID: team.template, metadata: { suite: "list", n: "2" } });
  });

  it("pages with limit and X-Next-Token, absent on the last page", async () => {
    const seen: string[] = [];
    let token: string | null = null;
    let pages = 0;
    do {
      const page = await list(`?limit=1${token ? `&nextToken=${encodeURIComponent(token)}` : ""}`);
      expect(page.ids).toHaveLength(1);
      seen.push(...page.ids);
      token = page.next;
      pages++;
    } while (token && pages < 10);
    expect(seen).toEqual([...ids].reverse());
    expect(pages).toBe(3);
  });

  it("orders ascending on request", async () => {
    expect((await list("?order=asc")).ids).toEqual(ids);
    const first = await list("?order=asc&limit=2");
    expect(first.ids).toEqual(ids.slice(0, 2));
    expect((await list(`?order=asc&limit=2&nextToken=${first.next}`)).ids).toEqual(ids.slice(2));
  });

  it("filters by metadata as the SDK triple-encodes it (all pairs must match)", async () => {
    // e2b 2.51 wire form of {"user id": "a&b", n: "1"}.
    expect((await list("?metadata=user%252520id%3Da%252526b%26n%3D1")).ids).toEqual([ids[1]]);
    expect((await list("?metadata=user%252520id%3Da%252526b")).ids).toHaveLength(3);
    expect((await list("?metadata=n%3D9")).ids).toEqual([]);
  });

  it("filters by state, startedAfter (inclusive) and template", async () => {
    expect((await list("?state=paused")).ids).toEqual([]);
    expect((await list("?state=running,paused")).ids).toHaveLength(3);
    expect((await list(`?order=asc&startedAfter=${encodeURIComponent(startedAt[1]!)}`)).ids).toEqual(ids.slice(1));
    expect((await list(`?template=${team.template}`)).ids).toHaveLength(3);
    expect((await list("?template=unknown")).ids).toEqual([]);
  });

  it("rejects bad query parameters with 400", async () => {
    for (const q of ["?state=sleeping", "?limit=0", "?limit=101", "?limit=x", "?order=up", "?nextToken=%%%", "?nextToken=bm9wZQ", "?startedAfter=yesterday", "?metadata=agents.kruise.io%252Fowner%3Dx", "?metadata=%E0%A4%A", "?limit=%", "?state=%ZZ"]) {
      await expectError(call(`/v2/sandboxes${q}`, { key: team.key }), 400);
    }
  });
});

describe("X-Total-Running", () => {
  it("counts the key's running sandboxes, whatever the page and filters, and the admin key counts every key's", async () => {
    const own = await createTeam(unique("total"));
    const ownAgent = await startAgent(own.cluster);
    try {
      const created: string[] = [];
      for (let i = 0; i < 3; i++) created.push((await expectStatus(call("/v2/sandboxes", { key: own.key, body: { templateID: own.template } }), 201)).sandboxID);
      await expectStatus(call(`/sandboxes/${created[0]}/pause`, { key: own.key, body: {} }), 204);
      await expectStatus(call(`/sandboxes/${created[1]}`, { key: own.key, method: "DELETE" }), 204);
      for (const query of ["", "?limit=1", "?state=paused", "?metadata=none%3Dmatches"]) {
        const res = await call(`/v2/sandboxes${query}`, { key: own.key });
        expect(res.status).toBe(200);
        expect({ query, total: res.headers.get("x-total-running") }).toEqual({ query, total: "1" });
      }
      // The other suite's team runs sandboxes too: a key sees only its own, the admin all of them.
      const other = Number((await call("/v2/sandboxes?limit=1", { key: team.key })).headers.get("x-total-running"));
      expect(other).toBeGreaterThanOrEqual(ids.length);
      const all = Number((await call("/v2/sandboxes?limit=1")).headers.get("x-total-running"));
      expect(all).toBeGreaterThanOrEqual(other + 1);
    } finally {
      ownAgent.disconnect();
    }
  });
});

describe("GET /sandboxes (v1)", () => {
  it("lists running sandboxes only", async () => {
    const extra = await expectStatus(call("/v2/sandboxes", { key: team.key, body: { templateID: team.template } }), 201);
    await expectStatus(call(`/sandboxes/${extra.sandboxID}/pause`, { key: team.key, body: {} }), 204);
    const body = await expectStatus(call("/sandboxes", { key: team.key }), 200);
    const listed = body.map((s: { sandboxID: string }) => s.sandboxID);
    expect(listed).toEqual([...ids].reverse());
    expect((await list("?state=paused")).ids).toEqual([extra.sandboxID]);
  });
});

describe("odd requests", () => {
  it("never answers a client mistake with a 500", async () => {
    for (const [path, opts] of [
      ["/sandboxes/%E0%A4%A", {}],
      ["/sandboxes/%ZZ/pause", { body: {} }],
      ["/v2/sandboxes", { raw: "null" }],
      ["/v2/sandboxes", { raw: '{"templateID":"x","metadata":{"a":1}}' }],
      ["/api-keys", { raw: "[]" }],
      ["/sandboxes/abc/timeout", { raw: '{"timeout":"10"}' }],
      ["/sandboxes/abc/connect", { raw: "{" }],
    ] as const) {
      const res = await call(path, { key: team.key, ...opts });
      expect({ path, status: res.status }).toMatchObject({ status: expect.any(Number) });
      expect(res.status, `${path} ${JSON.stringify(opts)}`).toBeGreaterThanOrEqual(400);
      expect(res.status, `${path} ${JSON.stringify(opts)}`).toBeLessThan(500);
      expect(((await res.json()) as { code: number }).code).toBe(res.status);
    }
  });
});
