// A small MCP client of the official TypeScript SDK, bundled by mcp-client-bundle.ts into one file
// that a sandbox's own node runs: `node mcp-client.mjs <url> list | call <tool> <path>`. Prints one
// JSON line: `{tools}` for list, `{result}` or `{error: {code, message}}` for call.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, op, tool, path] = process.argv.slice(2) as [string, string, string?, string?];
const client = new Client({ name: "sandbox-agent", version: "1.0.0" });
await client.connect(new StreamableHTTPClientTransport(new URL(url)));
try {
  if (op === "list") console.log(JSON.stringify({ tools: (await client.listTools()).tools.map((t) => t.name).sort() }));
  else {
    try {
      console.log(JSON.stringify({ result: await client.callTool({ name: tool!, arguments: { path } }) }));
    } catch (err) {
      const e = err as { code?: number; message: string };
      console.log(JSON.stringify({ error: { code: e.code, message: e.message } }));
    }
  }
} finally {
  await client.close();
}
