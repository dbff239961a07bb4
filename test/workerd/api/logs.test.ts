// E2B's sandbox logs routes through the edge: auth, validation of the query, another team's
// sandbox as 404, and the entries the agent answers over its link rendered in E2B's v1 and v2
// shapes (the scripted agent answers from the agent's own SandboxLogs store).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ScriptedAgent } from "../../support/scripted-agent.ts";
import { call, createTeam, expectError, expectStatus, startAgent, unique, type TestTeam } from "../helpers.ts";

let team: TestTeam;
let other: TestTeam;
let agent: ScriptedAgent;
let own: string;
const T0 = Date.parse("2026-01-01T00:00:00Z");

beforeAll(async () => {
  team = await createTeam(unique("logs"), { replicas: 1 });
  other = await createTeam(unique("logs-other"), { cluster: team.cluster });
  agent = await startAgent(team.cluster);
  await agent.waitUntil(() => agent.running().length >= 1);
  own = (await expectStatus(call("/v2/sandboxes", { key: team.key, body: { templateID: team.template } }), 201)).sandboxID;
  agent.logs.append(own, "info", "process started", { pid: 7, cmd: "echo hi" }, T0);
  agent.logs.append(own, "warn", "disk nearly full", {}, T0 + 1000);
  agent.logs.append(own, "error", "process exited", { pid: 7, exitCode: 1 }, T0 + 2000);
});
afterAll(() => agent.disconnect());

describe("GET /v2/sandboxes/{id}/logs", () => {
  it("answers the agent's entries, oldest first, with E2B's entry shape", async () => {
    const body = await expectStatus(call(`/v2/sandboxes/${own}/logs`, { key: team.key }), 200);
    expect(body.logs).toEqual([
      { timestamp: new Date(T0).toISOString(), level: "info", message: "process started", fields: { pid: "7", cmd: "echo hi" } },
      { timestamp: new Date(T0 + 1000).toISOString(), level: "warn", message: "disk nearly full", fields: {} },
      { timestamp: new Date(T0 + 2000).toISOString(), level: "error", message: "process exited", fields: { pid: "7", exitCode: "1" } },
    ]);
  });

  it("pages with cursor, limit and direction, filters by level and search", async () => {
    const page = async (q: string) => (await expectStatus(call(`/v2/sandboxes/${own}/logs?${q}`, { key: team.key }), 200)).logs.map((e: { message: string }) => e.message);
    expect(await page(`cursor=${T0 + 1000}&limit=1`)).toEqual(["disk nearly full"]);
    expect(await page(`direction=backward&limit=2`)).toEqual(["process exited", "disk nearly full"]);
    expect(await page(`direction=backward&cursor=${T0 + 1000}`)).toEqual(["disk nearly full", "process started"]);
    expect(await page("level=warn")).toEqual(["disk nearly full", "process exited"]);
    expect(await page("search=process")).toEqual(["process started", "process exited"]);
    expect(await page("limit=0")).toEqual([]);
  });

  it("refuses a malformed query with 400 naming the parameter", async () => {
    await expectError(call(`/v2/sandboxes/${own}/logs?limit=1001`, { key: team.key }), 400, /limit/);
    await expectError(call(`/v2/sandboxes/${own}/logs?limit=-1`, { key: team.key }), 400, /limit/);
    await expectError(call(`/v2/sandboxes/${own}/logs?cursor=yesterday`, { key: team.key }), 400, /cursor/);
    await expectError(call(`/v2/sandboxes/${own}/logs?direction=sideways`, { key: team.key }), 400, /direction/);
    await expectError(call(`/v2/sandboxes/${own}/logs?level=loud`, { key: team.key }), 400, /level/);
    await expectError(call(`/v2/sandboxes/${own}/logs?search=${"x".repeat(257)}`, { key: team.key }), 400, /search/);
  });

  it("is 404 for another team's or an unknown sandbox and 401 without a key; the agent is not asked", async () => {
    const asked = agent.logsRequests.length;
    await expectError(call(`/v2/sandboxes/${own}/logs`, { key: other.key }), 404, /doesn't exist or you don't have access/);
    await expectError(call("/v2/sandboxes/nosuchsandbox0000000/logs", { key: team.key }), 404);
    await expectError(call(`/v2/sandboxes/${own}/logs`, { key: null }), 401);
    expect(agent.logsRequests.length).toBe(asked);
  });
});

describe("GET /sandboxes/{id}/logs (v1)", () => {
  it("answers lines and structured entries from start on; a limit past the bound is cut to it", async () => {
    const body = await expectStatus(call(`/sandboxes/${own}/logs?start=${T0 + 1000}&limit=5000`, { key: team.key }), 200);
    expect(body.logEntries.map((e: { message: string }) => e.message)).toEqual(["disk nearly full", "process exited"]);
    expect(body.logs[1]).toEqual({ timestamp: new Date(T0 + 2000).toISOString(), line: JSON.stringify({ level: "error", msg: "process exited", pid: "7", exitCode: "1" }) });
    expect(agent.logsRequests.at(-1)?.query.limit).toBe(1000);
    await expectError(call(`/sandboxes/${own}/logs?start=-5`, { key: team.key }), 400, /start/);
    await expectError(call(`/sandboxes/${own}/logs`, { key: other.key }), 404);
  });
});

describe("an agent that is not connected", () => {
  it("is a 503 the caller can retry", async () => {
    await agent.disconnect();
    await expectError(call(`/v2/sandboxes/${own}/logs`, { key: team.key }), 503, /not connected; retry/);
  });
});

describe("request ids", () => {
  it("every control-plane answer, an error too, carries X-Request-Id: the caller's trace id, or a fresh one", async () => {
    const traced = await call("/v2/sandboxes", { key: team.key, headers: { traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" } });
    expect(traced.headers.get("x-request-id")).toBe("4bf92f3577b34da6a3ce929d0e0e4736");
    const refused = await call("/v2/sandboxes", { key: null });
    expect(refused.status).toBe(401);
    const a = refused.headers.get("x-request-id");
    const b = (await call("/v2/sandboxes", { key: null })).headers.get("x-request-id");
    expect(a).toMatch(/^[0-9a-f]{32}$/);
    expect(b).toMatch(/^[0-9a-f]{32}$/);
    expect(a).not.toBe(b);
  });
});
