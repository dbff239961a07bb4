// The operator console through the Worker: the login form and its session cookie (HttpOnly,
// SameSite=Strict, a __Host- cookie over https, the key never in a URL, no login from another site), team scoping (a team key sees only
// its team's sandboxes; the admin sees every team's and the clusters), CSRF on the kill, and a kill
// from the console seen through the E2B API.
import { env, exports } from "cloudflare:workers";
import { getDb } from "../../../durable-objects/store/db.ts";
import { listOpsRuns } from "../../../durable-objects/store/update-ops-runs.ts";
import { SESSIONS_PER_KEY } from "../../../durable-objects/store/console-sessions.ts";
import { consoleSessions } from "../../../schema/db/tables.ts";
import { eq } from "drizzle-orm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ScriptedAgent } from "../../support/scripted-agent.ts";
import { waitFor } from "../../support/wait-for.ts";
import { ADMIN_KEY, call, createTeam, expectStatus, startAgent, unique, type TestTeam } from "../helpers.ts";

let team: TestTeam;
let other: TestTeam;
let agent: ScriptedAgent;
let own: string;
let theirs: string;

function page(path: string, init: { cookie?: string; method?: string; form?: Record<string, string>; headers?: Record<string, string>; origin?: string } = {}): Promise<Response> {
  const headers: Record<string, string> = { ...init.headers };
  if (init.cookie) headers.cookie = init.cookie;
  let body: string | undefined;
  if (init.form) {
    headers["content-type"] = "application/x-www-form-urlencoded";
    body = new URLSearchParams(init.form).toString();
  }
  return exports.default.fetch(`${init.origin ?? "http://edge.test"}${path}`, { method: init.method ?? (body !== undefined ? "POST" : "GET"), headers, body, redirect: "manual" });
}

async function login(key: string, origin?: string): Promise<{ cookie: string; setCookie: string; res: Response }> {
  const res = await page("/console/login", { form: { key }, origin });
  const setCookie = res.headers.get("set-cookie") ?? "";
  return { cookie: setCookie.split(";")[0]!, setCookie, res };
}

async function html(res: Response | Promise<Response>, status = 200): Promise<string> {
  const r = await res;
  const text = await r.text();
  expect({ status: r.status, text: text.slice(0, 300) }).toMatchObject({ status });
  return text;
}

/**
 * A section's fragment on each of its pages, joined: the admin's sections are paged (25 rows) and
 * the sqld is shared with every other file's teams, so a row may be past the first page.
 */
async function everyPage(path: string, fragment: string, cookie: string): Promise<string> {
  let url: string | undefined = `${path}${path.includes("?") ? "&" : "?"}fragment=${fragment}`;
  let all = "";
  for (let i = 0; url !== undefined && i < 1000; i++) {
    const body = await html(page(url, { cookie, headers: { "x-console-fragment": "1" } }));
    all += body;
    const next = /<a href="([^"]+)" rel="next">/.exec(body)?.[1]?.replaceAll("&amp;", "&");
    url = next && `${next}&fragment=${fragment}`;
  }
  return all;
}

const csrfOf = (body: string) => /name="csrf" value="([0-9a-f]{32})"/.exec(body)?.[1] ?? "";

beforeAll(async () => {
  team = await createTeam(unique("console"));
  other = await createTeam(unique("console-other"), { cluster: team.cluster });
  agent = await startAgent(team.cluster);
  own = (await expectStatus(call("/v2/sandboxes", { key: team.key, body: { templateID: team.template } }), 201)).sandboxID;
  theirs = (await expectStatus(call("/v2/sandboxes", { key: other.key, body: { templateID: other.template } }), 201)).sandboxID;
});
afterAll(() => agent.disconnect());

