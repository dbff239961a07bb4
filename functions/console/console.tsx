/** @jsxImportSource hono/jsx */
// The operator console under /console: server-rendered pages (Hono JSX) over data.ts, signed-in by
// a login form (session.ts), with live sections refreshed by polling their fragment (live.js) and
// one action, the kill, behind the session's CSRF token. Errors are pages, not E2B's JSON.
import { Hono, type Context } from "hono";
import type { Child } from "hono/jsx";
import { z } from "zod";
import { ApiError, errorStatus } from "../../schema/errors.ts";
import { looksLikeApiKey } from "../../schema/api/api-key.ts";
import { TemplateId } from "../../schema/api/template.ts";
import { SANDBOX_ID_PATTERN } from "../../schema/protocol/ids.ts";
import { callerOfHash, keyHashOf } from "../auth/middleware.ts";
import { decodeCursor, encodeCursor } from "../api/list-query.ts";
import type { Caller } from "../env.ts";
import { LatencyChart } from "./chart.tsx";
import { CONSOLE_STATES, clusters, killSandbox, opsRuns, pools, quotas, sandboxDetail, sandboxList, stageLatencies } from "./data.ts";
import { LIVE_JS, Live, LoginPage, Page } from "./layout.tsx";
import { Clusters, Pager, Pools, Quotas, SandboxTable, Timeline } from "./sections.tsx";
import { pageHref, parsePageKeys, type PageKeys } from "./paging.ts";
import { AutoscalerDecisions, OpsLookup, OpsRun, OpsRuns } from "./ops.tsx";
import { TeamName } from "../../schema/api/team.ts";
import { UpdateOpsName } from "../../schema/api/update-ops.ts";
import { getDb } from "../../durable-objects/store/db.ts";
import { findTeamByName } from "../../durable-objects/store/teams.ts";
import { updateOpsStatus } from "../../durable-objects/operations/update-ops.ts";
import { csrfMatches, endSession, readSession, startSession, type ConsoleEnv } from "./session.ts";


const MAX_FORM_BYTES = 4096;
const StateFilter = z.enum([...CONSOLE_STATES, "all"]).default("running");

export const consoleApp = new Hono<ConsoleEnv>();

consoleApp.use("/console/*", async (c, next) => {
  await next();
  c.header("cache-control", "no-store");
  c.header("x-frame-options", "DENY");
  // The one script, not 'self': the edge's host also serves tenant bytes (a sandbox file's signed
  // `/files` URL, as octet-stream, which browsers run as a script when asked to).
  c.header("content-security-policy", `default-src 'none'; script-src ${new URL(c.req.url).origin}/console/live.js; style-src 'unsafe-inline'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'`);
});

consoleApp.onError((err, c) => {
  if (!(err instanceof ApiError)) throw err;
  const status = errorStatus[err.code] as 400;
  return c.html(<Page title="Error"><p class="error" role="alert">{err.message}</p><p><a href="/console">Back to the console</a></p></Page>, status);
});

consoleApp.get("/console/live.js", (c) => c.body(LIVE_JS, 200, { "content-type": "text/javascript; charset=utf-8" }));
consoleApp.get("/console/login", (c) => c.html(<LoginPage />));

async function form(c: Context<ConsoleEnv>): Promise<Record<string, string>> {
  if (Number(c.req.header("content-length") ?? MAX_FORM_BYTES + 1) > MAX_FORM_BYTES) throw new ApiError("bad_request", "The form is too large");
  const type = c.req.header("content-type") ?? "";
  if (!type.startsWith("application/x-www-form-urlencoded")) throw new ApiError("bad_request", "Expected a form");
  return Object.fromEntries(new URLSearchParams(new TextDecoder().decode(await c.req.arrayBuffer())));
}

/** A browser's POST names its page's origin; another site's form is refused (a login from
 * elsewhere would replace the operator's session with the sender's: login CSRF). */
function sameOrigin(c: Context<ConsoleEnv>): void {
  const origin = c.req.header("origin");
  if (origin && origin !== new URL(c.req.url).origin) throw new ApiError("forbidden", "Cross-origin form refused");
}

consoleApp.post("/console/login", async (c) => {
  sameOrigin(c);
  const key = (await form(c)).key?.trim() ?? "";
  try {
    if (!looksLikeApiKey(key)) throw new ApiError("unauthorized", "Invalid API key");
    const hash = await keyHashOf(c.env, key);
    await callerOfHash(c.env, hash, (p) => c.executionCtx.waitUntil(p));
    await startSession(c, hash);
  } catch (err) {
    if (err instanceof ApiError && err.code === "unauthorized") return c.html(<LoginPage error="That key is not valid." />, 401);
    throw err;
  }
  return c.redirect("/console", 303);
});

