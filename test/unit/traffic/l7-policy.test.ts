// The L7 machines: host patterns (exact over the longest wildcard, rule sets not merged), request
// decisions, MCP tool decisions (closed once a server is named), E2B's network.rules, secret
// placeholders, JSON-RPC screening and answer filtering (JSON, batches, SSE split anywhere).
import { describe, expect, it } from "vitest";
import { MAX_TOOL_NAME, SseFilter, TOOL_DENIED_CODE, filterAnswer, rpcText, screenRequest } from "../../../controllers/traffic/l7/mcp.ts";
import { decideRequest, decideTool, e2bRules, glob, hostScore, inspects, namedForInspection, referencedSecrets, resolveSecrets, type L7Policy } from "../../../controllers/traffic/l7/policy.ts";
import { RateLimiter } from "../../../controllers/traffic/l7/rate.ts";

describe("policy", () => {
  it("matches hosts exactly or by wildcard subdomain, never the apex; exact wins, then the longest suffix", () => {
    expect(hostScore("api.x.com", "API.x.com.")).toBeGreaterThan(hostScore("*.x.com", "api.x.com"));
    expect(hostScore("*.x.com", "a.b.x.com")).toBeGreaterThan(0);
    expect(hostScore("*.x.com", "x.com")).toBe(-1);
    expect(hostScore("*.x.com", "evilx.com")).toBe(-1);
    const p: L7Policy = {
      http: [
        { name: "wide", host: "*.x.com", action: "block" },
        { name: "narrow", host: "*.api.x.com", action: "allow", setHeaders: { a: "1" } },
      ],
      mcp: [],
    };
    expect(decideRequest(p, "v1.api.x.com", "GET", "/")).toMatchObject({ action: "allow", rule: "narrow" });
    expect(decideRequest(p, "www.x.com", "GET", "/")).toMatchObject({ action: "block", rule: "wide" });
    expect(decideRequest(p, "y.com", "GET", "/")).toEqual({ action: "allow", setHeaders: {} });
  });

  it("decides by method and path glob, first match; inspects only named hosts, not bypassed ones", () => {
    const p: L7Policy = {
      http: [
        { name: "ro", host: "h", methods: ["POST", "PUT"], paths: ["/v1/*"], action: "block" },
        { name: "ok", host: "h", action: "allow" },
        { name: "bp", host: "b", action: "bypass" },
      ],
      mcp: [{ name: "m", server: "*.mcp.io", tool: "*", action: "allow" }],
    };
    expect(decideRequest(p, "h", "post", "/v1/x?y=1").rule).toBe("ro");
    expect(decideRequest(p, "h", "GET", "/v1/x").rule).toBe("ok");
    expect(decideRequest(p, "h", "POST", "/v2/x").rule).toBe("ok");
    expect([inspects(p, "h"), inspects(p, "b"), inspects(p, "a.mcp.io"), inspects(p, "other")]).toEqual([true, false, true, false]);
    // A rate limit over every request inspects every host, except the bypassed ones.
    const all: L7Policy = { ...p, requestsPerMinute: 10, rateLimitAll: true };
    expect([inspects(all, "h"), inspects(all, "b"), inspects(all, "other")]).toEqual([true, false, true]);
    const profile: L7Policy = { ...all, profiles: [{ name: "bp", priority: 0, rules: [{ name: "skip", match: [{ domains: ["p.test"] }], actions: { bypass: true } }] }] };
    expect([inspects(profile, "p.test"), inspects(profile, "other")]).toEqual([false, true]);
    // A rule names h and a.mcp.io for inspection; rateLimitAll alone names no host (another
    // protocol to `other` is counted, not refused as one to an inspected host is).
    expect([namedForInspection(all, "h"), namedForInspection(all, "a.mcp.io"), namedForInspection(all, "b"), namedForInspection(all, "other")]).toEqual([true, true, false, false]);
  });

  it("decides MCP tools by server and tool glob; a named server's unnamed tool is denied; others ungoverned", () => {
    const p: L7Policy = { http: [], mcp: [{ name: "d", server: "s", tool: "rm_*", action: "deny" }, { name: "a", server: "s", tool: "*", action: "allow" }, { name: "one", server: "t", tool: "read", action: "allow" }] };
    expect(decideTool(p, "s", "rm_rf")).toEqual({ allowed: false, rule: "d" });
    expect(decideTool(p, "s", "ls")).toEqual({ allowed: true, rule: "a" });
    expect(decideTool(p, "t", "write")).toEqual({ allowed: false, rule: 'no MCP rule for t allows "write"' });
    expect(decideTool(p, "u", "anything")).toBeUndefined();
  });

  it("turns E2B's network.rules into header rules and resolves only the secrets they name", () => {
    const rules = e2bRules({ "API.github.com": [{ transform: { headers: { Authorization: "Bearer ${e2b.secrets.GH}" } } }, { transform: { headers: { "X-A": "b" } } }] });
    expect(rules).toEqual([{ name: 'network.rules["API.github.com"]', host: "api.github.com", action: "allow", setHeaders: { Authorization: "Bearer ${e2b.secrets.GH}", "X-A": "b" } }]);
    const p: L7Policy = { http: rules, mcp: [] };
    expect(referencedSecrets(p)).toEqual(["gh"]);
    expect(resolveSecrets(rules[0]!.setHeaders!, new Map([["gh", "tok"]]))).toEqual({ Authorization: "Bearer tok", "X-A": "b" });
    expect(resolveSecrets({ a: "${e2b.secrets.missing}" }, new Map())).toEqual({ a: "${e2b.secrets.missing}" });
  });

  it("limits requests per minute per sandbox and refills over time", () => {
    const r = new RateLimiter();
    expect([r.take("a", 2, 0), r.take("a", 2, 0), r.take("a", 2, 0), r.take("b", 2, 0)]).toEqual([true, true, false, true]);
    expect(r.take("a", 2, 30_000)).toBe(true);
    expect(r.take("a", undefined, 30_000)).toBe(true);
  });
});