describe("signing in", () => {
  it("sends a visitor without a session to the login form; a fragment request gets a 401", async () => {
    const res = await page("/console");
    expect(res.status).toBe(303);
    expect(res.headers.get("location")).toBe("/console/login");
    expect((await page("/console/sandboxes?fragment=list", { headers: { "x-console-fragment": "1" } })).status).toBe(401);
    expect(await html(page("/console/login"))).toMatch(/<label for="key">/);
  });

  it("refuses a wrong or malformed key with the form again and no cookie", async () => {
    for (const key of ["e2b_" + "1".repeat(40), "not-a-key"]) {
      const { res, setCookie } = await login(key);
      expect(await html(res, 401)).toMatch(/not valid/);
      expect(setCookie).toBe("");
    }
  });

  it("sets a signed HttpOnly SameSite=Strict cookie scoped to /console, a __Host- one over https, without the key in it or in the redirect", async () => {
    const { res, setCookie } = await login(team.key);
    expect(res.status).toBe(303);
    expect(res.headers.get("location")).toBe("/console");
    expect(setCookie).toMatch(/^console_session=/);
    expect(setCookie).toMatch(/HttpOnly/);
    expect(setCookie).toMatch(/SameSite=Strict/);
    expect(setCookie).toMatch(/Path=\/console/);
    expect(setCookie).not.toMatch(/Secure/);
    expect(decodeURIComponent(setCookie)).not.toContain(team.key);
    // Over https no other host of the domain can set or shadow it: Secure, Path=/, no Domain.
    const secure = (await login(team.key, "https://edge.test")).setCookie;
    expect(secure).toMatch(/^__Host-console_session=/);
    expect(secure).toMatch(/; Path=\/;/);
    expect(secure).toMatch(/Secure/);
    expect(secure).toMatch(/HttpOnly/);
    expect(secure).not.toMatch(/Domain=/i);
  });

  it("over https, a console_session cookie another host of the domain set (a sandbox's, with the tenant's own session) is not read, first or alone", async () => {
    // What a tenant's sandbox host can plant for the whole domain: its own valid session's value
    // under the name the console used (Domain=<domain>; Path=/console/), which the browser sends first.
    const tenantsValue = (await login(other.key, "https://edge.test")).cookie.split("=").slice(1).join("=");
    const operators = (await login(team.key, "https://edge.test")).cookie;
    const both = `console_session=${tenantsValue}; ${operators}`;
    expect(await html(page(`/console/sandboxes/${own}`, { cookie: both, origin: "https://edge.test" }))).toContain("started");
    await html(page(`/console/sandboxes/${theirs}`, { cookie: both, origin: "https://edge.test" }), 404);
    expect((await page("/console", { cookie: `console_session=${tenantsValue}`, origin: "https://edge.test" })).status).toBe(303);
  });

  it("refuses a login posted from another site's page (it would replace the operator's session with the sender's)", async () => {
    const res = await page("/console/login", { form: { key: other.key }, headers: { origin: "http://evil.test" } });
    await html(res, 403);
    expect(res.headers.get("set-cookie")).toBeNull();
    expect((await login(team.key)).res.status).toBe(303);
  });

  it("lets a page run only the console's own script (the host also serves tenant files)", async () => {
    const { cookie } = await login(team.key);
    const csp = (await page("/console", { cookie })).headers.get("content-security-policy") ?? "";
    expect(/script-src ([^;]*)/.exec(csp)?.[1]).toBe("http://edge.test/console/live.js");
  });

  it("refuses a tampered cookie", async () => {
    const { cookie } = await login(team.key);
    const tampered = cookie.replace(/%22exp%22%3A(\d)/, (_m, d) => `%22exp%22%3A${(Number(d) + 1) % 10}`);
    expect(tampered).not.toBe(cookie);
    expect((await page("/console", { cookie: tampered })).status).toBe(303);
    expect((await page("/console", { cookie })).status).toBe(200);
  });
});