// Everything below needs a session: a page redirects to the login form, a fragment answers 401.
consoleApp.use("/console/*", async (c, next) => {
  const session = await readSession(c);
  const caller = session && (await callerOfHash(c.env, session.keyHash, (p) => c.executionCtx.waitUntil(p)).catch(() => null));
  if (!session || !caller) {
    if (c.req.header("x-console-fragment")) return c.text("sign in again", 401);
    return c.redirect("/console/login", 303);
  }
  c.set("session", session);
  c.set("caller", caller);
  await next();
});

/** POSTs carry the session's CSRF token (and, from a browser, this origin). */
async function checkedForm(c: Context<ConsoleEnv>): Promise<Record<string, string>> {
  sameOrigin(c);
  const fields = await form(c);
  if (!csrfMatches(c.get("session"), fields.csrf)) throw new ApiError("forbidden", "The form's token is missing or stale: reload the page");
  return fields;
}

consoleApp.post("/console/logout", async (c) => {
  await checkedForm(c);
  await endSession(c, c.get("session"));
  return c.redirect("/console/login", 303);
});

function who(caller: Caller): string {
  return caller.admin ? "admin" : `team ${caller.teamName}`;
}

/** The whole page, or only the section named by `fragment` when live.js asks for it. */
function render(c: Context<ConsoleEnv>, title: string, sections: Record<string, () => Promise<Child>>, wrap: (parts: Record<string, Child>) => Child) {
  return async () => {
    const want = c.req.header("x-console-fragment") ? c.req.query("fragment") : undefined;
    if (want !== undefined) {
      // Own names only: `constructor`, `hasOwnProperty`, … are the object's, not sections.
      const one = Object.hasOwn(sections, want) ? sections[want] : undefined;
      if (!one) throw new ApiError("bad_request", "Unknown fragment");
      return c.html(<>{await one()}</>);
    }
    const names = Object.keys(sections);
    const parts = Object.fromEntries(await Promise.all(names.map(async (n) => [n, await sections[n]!()] as const)));
    return c.html(<Page title={title} who={who(c.get("caller"))} csrf={c.get("session").csrf}>{wrap(parts)}</Page>);
  };
}

consoleApp.get("/console", (c) => {
  const caller = c.get("caller");
  const keys = parsePageKeys((n) => c.req.query(n));
  const at = (k: PageKeys) => pageHref("/console", { ...keys, ...k });
  const pager = <K extends keyof PageKeys>(name: K, noun: string, next: PageKeys[K] | undefined) => (
    <Pager noun={noun} next={next && at({ [name]: next })} first={keys[name] && at({ [name]: undefined })} />
  );
  const src = (fragment: string) => pageHref("/console", keys, { fragment });
  return render(c, "Overview", {
    clusters: async () => {
      const p = await clusters(c.env, caller, keys.clusters);
      return <Clusters rows={p.rows} pager={pager("clusters", "clusters", p.next)} />;
    },
    pools: async () => {
      const p = await pools(c.env, caller, keys.pools);
      return <Pools rows={p.rows} pager={pager("pools", "pools", p.next)} />;
    },
    quotas: async () => {
      const p = await quotas(c.env, caller, keys.quotas);
      return <Quotas rows={p.rows} pager={pager("quotas", "teams", p.next)} />;
    },
    latency: async () => <LatencyChart stages={await stageLatencies(c.env, caller)} />,
  }, (p) => (
    <>
      {caller.admin && <Live id="clusters" label="Clusters" src={src("clusters")}>{p.clusters}</Live>}
      <Live id="pools" label="Pools and autoscalers" src={src("pools")}>{p.pools}</Live>
      <Live id="quotas" label="Quota" src={src("quotas")}>{p.quotas}</Live>
      {caller.admin && <Live id="latency" label="Create latency per stage" src="/console?fragment=latency">{p.latency}</Live>}
    </>
  ))();
});