describe("MCP JSON-RPC", () => {
  const p: L7Policy = { http: [], mcp: [{ name: "no-rm", server: "m", tool: "rm", action: "deny" }, { name: "rest", server: "m", tool: "*", action: "allow" }] };
  const onM = (tool: string) => decideTool(p, "m", tool);
  const onOther = (tool: string) => decideTool(p, "other", tool);

  it("answers a denied call itself and refuses a batch carrying one whole; a body that is not JSON-RPC is invalid", () => {
    const one = screenRequest(onM, JSON.stringify({ jsonrpc: "2.0", id: 7, method: "tools/call", params: { name: "rm" } }));
    expect(JSON.parse(one.answer!)).toEqual({ jsonrpc: "2.0", id: 7, error: { code: TOOL_DENIED_CODE, message: 'tool "rm" is denied by MCP rule "no-rm"', data: { tool: "rm", rule: "no-rm" } } });
    const batch = screenRequest(onM, JSON.stringify([{ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "ls" } }, { jsonrpc: "2.0", id: 2, method: "tools/call", params: { name: "rm" } }]));
    const answers = JSON.parse(batch.answer!) as { id: number; error: { message: string } }[];
    expect(answers.map((a) => a.id)).toEqual([1, 2]);
    expect(answers[0]!.error.message).toContain("not sent");
    expect(batch.calls).toEqual([{ tool: "ls", allowed: true, rule: "rest" }, { tool: "rm", allowed: false, rule: "no-rm" }]);
    expect(screenRequest(onM, JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "ls" } })).answer).toBeUndefined();
    expect(screenRequest(onM, "not json").invalid).toContain("must be JSON-RPC");
    expect(rpcText(Buffer.from('\uFEFF{"id":1}'))).toBe('{"id":1}');
    expect(rpcText(Buffer.from([0x7b, 0xff, 0x7d]))).toBeUndefined();
  });

  it("filters tools out of list answers, in JSON and in SSE events split across chunks", () => {
    const list = { jsonrpc: "2.0", id: 1, result: { tools: [{ name: "ls" }, { name: "rm" }] } };
    expect(JSON.parse(filterAnswer(onM, JSON.stringify(list))).result.tools).toEqual([{ name: "ls" }]);
    expect(filterAnswer(onOther, JSON.stringify(list))).toBe(JSON.stringify(list));
    const f = new SseFilter(onM);
    const stream = `event: message\ndata: ${JSON.stringify(list)}\n\n: ping\n\n`;
    let out = "";
    for (let i = 0; i < stream.length; i += 7) out += f.push(stream.slice(i, i + 7));
    out += f.end();
    expect(out).toContain('"tools":[{"name":"ls"}]');
    expect(out).not.toContain('"rm"');
    expect(out).toContain("event: message\n");
    expect(out).toContain(": ping\n\n");
  });
});

describe("glob and long tool names", () => {
  it("matches * as any run, in time linear in the name for each star; a tool name over the bound is denied unmatched", () => {
    expect([glob("read_*", "read_file"), glob("*_file", "read_file"), glob("r*d*e", "read_file"), glob("*", ""), glob("a*b", "ab")]).toEqual([true, true, true, true, true]);
    expect([glob("read_*", "write_file"), glob("a*b", "a"), glob("", "x"), glob("a.c", "abc")]).toEqual([false, false, false, false]);
    // A pattern that makes a backtracking regex take exponential time ends at once here.
    expect(glob("*a*a*a*a*a*a*a*a*a*a*a*a*b", "a".repeat(4000))).toBe(false);
    const policy = { http: [], mcp: [{ name: "any", server: "mcp.test", tool: "*", action: "allow" as const }] };
    const body = JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "x".repeat(MAX_TOOL_NAME + 1) } });
    const s = screenRequest((t) => decideTool(policy, "mcp.test", t), body);
    expect(s.calls).toEqual([{ tool: "x".repeat(MAX_TOOL_NAME), allowed: false, rule: `a tool name longer than ${MAX_TOOL_NAME} characters` }]);
  });
});