describe("signing out", () => {
  it("ends the session on the server: a copy of the cookie taken before is refused after, another session of the key lives on", async () => {
    const { cookie } = await login(team.key);
    const elsewhere = await login(team.key);
    const csrf = csrfOf(await html(page("/console/sandboxes", { cookie })));
    const out = await page("/console/logout", { cookie, form: { csrf } });
    expect(out.status).toBe(303);
    expect(out.headers.get("location")).toBe("/console/login");
    // The copy: the same cookie, sent again after the browser was told to drop it.
    const again = await page("/console", { cookie });
    expect(again.status).toBe(303);
    expect(again.headers.get("location")).toBe("/console/login");
    expect((await page("/console/sandboxes?fragment=list", { cookie, headers: { "x-console-fragment": "1" } })).status).toBe(401);
    const kill = await page(`/console/sandboxes/${own}/kill`, { cookie, form: { csrf } });
    expect(kill.headers.get("location")).toBe("/console/login");
    await expectStatus(call(`/sandboxes/${own}`, { key: team.key }), 200);
    expect((await page("/console", { cookie: elsewhere.cookie })).status).toBe(200);
  });

  it("logins collect expired sessions and keep a key's newest 16", async () => {
    const db = getDb(env);
    const stale = "f".repeat(32);
    await db.insert(consoleSessions).values({ id: stale, keyHash: "0".repeat(64), createdAt: 1, expiresAt: Date.now() - 1 });
    const solo = await createTeam(unique("console-sessions"), { cluster: team.cluster });
    const cookies: string[] = [];
    for (let i = 0; i < SESSIONS_PER_KEY + 1; i++) cookies.push((await login(solo.key)).cookie);
    expect(await db.select().from(consoleSessions).where(eq(consoleSessions.id, stale))).toEqual([]);
    expect((await page("/console", { cookie: cookies[0] })).status).toBe(303);
    for (const cookie of cookies.slice(1)) expect((await page("/console", { cookie })).status).toBe(200);
  });
});

describe("tenant bytes", () => {
  it("a log line the sandbox wrote (its start command's output) is text on the detail page, never markup", async () => {
    const attack = `</li><script>alert(1)</script><img src=x onerror=alert(1)>`;
    agent.logs.append(own, "info", attack, { source: "start", stream: "stdout", note: attack });
    const { cookie } = await login(team.key);
    const detail = await html(page(`/console/sandboxes/${own}`, { cookie }));
    expect(detail).toContain("&lt;script&gt;alert(1)&lt;/script&gt;");
    expect(detail).not.toContain("<script>alert(1)");
    expect(detail).not.toContain("<img src=x");
  });

  it("a fragment name that is an object's own property is a 400, like any unknown one", async () => {
    const { cookie } = await login(team.key);
    for (const name of ["constructor", "hasOwnProperty", "toString", "__proto__", "nope"]) {
      expect((await page(`/console?fragment=${name}`, { cookie, headers: { "x-console-fragment": "1" } })).status).toBe(400);
    }
  });
});

