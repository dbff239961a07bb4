// MCP tool ACLs in the L7 handler against a real MCP server of the official TypeScript SDK
// (streamable HTTP, stateless, answers as SSE) and its real client, on loopback stand-ins: the
// client's tools/list lacks the denied tools, a denied tools/call is refused with a JSON-RPC error
// naming the rule (the server never runs it), an allowed one runs; each call is audited; a body
// the proxy cannot screen (encoded, not JSON) is refused before a (decoding) server sees it.
import http from "node:http";
import type { AddressInfo } from "node:net";
import { gunzipSync, gzipSync } from "node:zlib";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { afterAll, beforeAll, expect, it } from "vitest";
import { SandboxCa } from "../../../controllers/traffic/l7/ca.ts";
import { L7Handler, type AuditRecord } from "../../../controllers/traffic/l7/handler.ts";
import type { L7Policy } from "../../../controllers/traffic/l7/policy.ts";
import { startFront, type Front } from "../../support/l7-stand-ins.ts";

const TOOLS = ["read_file", "read_dir", "write_file", "delete_repo"];
const ran: string[] = [];
const reached: string[] = [];
let mcpServer: http.Server;
let front: Front;
const audit: AuditRecord[] = [];
const policy: L7Policy = {
  http: [],
  mcp: [
    { name: "no-deletes", server: "127.0.0.1", tool: "delete_*", action: "deny" },
    { name: "reads", server: "127.0.0.1", tool: "read_*", action: "allow" },
  ],
};

beforeAll(async () => {
  mcpServer = http.createServer((req, res) => {
    const server = new McpServer({ name: "stand-in", version: "1.0.0" });
    for (const t of TOOLS) {
      server.registerTool(t, { description: `the ${t} tool` }, async () => {
        ran.push(t);
        return { content: [{ type: "text", text: `${t} ran` }] };
      });
    }
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
    res.on("close", () => void transport.close().then(() => server.close()));
    // Like a server behind a decoding middleware: a gzip body is read as the JSON it carries.
    const parts: Buffer[] = [];
    req.on("data", (c: Buffer) => parts.push(c));
    req.on("end", () => {
      reached.push(`${req.method} ${req.headers["content-encoding"] ?? ""}`);
      const raw = Buffer.concat(parts);
      let parsed: unknown;
      try {
        parsed = req.method !== "POST" ? undefined : JSON.parse((req.headers["content-encoding"] === "gzip" ? gunzipSync(raw) : raw).toString("utf8"));
      } catch {
        return void res.writeHead(400).end("stand-in: not JSON");
      }
      void server.connect(transport).then(() => transport.handleRequest(req, res, parsed));
    });
  });
  await new Promise<void>((r) => mcpServer.listen(0, "127.0.0.1", r));
  const ca = await SandboxCa.create("sbx-mcp");
  const handler = new L7Handler({ policyFor: () => policy, secretsFor: () => new Map(), caFor: async () => ca, audit: (r) => audit.push(r) });
  front = await startFront(handler, "sbx-mcp", (mcpServer.address() as AddressInfo).port);
});

afterAll(() => {
  front?.close();
  mcpServer?.close();
});

it("filters tools/list, refuses a denied or unlisted tools/call with the rule's name, runs an allowed one", async () => {
  const client = new Client({ name: "sandbox-agent", version: "1.0.0" });
  await client.connect(new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${front.port}/mcp`)));
  try {
    const listed = await client.listTools();
    expect(listed.tools.map((t) => t.name).sort()).toEqual(["read_dir", "read_file"]);

    await expect(client.callTool({ name: "delete_repo", arguments: {} })).rejects.toThrow(/tool "delete_repo" is denied by MCP rule "no-deletes"/);
    await expect(client.callTool({ name: "write_file", arguments: {} })).rejects.toThrow(/tool "write_file" is denied by MCP rule "no MCP rule for 127\.0\.0\.1 allows "write_file""/);
    const ok = await client.callTool({ name: "read_file", arguments: {} });
    expect(ok.content).toEqual([{ type: "text", text: "read_file ran" }]);
    expect(ran).toEqual(["read_file"]);

    const calls = audit.filter((r) => r.tool);
    expect(calls.map((r) => [r.tool, r.rule])).toEqual([
      ["delete_repo", "no-deletes"],
      ["write_file", 'no MCP rule for 127.0.0.1 allows "write_file"'],
      ["read_file", "reads"],
    ]);
  } finally {
    await client.close();
  }
});

it("never adds a credential to a plain-HTTP request: 403 saying why, and the server is not asked", async () => {
  policy.http = [{ name: "key", host: "127.0.0.1", action: "allow", setHeaders: { authorization: "Bearer ${e2b.secrets.gh}" } }];
  try {
    const res = await fetch(`http://127.0.0.1:${front.port}/mcp`, { method: "POST", headers: { "content-type": "application/json" }, body: "{}" });
    expect(res.status).toBe(403);
    expect(await res.text()).toContain("credentials are only added to HTTPS requests");
  } finally {
    policy.http = [];
  }
});

const post = (body: string | Buffer, headers: Record<string, string> = {}) =>
  fetch(`http://127.0.0.1:${front.port}/mcp`, { method: "POST", headers: { "content-type": "application/json", accept: "application/json, text/event-stream", ...headers }, body });
const call = (name: string) => JSON.stringify({ jsonrpc: "2.0", id: 9, method: "tools/call", params: { name, arguments: {} } });

const reset = () => [ran, reached, audit].forEach((a) => (a.length = 0));

it("refuses a gzip-encoded tools/call to a governed server (415): a decoding server never sees it, the denied tool never runs", async () => {
  reset();
  const gz = await post(gzipSync(call("delete_repo")), { "content-encoding": "gzip" });
  expect(gz.status).toBe(415);
  expect(await gz.text()).toContain("without a Content-Encoding");
  expect((await post(gzipSync(call("read_file")), { "content-encoding": "br" })).status).toBe(415);
  expect(ran).toEqual([]);
  expect(reached).toEqual([]);
  expect(audit.map((r) => [r.status, r.rule, r.refused])).toEqual([
    [415, "mcp", true],
    [415, "mcp", true],
  ]);
});

it("refuses a body that is not JSON-RPC (400) before the server sees it; a leading BOM is dropped and the body screened", async () => {
  reset();
  const junk = await post("not json");
  expect(junk.status).toBe(400);
  expect(await junk.text()).toContain("must be JSON-RPC");
  expect(reached).toEqual([]);
  const bom = await post(Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(call("delete_repo"))]));
  expect(await bom.json()).toMatchObject({ id: 9, error: { message: 'tool "delete_repo" is denied by MCP rule "no-deletes"' } });
  expect(ran).toEqual([]);
  expect(reached).toEqual([]);
  expect(audit.map((r) => [r.status, r.rule, r.refused])).toEqual([
    [400, "mcp", true],
    [200, "no-deletes", true],
  ]);
});
