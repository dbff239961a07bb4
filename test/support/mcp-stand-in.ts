// An MCP server of the official TypeScript SDK (streamable HTTP, stateless, answers as SSE) over
// HTTPS, run in a namespace standing in for the internet (outside-net.ts `serveIn`):
//   node mcp-stand-in.ts <cert> <key> <ran-file>
// `/mcp` serves the tools read_file, read_dir, write_file and delete_repo; each call that reaches
// the server is appended to <ran-file>, so a test sees which calls the proxy let through. Any
// other path answers `stand-in saw <METHOD> <path>`.
import { appendFileSync, readFileSync } from "node:fs";
import https from "node:https";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { z } from "zod";

export const MCP_TOOLS = ["read_file", "read_dir", "write_file", "delete_repo"];

const [cert, key, ranFile] = process.argv.slice(2) as [string, string, string];
https
  .createServer({ cert: readFileSync(cert), key: readFileSync(key) }, (req, res) => {
    if (!req.url?.startsWith("/mcp")) {
      const body = `stand-in saw ${req.method} ${req.url}\n`;
      return void res.writeHead(200, { "content-type": "text/plain", "content-length": Buffer.byteLength(body) }).end(body);
    }
    const server = new McpServer({ name: "stand-in", version: "1.0.0" });
    for (const t of MCP_TOOLS) {
      server.registerTool(t, { description: `the ${t} tool`, inputSchema: { path: z.string().optional() } }, async ({ path }) => {
        appendFileSync(ranFile, `${t}\n`);
        return { content: [{ type: "text", text: `${t} ran on ${path ?? "nothing"}` }] };
      });
    }
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
    res.on("close", () => void transport.close().then(() => server.close()));
    void server.connect(transport).then(() => transport.handleRequest(req, res));
  })
  .listen(443, "0.0.0.0");