describe("team scoping", () => {
  it("a team key's console lists its team's sandboxes only, and another team's sandbox is a 404", async () => {
    const { cookie } = await login(team.key);
    const list = await html(page("/console/sandboxes?state=all", { cookie }));
    expect(list).toContain(`data-sandbox="${own}"`);
    expect(list).not.toContain(theirs);
    await html(page(`/console/sandboxes/${theirs}`, { cookie }), 404);
    expect(await html(page(`/console/sandboxes/${own}`, { cookie }))).toContain("started");
    const overview = await html(page("/console", { cookie }));
    expect(overview).toContain(`data-template="${team.template}"`);
    expect(overview).not.toContain(other.template);
    expect(overview).not.toContain('id="clusters"');
  });

  it("the admin's console lists every team's sandboxes and the clusters", async () => {
    const { cookie } = await login(ADMIN_KEY);
    const list = await html(page("/console/sandboxes?state=all", { cookie }));
    expect(list).toContain(own);
    expect(list).toContain(theirs);
    expect(await everyPage("/console", "clusters", cookie)).toMatch(new RegExp(`data-cluster="${team.cluster}"`));
    expect(await everyPage("/console", "pools", cookie)).toContain(`data-template="${other.template}"`);
  });

  it("lists a connected agent whose cluster no template names", async () => {
    const lonely = unique("lonely");
    const stray = await startAgent(lonely);
    try {
      const { cookie } = await login(ADMIN_KEY);
      const clusters = () => everyPage("/console", "clusters", cookie);
      await expect.poll(clusters).toMatch(new RegExp(`<tr data-cluster="${lonely}"><td>${lonely}</td><td class="ok">connected`));
    } finally {
      stray.disconnect();
    }
  });

  it("pages past the newest 100 sandboxes: the next page has the rest, none twice", async () => {
    const many = await createTeam(unique("console-many"), { cluster: team.cluster });
    await expectStatus(call(`/admin/teams/${many.name}/quota`, { method: "PUT", body: { runningSandboxes: 200, vcpus: 1000, memoryMB: 1_000_000 } }), 200);
    const ids: string[] = [];
    for (let i = 0; i < 101; i += 20) {
      const batch = await Promise.all(Array.from({ length: Math.min(20, 101 - i) }, () => expectStatus(call("/v2/sandboxes", { key: many.key, body: { templateID: many.template } }), 201)));
      ids.push(...batch.map((b) => b.sandboxID as string));
    }
    const { cookie } = await login(many.key);
    const rowsOf = (body: string) => [...body.matchAll(/<tr data-sandbox="([a-z0-9]+)">/g)].map((m) => m[1]!);
    const first = await html(page("/console/sandboxes?state=all", { cookie }));
    const next = /<a href="([^"]+)" rel="next">/.exec(first)?.[1]?.replaceAll("&amp;", "&");
    expect(rowsOf(first)).toHaveLength(100);
    expect(next).toBeDefined();
    const second = await html(page(next!, { cookie }));
    expect(second).not.toContain('rel="next"');
    expect([...rowsOf(first), ...rowsOf(second)].sort()).toEqual([...ids].sort());
    await html(page("/console/sandboxes?after=not-a-token", { cookie }), 400);
  });

  it("a live fragment is the section alone", async () => {
    const { cookie } = await login(team.key);
    const frag = await html(page("/console/sandboxes?state=all&fragment=list", { cookie, headers: { "x-console-fragment": "1" } }));
    expect(frag).toContain(own);
    expect(frag).not.toContain("<html");
  });

  it("refuses a malformed filter with a 400 page", async () => {
    const { cookie } = await login(team.key);
    expect(await html(page("/console/sandboxes?state=exploded", { cookie }), 400)).toMatch(/state must be/);
    expect(await html(page("/console/sandboxes?template=..%2F", { cookie }), 400)).toMatch(/template/);
  });
});