consoleApp.get("/console/sandboxes", (c) => {
  const caller = c.get("caller");
  const stateQ = StateFilter.safeParse(c.req.query("state") || undefined);
  if (!stateQ.success) throw new ApiError("bad_request", "state must be running, paused or all");
  const templateRaw = c.req.query("template") || undefined;
  if (templateRaw !== undefined && !TemplateId.safeParse(templateRaw).success) throw new ApiError("bad_request", "template is not a template id");
  const afterRaw = c.req.query("after") || undefined;
  if (afterRaw !== undefined && afterRaw.length > 200) throw new ApiError("bad_request", "after is not a page token");
  const filter = { state: stateQ.data, template: templateRaw, after: afterRaw === undefined ? undefined : decodeCursor(afterRaw) };
  const base = { state: filter.state, ...(filter.template ? { template: filter.template } : {}) };
  const query = new URLSearchParams({ ...base, ...(afterRaw ? { after: afterRaw } : {}) });
  const href = (after?: string) => `/console/sandboxes?${new URLSearchParams({ ...base, ...(after ? { after } : {}) })}`;
  const killed = c.req.query("killed");
  const csrf = c.get("session").csrf;
  return render(c, "Sandboxes", {
    list: async () => {
      const page = await sandboxList(c.env, caller, filter);
      return <SandboxTable rows={page.rows} running={page.running} nextHref={page.next && href(encodeCursor(page.next))} firstHref={afterRaw && href()} csrf={csrf} />;
    },
  }, (p) => (
    <>
      {killed && SANDBOX_ID_PATTERN.test(killed) && <p class="notice" role="status">Killed {killed}.</p>}
      <form class="filters" method="get" action="/console/sandboxes">
        <label>State
          <select name="state">
            {(["running", "paused", "all"] as const).map((s) => <option value={s} selected={s === filter.state}>{s}</option>)}
          </select>
        </label>
        <label>Template <input name="template" value={filter.template ?? ""} /></label>
        <button type="submit">Filter</button>
      </form>
      <Live id="list" label="List" src={`/console/sandboxes?${query}&fragment=list`}>{p.list}</Live>
    </>
  ))();
});

function sandboxId(c: Context<ConsoleEnv>): string {
  const id = c.req.param("id") ?? "";
  if (!SANDBOX_ID_PATTERN.test(id)) throw new ApiError("sandbox_not_found", `Sandbox ${id} not found`);
  return id;
}

consoleApp.get("/console/sandboxes/:id", async (c) => {
  const id = sandboxId(c);
  const detail = await sandboxDetail(c.env, c.get("caller"), id);
  if (!detail) throw new ApiError("sandbox_not_found", `Sandbox ${id} not found`);
  // Read once per request: the page and its live fragment each need it once (it asks the
  // sandbox's group and, for its logs, the agent).
  return render(c, `Sandbox ${id}`, { timeline: async () => <Timeline detail={detail} /> }, (p) => (
    <Live id="timeline" label="Lifecycle" src={`/console/sandboxes/${id}?fragment=timeline`}>{p.timeline}</Live>
  ))();
});

consoleApp.post("/console/sandboxes/:id/kill", async (c) => {
  const id = sandboxId(c);
  await checkedForm(c);
  if (!(await killSandbox(c.env, c.get("caller"), id))) throw new ApiError("sandbox_not_found", `Sandbox ${id} not found`);
  return c.redirect(`/console/sandboxes?killed=${id}`, 303);
});

consoleApp.get("/console/ops", async (c) => {
  if (!c.get("caller").admin) throw new ApiError("forbidden", "Update ops runs need the admin key");
  const teamQ = c.req.query("team") || undefined;
  const nameQ = c.req.query("name") || undefined;
  if (teamQ === undefined || nameQ === undefined) {
    const after = parsePageKeys((n) => (n === "pools" ? c.req.query(n) : undefined)).pools;
    return render(c, "Update ops and autoscalers", {
      runs: async () => <OpsRuns rows={await opsRuns(c.env, c.get("caller"))} />,
      autoscalers: async () => {
        const p = await pools(c.env, c.get("caller"), after);
        const pager = <Pager noun="pools" next={p.next && pageHref("/console/ops", { pools: p.next })} first={after && "/console/ops"} />;
        return <AutoscalerDecisions pools={p.rows} pager={pager} />;
      },
    }, (p) => (
      <>
        <Live id="runs" label="Update ops runs" src="/console/ops?fragment=runs">{p.runs}</Live>
        <Live id="autoscalers" label="Autoscaler decisions" src={pageHref("/console/ops", { pools: after }, { fragment: "autoscalers" })}>{p.autoscalers}</Live>
        <h2>Find a run</h2>
        <OpsLookup />
      </>
    ))();
  }
  if (!TeamName.safeParse(teamQ).success || !UpdateOpsName.safeParse(nameQ).success) throw new ApiError("bad_request", "team or run name is malformed");
  const team = await findTeamByName(getDb(c.env), teamQ);
  if (!team) throw new ApiError("not_found", `Team "${teamQ}" not found`);
  const query = new URLSearchParams({ team: teamQ, name: nameQ });
  return render(c, `Update ops ${nameQ}`, {
    run: async () => {
      const res = await updateOpsStatus(c.env, team, nameQ);
      return res.ok ? <OpsRun ops={res.ops} /> : <p class="error">{res.error.message}</p>;
    },
  }, (p) => (
    <>
      <OpsLookup team={teamQ} name={nameQ} />
      <Live id="run" label="Run" src={`/console/ops?${query}&fragment=run`}>{p.run}</Live>
    </>
  ))();
});
