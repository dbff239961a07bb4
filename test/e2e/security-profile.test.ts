// SecurityProfiles end to end on the local driver: a profile set through the edge's admin API
// selects a sandbox the real e2b SDK made (by its `label:<k>` metadata); the sandbox goes behind
// the proxy with its own CA, and its HTTPS requests to a stand-in in a test namespace are judged
// by the profile: blocked by path (however a server may read it) and by method, MCP tool ACLs against the official TypeScript
// SDK's server (the SDK's own client, run by the sandbox's node: tools/list filtered, a denied
// tools/call refused with the JSON-RPC error naming the rule and never run), then a rate limit's
// 429. Each inspected request is in the sandbox's network audit (team API), without queries or
// bodies, and counted in the agent's metrics. A sandbox the profile does not select is untouched.
import { execFileSync, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";
import { Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { serveIn, startOutside, type Outside } from "../support/outside-net.ts";
import { scrape, value } from "../support/prometheus-text.ts";
import { e2b, sleep, uniqueTag } from "./sdk.ts";

const HOST = "mcp.example.test";
const tag = uniqueTag();
const marker = `mk${uniqueTag()}`;
let out: Outside;
let server: ChildProcess;
let dir: string;
let ranFile: string;
let client: string;
const created: Sandbox[] = [];
const profile = `/admin/teams/admin/security-profiles/mcp-${tag}`;

function api(path: string, method = "GET", body?: unknown): Promise<Response> {
  const { apiUrl, apiKey } = inject("e2b");
  return fetch(new URL(path, apiUrl), { method, headers: { "x-api-key": apiKey, "content-type": "application/json" }, body: body === undefined ? undefined : JSON.stringify(body) });
}

const spec = (extra: Record<string, unknown> = {}) => ({
  selector: { matchLabels: { sp: tag } },
  rules: [
    { name: "no-admin", match: [{ domains: [HOST], paths: [{ type: "Prefix", value: "/admin" }] }], actions: { block: { statusCode: 403 } } },
    { name: "no-delete", match: [{ domains: [HOST], methods: ["DELETE"] }], actions: { block: {} } },
    { name: "no-private", match: [{ domains: [HOST], paths: [{ type: "Exact", value: "/private" }, { type: "Prefix", value: "/keys/secret" }] }], actions: { block: { statusCode: 403 } } },
    { name: "mcp-tools", match: [{ domains: [HOST], paths: [{ type: "Exact", value: "/mcp" }] }], actions: { mcpToolPolicy: { rules: [{ toolNames: ["read_*"], action: "allow" }], defaultAction: "deny" } } },
  ],
  ...extra,
});

beforeAll(async () => {
  out = await startOutside();
  dir = mkdtempSync(join(tmpdir(), "e2e-mcp-"));
  const ca = inject("outsideCa");
  const [crt, key] = [join(dir, "mcp.crt"), join(dir, "mcp.key")];
  execFileSync("openssl", ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", key, "-out", crt, "-days", "1", "-subj", `/CN=${HOST}`, "-addext", `subjectAltName=DNS:${HOST}`, "-addext", "basicConstraints=CA:FALSE", "-CA", ca.cert, "-CAkey", ca.key], { stdio: "ignore" });
  ranFile = join(dir, "ran");
  writeFileSync(ranFile, "");
  server = await serveIn(out, 443, [process.execPath, fileURLToPath(new URL("../support/mcp-stand-in.ts", import.meta.url)), crt, key, ranFile]);
  // The SDK's client as one file for the sandbox's own node (18 in base).
  const bundled = await build({ entryPoints: [fileURLToPath(new URL("../support/mcp-client.ts", import.meta.url))], bundle: true, platform: "node", target: "node18", format: "esm", write: false, logLevel: "silent" });
  client = bundled.outputFiles[0]!.text;
});

afterAll(async () => {
  await api(profile, "DELETE").catch(() => undefined);
  await Promise.all(created.map((s) => s.kill().catch(() => false)));
  server?.kill("SIGKILL");
  out?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const run = async (sbx: Sandbox, cmd: string, user?: "root") => ((await sbx.commands.run(cmd, { timeoutMs: 120_000, ...(user ? { user } : {}) }).catch((err: { stdout?: string }) => err)).stdout ?? "").trim();
const curl = (sbx: Sandbox, args: string) => run(sbx, `curl -sS -m 10 ${args} 2>&1 || echo "exit $?"`);
const mcp = async (sbx: Sandbox, args: string) => JSON.parse(await run(sbx, `node /tmp/mcp-client.mjs https://${HOST}/mcp ${args} 2>&1`)) as { tools?: string[]; result?: { content: { text: string }[] }; error?: { code: number; message: string } };

describe("SecurityProfiles through the admin API", () => {
  it("block by path and method, MCP tool ACLs and a rate limit for the sandboxes they select; audited", async () => {
    const sbx = await Sandbox.create({ ...e2b(), metadata: { "label:sp": tag } });
    created.push(sbx);
    const bystander = await Sandbox.create(e2b());
    created.push(bystander);
    for (const s of [sbx, bystander]) await run(s, `echo "${out.ip} ${HOST}" >> /etc/hosts`, "root");
    await sbx.files.write("/tmp/mcp-client.mjs", client);
    const refusedBefore = value(await scrape(inject("e2b").metricsUrl), "sandbox_egress_l7_requests_total", { verdict: "refused" }) ?? 0;

    const put = await api(profile, "PUT", spec());
    expect(put.status).toBe(200);
    expect(((await put.json()) as { status: { selectedSandboxes: string[] } }).status.selectedSandboxes).toEqual([sbx.sandboxId]);

    // The agent moves the sandbox behind the proxy and installs its CA when the profile arrives.
    let seen = "";
    for (let i = 0; i < 50 && !seen.includes("blocked"); i++, await sleep(200)) seen = await curl(sbx, `https://${HOST}/admin/x`);
    expect(seen).toBe(`traffic-proxy: GET /admin/x to ${HOST} is blocked by rule "no-admin"`);
    expect(await curl(sbx, `-X DELETE https://${HOST}/things`)).toBe(`traffic-proxy: DELETE /things to ${HOST} is blocked by rule "no-delete"`);
    expect(await curl(sbx, `"https://${HOST}/ok?q=${marker}"`)).toBe(`stand-in saw GET /ok?q=${marker}`);
    // Every way a server may read the path is judged (;parameters dropped, // merged, a trailing
    // / dropped, decoded twice), and the stand-in is sent the least-rewritten safe form (curl's
    // --path-as-is keeps dot segments); a path with a reading that cannot be made safely is refused.
    for (const path of ["//admin/x", "/x/../admin/x", "/%61dmin/x", "/%2561dmin/x"]) expect(await curl(sbx, `--path-as-is https://${HOST}${path}`)).toBe(`traffic-proxy: GET /admin/x to ${HOST} is blocked by rule "no-admin"`);
    for (const path of ["/private/", "/private;x"]) expect(await curl(sbx, `--path-as-is "https://${HOST}${path}"`)).toBe(`traffic-proxy: GET /private to ${HOST} is blocked by rule "no-private"`);
    expect(await curl(sbx, `"https://${HOST}/keys;x/secret"`)).toBe(`traffic-proxy: GET /keys/secret to ${HOST} is blocked by rule "no-private"`);
    expect(await curl(sbx, `--path-as-is "https://${HOST}/x/./y/..//ok%7e?q=/../admin"`)).toBe("stand-in saw GET /x//ok~?q=/../admin");
    // A leading // goes as one /: a URI parser (urlsplit, java.net.URI) reads //x/keys/secret as
    // host x, path /keys/secret, which the Prefix /keys/secret block would not have judged.
    expect(await curl(sbx, `--path-as-is "https://${HOST}//x/keys/secret"`)).toBe("stand-in saw GET /x/keys/secret");
    // An S3-style key with empty segments and a signed query reaches the server unchanged.
    expect(await curl(sbx, `--path-as-is "https://${HOST}/bucket//photos//a;v=1.jpg?X-Amz-Signature=ab%2Fcd"`)).toBe("stand-in saw GET /bucket//photos//a;v=1.jpg?X-Amz-Signature=ab%2Fcd");
    expect(await curl(sbx, `https://${HOST}/x%2F..%2Fadmin`)).toContain("encoded slash (%2F): refused");
    expect(await curl(sbx, `--path-as-is https://${HOST}/x/%252e%252e/admin`)).toContain("the path decoded twice has a dot segment (an escape of an escape of .): refused");
    // Through the proxy port instead of the redirect: refused, not passed uninspected.
    expect(await curl(sbx, `-x http://127.0.0.1:3128 https://${HOST}/admin/x`)).toContain("response 403");

    expect((await mcp(sbx, "list")).tools).toEqual(["read_dir", "read_file"]);
    const denied = await mcp(sbx, `call delete_repo ${marker}`);
    expect(denied.error?.code).toBe(-32001);
    expect(denied.error?.message).toContain('tool "delete_repo" is denied by MCP rule "mcp-tools (defaultAction)"');
    expect((await mcp(sbx, `call read_file ${marker}`)).result?.content[0]?.text).toBe(`read_file ran on ${marker}`);
    expect(readFileSync(ranFile, "utf8")).toBe("read_file\n");

    // Not selected: not inspected (the server's own certificate, nothing blocked).
    expect(await curl(bystander, `-k https://${HOST}/admin/x`)).toBe("stand-in saw GET /admin/x");

    // A rate limit: two requests a minute, then 429s.
    expect((await api(profile, "PUT", spec({ rateLimit: { requestsPerMinute: 2 } }))).status).toBe(200);
    let codes = "";
    for (let i = 0; i < 20 && !codes.includes("429"); i++, await sleep(200)) codes = await run(sbx, `for i in 1 2 3 4 5 6; do curl -s -o /dev/null -w '%{http_code} ' -m 10 https://${HOST}/ok; done`);
    expect(codes).toContain("429");

    const audit = (await (await api(`/sandboxes/${sbx.sandboxId}/network/audit?limit=1000`)).json()) as { records: { host: string; method: string; path: string; rule: string; status: number; tool?: string; refused: boolean }[] };
    const pick = (r: (typeof audit.records)[number]) => ({ method: r.method, path: r.path, rule: r.rule, status: r.status, refused: r.refused, ...(r.tool ? { tool: r.tool } : {}) });
    const records = audit.records.filter((r) => r.host === HOST).map(pick);
    expect(records).toContainEqual({ method: "GET", path: "/admin/x", rule: "no-admin", status: 403, refused: true });
    expect(records).toContainEqual({ method: "DELETE", path: "/things", rule: "no-delete", status: 403, refused: true });
    expect(records).toContainEqual({ method: "GET", path: "/x%2F..%2Fadmin", rule: "path", status: 400, refused: true });
    expect(records).toContainEqual({ method: "GET", path: "/x/%252e%252e/admin", rule: "path", status: 400, refused: true });
    expect(records).toContainEqual({ method: "GET", path: "/keys;x/secret", rule: "no-private", status: 403, refused: true });
    expect(records).toContainEqual({ method: "GET", path: "/ok", rule: expect.any(String), status: 200, refused: false });
    expect(records).toContainEqual({ method: "POST", path: "/mcp", rule: "mcp-tools (defaultAction)", status: 200, refused: true, tool: "delete_repo" });
    expect(records).toContainEqual({ method: "POST", path: "/mcp", rule: "mcp-tools", status: 200, refused: false, tool: "read_file" });
    expect(records).toContainEqual({ method: "GET", path: "/ok", rule: "requestsPerMinute", status: 429, refused: true });
    // Never a query or a body (the marker was in both).
    expect(JSON.stringify(audit)).not.toContain(marker);
    expect(value(await scrape(inject("e2b").metricsUrl), "sandbox_egress_l7_requests_total", { verdict: "refused" })).toBeGreaterThan(refusedBefore);
  }, 600_000);
});