describe("overview", () => {
  const fragment = (name: string, cookie: string) => html(page(`/console?fragment=${name}`, { cookie, headers: { "x-console-fragment": "1" } }));
  const cellsOf = (row: string) => [...row.matchAll(/<td[^>]*>(.*?)<\/td>/g)].map((m) => m[1]!.replace(/<!--.*?-->/g, ""));

  it("a team's quota row shows its paused sandboxes against their limit", async () => {
    const paused = await createTeam(unique("console-paused"), { cluster: team.cluster });
    await expectStatus(call(`/admin/teams/${paused.name}/quota`, { method: "PUT", body: { pausedSandboxes: 3 } }), 200);
    const id = (await expectStatus(call("/v2/sandboxes", { key: paused.key, body: { templateID: paused.template } }), 201)).sandboxID;
    await expectStatus(call(`/sandboxes/${id}/pause`, { key: paused.key, body: {} }), 204);
    const { cookie } = await login(paused.key);
    const row = new RegExp(`<tr data-team="${paused.name}">(.*?)</tr>`).exec(await everyPage("/console", "quotas", cookie))?.[1] ?? "";
    expect(row).toContain('<td data-field="paused">1 of 3</td>');
    expect(row).toContain('<td data-field="running">0 of 100</td>');
  });

  it("a pool's row shows the API's replicas, stock, claims and revisions", async () => {
    // A pool of 2 on the scripted agent's cluster (its members report ready), one claimed: the
    // figures differ (claimed 1, the refill creating).
    const pooled = await createTeam(unique("console-pool"), { cluster: team.cluster, replicas: 2 });
    const poolOf = async () => (await expectStatus(call(`/admin/teams/${pooled.name}/templates/${pooled.template}`), 200)).pool;
    await waitFor(async () => (await poolOf()).available === 2);
    await expectStatus(call("/v2/sandboxes", { key: pooled.key, body: { templateID: pooled.template, timeout: 300 } }), 201);
    const { cookie } = await login(ADMIN_KEY);
    // The refill moves on between two reads: the row must equal the API's figures of one moment.
    const seen = await waitFor(
      async () => {
        const p = await poolOf();
        const row = new RegExp(`<tr data-template="${pooled.template}">(.*?)</tr>`).exec(await everyPage("/console", "pools", cookie))?.[1] ?? "";
        const want = [pooled.name, pooled.template, String(p.replicas), String(p.available), String(p.creating), String(p.claimed), `${p.currentRevision ?? "–"} / ${p.updateRevision ?? "–"}`];
        return JSON.stringify(cellsOf(row).slice(0, 7)) === JSON.stringify(want) ? p : undefined;
      },
      { what: "the pools row to show the API's figures" },
    );
    expect(seen).toMatchObject({ replicas: 2, claimed: 1, updateRevision: expect.any(String) });
  });

  it("shows 25 pools a page, by template id, with links to the next and first pages that keep the live fragment on the page", async () => {
    const many = await createTeam(unique("console-pools"), { cluster: team.cluster });
    const ids = [many.template];
    for (let i = 0; i < 25; i++) {
      const id = `p${String(i).padStart(2, "0")}-${many.template}`;
      await expectStatus(call(`/admin/teams/${many.name}/templates/${id}`, { method: "PUT", body: { spec: { cluster: team.cluster, replicas: 0 } } }), 201);
      ids.push(id);
    }
    const { cookie } = await login(many.key);
    const rowsOf = (body: string) => [...body.matchAll(/<tr data-template="([^"]+)">/g)].map((m) => m[1]!);
    const first = await html(page("/console", { cookie }));
    expect(rowsOf(first)).toEqual([...ids].sort().slice(0, 25));
    const next = /<a href="([^"]+)" rel="next">Next pools<\/a>/.exec(first)?.[1]?.replaceAll("&amp;", "&");
    expect(next).toBe(`/console?pools=${encodeURIComponent(`${many.name}/${[...ids].sort()[24]}`)}`);
    // Without JS: the link is a page of its own, whose live section polls that same page.
    const second = await html(page(next!, { cookie }));
    expect(rowsOf(second)).toEqual([...ids].sort().slice(25));
    expect(second).not.toContain('rel="next"');
    expect(second).toContain('<a href="/console">First pools</a>');
    const src = /<div id="pools"[^>]*data-live="([^"]+)"/.exec(second)?.[1]?.replaceAll("&amp;", "&");
    expect(src).toBe(`${next}&fragment=pools`);
    const live = await html(page(src!, { cookie, headers: { "x-console-fragment": "1" } }));
    expect(rowsOf(live)).toEqual(rowsOf(second));
    for (const bad of ["x", "a/b/c", `${many.name}/UPPER`, "%2F"]) await html(page(`/console?pools=${bad}`, { cookie }), 400);
    await html(page("/console?quotas=..", { cookie }), 400);
  });

  it("the latency chart counts each create stage as /admin/metrics does", async () => {
    const { cookie } = await login(ADMIN_KEY);
    const counts = async () => {
      const text = await (await call("/admin/metrics")).text();
      return Object.fromEntries([...text.matchAll(/^edge_create_stage_duration_ms_count\{stage="([a-z]+)"\} (\d+)$/gm)].map((m) => [m[1]!, Number(m[2])]));
    };
    const before = await counts();
    const chart = await fragment("latency", cookie);
    const after = await counts();
    const rows = Object.fromEntries([...chart.matchAll(/<tr data-stage="([a-z]+)">(.*?)<\/tr>/g)].map((m) => [m[1]!, Number(cellsOf(m[2]!)[1])]));
    expect(Object.keys(rows).sort()).toEqual(Object.keys(after).sort());
    expect(Object.keys(rows)).toEqual(expect.arrayContaining(["claim", "start", "template"]));
    // Other files' creates may land between the reads: the chart's count lies between them.
    for (const [stage, n] of Object.entries(rows)) {
      expect(n).toBeGreaterThanOrEqual(before[stage] ?? 0);
      expect(n).toBeLessThanOrEqual(after[stage]!);
    }
    expect(chart).toMatch(/<svg[^>]*role="img"/);
  });
});

