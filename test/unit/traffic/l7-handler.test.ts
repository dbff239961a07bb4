// The L7 handler behind the redirected path, on loopback stand-ins (test/support/l7-stand-ins.ts):
// HTTPS to a host the policy names is opened with the sandbox's own CA, gets its secret header
// added by the proxy, and is decided, rate limited and audited per request; TLS to other hosts
// passes through with the server's own certificate; a client that does not trust the sandbox's
// CA cannot be inspected; MCP tool ACLs against a real server of the official TypeScript SDK.
import https from "node:https";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SandboxCa } from "../../../controllers/traffic/l7/ca.ts";
import { L7Handler, type AuditRecord } from "../../../controllers/traffic/l7/handler.ts";
import type { L7Policy } from "../../../controllers/traffic/l7/policy.ts";
import { startFront, startHttpsEcho, type EchoServer, type Front } from "../../support/l7-stand-ins.ts";

const SECRET = "ghp_the-secret-value-0123456789";
let echo: EchoServer;
let front: Front;
let ca: SandboxCa;
const audit: AuditRecord[] = [];
let policy: L7Policy = { http: [], mcp: [] };

beforeAll(async () => {
  echo = await startHttpsEcho(["api.test", "other.test"]);
  ca = await SandboxCa.create("sbx-a");
  const handler = new L7Handler({
    policyFor: (s) => (s === "sbx-a" ? policy : undefined),
    secretsFor: () => new Map([["gh", SECRET]]),
    caFor: async () => ca,
    audit: (r) => audit.push(r),
    upstreamTls: { ca: echo.ca },
  });
  front = await startFront(handler, "sbx-a", echo.port);
});

afterAll(() => {
  front?.close();
  echo?.close();
});

interface Answer {
  status: number;
  body: string;
  issuer: string;
}

function request(host: string, trust: string, opts: { path?: string; method?: string; headers?: Record<string, string>; port?: number } = {}): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = https.request(
      { host: "127.0.0.1", port: opts.port ?? front.port, servername: host, ca: trust, agent: false, method: opts.method ?? "GET", path: opts.path ?? "/", headers: { host, ...opts.headers } },
      (res) => {
        let body = "";
        const issuer = String((res.socket as import("node:tls").TLSSocket).getPeerCertificate().issuer?.CN ?? "");
        res.on("data", (c: Buffer) => (body += c.toString()));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, body, issuer }));
      },
    );
    req.on("error", reject);
    req.end();
  });
}

describe("HTTPS inspection and credential injection", () => {
  it("adds the secret header to a request to a named host, replacing the sandbox's own; the audit has no secret", async () => {
    policy = { http: [{ name: "github-token", host: "api.test", action: "allow", setHeaders: { Authorization: "Bearer ${e2b.secrets.gh}" } }], mcp: [] };
    const a = await request("api.test", ca.certPem, { path: "/user?x=1", headers: { authorization: "Bearer sandbox-guess" } });
    expect(a.status).toBe(200);
    expect(a.issuer).toContain("sandbox sbx-a");
    const seen = JSON.parse(a.body) as { headers: Record<string, string>; url: string };
    expect(seen.headers.authorization).toBe(`Bearer ${SECRET}`);
    expect(seen.url).toBe("/user?x=1");
    const rec = audit.at(-1)!;
    expect(rec).toMatchObject({ sandbox: "sbx-a", host: "api.test", method: "GET", path: "/user", rule: "github-token", status: 200 });
    expect(rec.bytesIn).toBeGreaterThan(0);
    expect(JSON.stringify(audit)).not.toContain(SECRET);
    expect(JSON.stringify(audit)).not.toContain("x=1");
  });

  it("a client that does not trust this sandbox's CA cannot be read (and another sandbox's CA is another key)", async () => {
    await expect(request("api.test", echo.ca)).rejects.toThrow();
    const other = await SandboxCa.create("sbx-b");
    expect(other.certPem).not.toBe(ca.certPem);
    await expect(request("api.test", other.certPem)).rejects.toThrow();
  });

  it("passes TLS to a host no rule names through untouched: the server's own certificate, no header added", async () => {
    const a = await request("other.test", echo.ca, { headers: { authorization: "mine" } });
    expect(a.status).toBe(200);
    expect(a.issuer).toContain("internet-stand-in");
    expect((JSON.parse(a.body) as { headers: Record<string, string> }).headers.authorization).toBe("mine");
  });

  it("blocks by method and path with a 403 naming the rule, and bypass passes through", async () => {
    policy = {
      http: [
        { name: "no-deletes", host: "api.test", methods: ["DELETE"], action: "block" },
        { name: "no-admin", host: "api.test", paths: ["/admin/*"], action: "block" },
        { name: "rest", host: "api.test", action: "allow" },
        { name: "trusted", host: "other.test", action: "bypass" },
      ],
      mcp: [],
    };
    const del = await request("api.test", ca.certPem, { method: "DELETE", path: "/repos/x" });
    expect(del.status).toBe(403);
    expect(del.body).toContain('blocked by rule "no-deletes"');
    expect((await request("api.test", ca.certPem, { path: "/admin/users" })).body).toContain('"no-admin"');
    expect((await request("api.test", ca.certPem, { path: "/repos/x" })).status).toBe(200);
    expect(audit.at(-2)).toMatchObject({ rule: "no-admin", status: 403, path: "/admin/users" });
    expect((await request("other.test", echo.ca)).issuer).toContain("internet-stand-in");
  });

  it("limits a sandbox's requests per minute (429)", async () => {
    policy = { http: [{ name: "all", host: "api.test", action: "allow" }], mcp: [], requestsPerMinute: 2 };
    const statuses = [];
    for (let i = 0; i < 3; i++) statuses.push((await request("api.test", ca.certPem)).status);
    expect(statuses).toEqual([200, 200, 429]);
    expect(audit.at(-1)).toMatchObject({ rule: "requestsPerMinute", status: 429 });
  });

  it("with rateLimitAll the limit counts requests to hosts no rule names too (they are inspected)", async () => {
    // Its own sandbox and handler: the bucket of sbx-a is spent by the case above.
    const limited: L7Policy = { http: [], mcp: [], requestsPerMinute: 2, rateLimitAll: true };
    const handler = new L7Handler({ policyFor: () => limited, secretsFor: () => new Map(), caFor: async () => ca, audit: (r) => audit.push(r), upstreamTls: { ca: echo.ca } });
    const own = await startFront(handler, "sbx-b", echo.port);
    const answers = [];
    try {
      for (let i = 0; i < 3; i++) answers.push(await request("other.test", ca.certPem, { port: own.port }));
    } finally {
      own.close();
    }
    expect(answers.map((a) => a.status)).toEqual([200, 200, 429]);
    expect(answers[0]!.issuer).not.toContain("internet-stand-in");
    expect(audit.at(-1)).toMatchObject({ host: "other.test", rule: "requestsPerMinute", status: 429, refused: true });
  });
});