describe("kill", () => {
  it("is refused without the session's CSRF token or from another origin, and the sandbox lives on", async () => {
    const { cookie } = await login(team.key);
    const csrf = csrfOf(await html(page("/console/sandboxes", { cookie })));
    expect(csrf).toMatch(/^[0-9a-f]{32}$/);
    await html(page(`/console/sandboxes/${own}/kill`, { cookie, form: {} }), 403);
    await html(page(`/console/sandboxes/${own}/kill`, { cookie, form: { csrf: "0".repeat(32) } }), 403);
    await html(page(`/console/sandboxes/${own}/kill`, { cookie, form: { csrf }, headers: { origin: "http://evil.test" } }), 403);
    // Another session's token is not this one's.
    const second = await login(team.key);
    await html(page(`/console/sandboxes/${own}/kill`, { cookie: second.cookie, form: { csrf } }), 403);
    await expectStatus(call(`/sandboxes/${own}`, { key: team.key }), 200);
  });

  it("a team cannot kill another team's sandbox from the console", async () => {
    const { cookie } = await login(team.key);
    const csrf = csrfOf(await html(page("/console/sandboxes", { cookie })));
    await html(page(`/console/sandboxes/${theirs}/kill`, { cookie, form: { csrf } }), 404);
    await expectStatus(call(`/sandboxes/${theirs}`, { key: other.key }), 200);
  });

  it("with the token, kills: the API no longer has the sandbox", async () => {
    const { cookie } = await login(team.key);
    const csrf = csrfOf(await html(page("/console/sandboxes", { cookie })));
    const res = await page(`/console/sandboxes/${own}/kill`, { cookie, form: { csrf } });
    expect(res.status).toBe(303);
    expect(res.headers.get("location")).toBe(`/console/sandboxes?killed=${own}`);
    await expectStatus(call(`/sandboxes/${own}`, { key: team.key }), 404);
  });
});

describe("update ops runs", () => {
  it("the admin sees a run's phase and sandboxes as the API has them; a team key is refused", async () => {
    await expectStatus(call(`/admin/teams/${other.name}/updateops`, { body: { name: "console-run", selector: {}, paused: true } }), 201);
    const api = await expectStatus(call(`/admin/teams/${other.name}/updateops/console-run`), 200);
    const { cookie } = await login(ADMIN_KEY);
    const body = await html(page(`/console/ops?team=${other.name}&name=console-run`, { cookie }));
    expect(body).toContain(`Phase: <strong>${api.phase}</strong>`);
    for (const s of api.sandboxes) expect(body).toContain(`data-ops-sandbox="${s.id}"`);
    await html(page("/console/ops?team=..&name=x", { cookie }), 400);
    const team = await login(other.key);
    await html(page(`/console/ops?team=${other.name}&name=console-run`, { cookie: team.cookie }), 403);
  });

  it("keeps each run's phase and counts in its libSQL row as the run changes: the list is one query", async () => {
    const { cookie } = await login(ADMIN_KEY);
    const url = `/admin/teams/${team.name}/updateops/summary-run`;
    const rowOf = async () => (await listOpsRuns(getDb(env), null, 1000)).find((r) => r.teamName === team.name && r.name === "summary-run");
    const summary = (v: { phase: string; replicas: number; updatedReplicas: number; failedReplicas: number }) => ({ phase: v.phase, replicas: v.replicas, updatedReplicas: v.updatedReplicas, failedReplicas: v.failedReplicas });
    // A sandbox of a template that changed since: the run's member. Paused, the run waits.
    const tpl = `summary-${team.template}`;
    await expectStatus(call(`/admin/teams/${team.name}/templates/${tpl}`, { method: "PUT", body: { spec: { cluster: team.cluster, replicas: 0 } } }), 201);
    const sbx = (await expectStatus(call("/v2/sandboxes", { key: team.key, body: { templateID: tpl } }), 201)).sandboxID;
    await expectStatus(call(`/admin/teams/${team.name}/templates/${tpl}`, { method: "PUT", body: { spec: { cluster: team.cluster, replicas: 0, memoryMB: 384 } } }), 200);
    await expectStatus(call(`/admin/teams/${team.name}/updateops`, { body: { name: "summary-run", selector: {}, paused: true } }), 201);
    const before = summary(await expectStatus(call(url), 200));
    await waitFor(async () => JSON.stringify(summary((await rowOf()) as never)) === JSON.stringify(before) || undefined, { what: `the row's summary ${JSON.stringify(before)}` });
    // Unpaused, the run moves on; its row follows each change, as the API reports the run.
    await expectStatus(call(url, { method: "PATCH", body: { paused: false } }), 200);
    const settled = await waitFor(async () => {
      const api = summary(await expectStatus(call(url), 200));
      const row = await rowOf();
      return api.phase !== before.phase && row && JSON.stringify(summary(row as never)) === JSON.stringify(api) ? api : undefined;
    }, { timeoutMs: 15_000, what: "the row to follow the run past its first phase" });
    const runs = await html(page("/console/ops?fragment=runs", { cookie, headers: { "x-console-fragment": "1" } }));
    expect(runs).toMatch(new RegExp(`data-ops-run="${team.name}/summary-run">.*?<td data-field="phase">${settled.phase}</td><td>${settled.updatedReplicas} / ${settled.replicas}</td><td>${settled.failedReplicas}</td>`));
    expect(settled.replicas).toBeGreaterThan(0);
    await expectStatus(call(url, { method: "DELETE" }), 204);
    expect(await rowOf()).toBeUndefined();
    await call(`/sandboxes/${sbx}`, { method: "DELETE" });
  });

  it("lists every run with its phase until it is removed, and the autoscalers' decisions", async () => {
    const { cookie } = await login(ADMIN_KEY);
    const runs = () => html(page("/console/ops?fragment=runs", { cookie, headers: { "x-console-fragment": "1" } }));
    await expectStatus(call(`/admin/teams/${team.name}/updateops`, { body: { name: "listed-run", selector: {}, paused: true } }), 201);
    const api = await expectStatus(call(`/admin/teams/${team.name}/updateops/listed-run`), 200);
    const row = new RegExp(`data-ops-run="${team.name}/listed-run">.*?href="/console/ops\\?team=${team.name}&amp;name=listed-run".*?<td data-field="phase">${api.phase}</td>`);
    expect(await runs()).toMatch(row);
    await expectStatus(call(`/admin/teams/${team.name}/updateops/listed-run`, { method: "DELETE" }), 204);
    expect(await runs()).not.toContain(`data-ops-run="${team.name}/listed-run"`);

    const tpl = `/admin/teams/${other.name}/templates/${other.template}/autoscaler`;
    // A floor above the pool's size: the autoscaler rescales at once (a decision and an event).
    const spec = { minReplicas: 2, maxReplicas: 2, capacityPolicy: { targetAvailable: 0, tolerance: 0 }, sampling: { intervalSeconds: 60, windowSeconds: 60 } };
    const set = await expectStatus(call(tpl, { method: "PUT", body: spec }), 200);
    const decisions = await everyPage("/console/ops", "autoscalers", cookie);
    const cells = (time: string, kind: string, reason: string) => `<tr data-autoscaler="${other.template}"><td>${time}</td><td>${other.name}</td><td>${other.template}</td><td>${kind}</td><td>${reason}</td>`;
    expect(decisions).toContain(cells(set.lastDecision.time, "decision", set.lastDecision.reason));
    expect(set.events.length).toBeGreaterThan(0);
    for (const e of set.events) expect(decisions).toContain(cells(e.time, `event (${e.type})`, e.reason));
    await expectStatus(call(tpl, { method: "DELETE" }), 204);
  });
});