describe("SecurityProfile through the handler", () => {
  it("adds a token from a secret by tokenTransformation, removes headers, and a block rule answers its status", async () => {
    policy = {
      http: [],
      mcp: [],
      profiles: [
        {
          name: "sp",
          priority: 10,
          rules: [
            { name: "strip", match: [{ domains: ["api.test"] }], actions: { headerManipulation: { remove: ["x-leak"], set: [{ name: "x-from", value: "proxy" }] } } },
            { name: "gh", match: [{ domains: ["api.test"] }], actions: { tokenTransformation: { credentialRef: { secret: { name: "gh" } }, apiKey: { valueTemplate: "token {{ .apiKey }}" } } } },
            { name: "deny-put", match: [{ domains: ["api.test"], methods: ["PUT"] }], actions: { block: { statusCode: 405 } } },
          ],
        },
      ],
    };
    const a = await request("api.test", ca.certPem, { headers: { "x-leak": "1", authorization: "mine" } });
    const seen = (JSON.parse(a.body) as { headers: Record<string, string> }).headers;
    expect(seen.authorization).toBe(`token ${SECRET}`);
    expect(seen["x-from"]).toBe("proxy");
    expect(seen["x-leak"]).toBeUndefined();
    expect(audit.at(-1)).toMatchObject({ rule: "strip,gh", status: 200 });
    const put = await request("api.test", ca.certPem, { method: "PUT" });
    expect(put.status).toBe(405);
    expect(put.body).toContain('"deny-put"');
    expect(JSON.stringify(audit)).not.toContain(SECRET);
  });

  it("a tokenTransformation whose secret the agent does not hold (withheld from a cluster not bound to the team) refuses the request, audited; the server never gets it", async () => {
    policy = {
      http: [],
      mcp: [],
      profiles: [{ name: "sp", priority: 10, rules: [{ name: "key", match: [{ domains: ["api.test"] }], actions: { tokenTransformation: { targetHeader: "x-api-key", credentialRef: { secret: { name: "withheld" } } } } }] }],
    };
    const before = audit.length;
    const a = await request("api.test", ca.certPem, { path: "/v1/charge" });
    expect(a.status).toBe(403);
    expect(a.body).toContain('credential "withheld" is not available');
    // The echo server answers with the request it saw: a refusal is the proxy's own text.
    expect(a.body).not.toContain('"headers"');
    expect(audit.slice(before)).toEqual([expect.objectContaining({ host: "api.test", path: "/v1/charge", rule: "key", status: 403, refused: true })]);
  });
});

describe("upgrades through inspection", () => {
  it("sends a WebSocket-style upgrade with the rule's credential, then pipes both ways; a blocked one is refused", async () => {
    policy = {
      http: [
        { name: "no-ws-admin", host: "api.test", paths: ["/admin*"], action: "block" },
        { name: "token", host: "api.test", action: "allow", setHeaders: { Authorization: "Bearer ${e2b.secrets.gh}" } },
      ],
      mcp: [],
    };
    const upgrade = (path: string) =>
      new Promise<{ status: number; saw?: string; echoed?: string }>((resolve, reject) => {
        const req = https.request({ host: "127.0.0.1", port: front.port, servername: "api.test", ca: ca.certPem, agent: false, path, headers: { host: "api.test", connection: "Upgrade", upgrade: "echo" } });
        req.on("upgrade", (res, socket) => {
          socket.once("data", (c: Buffer) => {
            resolve({ status: res.statusCode ?? 0, saw: String(res.headers["x-saw-authorization"]), echoed: c.toString() });
            socket.destroy();
          });
          socket.write("ping");
        });
        req.on("response", (res) => resolve({ status: res.statusCode ?? 0 }));
        req.on("error", reject);
        req.end();
      });
    expect(await upgrade("/socket")).toEqual({ status: 101, saw: `Bearer ${SECRET}`, echoed: "ping" });
    expect(audit.at(-1)).toMatchObject({ rule: "token", status: 101, path: "/socket" });
    expect((await upgrade("/admin/socket")).status).toBe(403);
    expect(JSON.stringify(audit)).not.toContain(SECRET);
  });
});
