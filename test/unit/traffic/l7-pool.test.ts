// The L7 handler's upstream pool (controllers/traffic/l7/pool.ts) behind the redirected path, on
// loopback stand-ins: a sandbox's later client connections to the same host reuse its kept-alive
// upstream connection (and carry their own credentials on it), another sandbox never gets that
// connection, another name (SNI) gets its own, a `Connection: close` answer is not reused, and a
// new upstream connection resumes the sandbox's TLS session.
import https from "node:https";
import { afterAll, beforeAll, expect, it } from "vitest";
import { SandboxCa } from "../../../controllers/traffic/l7/ca.ts";
import { L7Handler } from "../../../controllers/traffic/l7/handler.ts";
import type { L7Policy } from "../../../controllers/traffic/l7/policy.ts";
import { startFront, startHttpsEcho, type EchoServer, type Front } from "../../support/l7-stand-ins.ts";

let echo: EchoServer;
let handler: L7Handler;
const fronts: Record<string, Front> = {};
const cas: Record<string, SandboxCa> = {};
const policy: L7Policy = {
  http: [
    { name: "token", host: "api.test", action: "allow", setHeaders: { authorization: "Bearer ${e2b.secrets.tok}" } },
    { name: "other", host: "other.test", action: "allow" },
  ],
  mcp: [],
};

beforeAll(async () => {
  echo = await startHttpsEcho(["api.test", "other.test"]);
  for (const s of ["sbx-a", "sbx-b"]) cas[s] = await SandboxCa.create(s);
  handler = new L7Handler({
    policyFor: () => policy,
    // Each sandbox has its own value of the same secret.
    secretsFor: (s) => new Map([["tok", `secret-of-${s}`]]),
    caFor: async (s) => cas[s]!,
    audit: () => {},
    upstreamTls: { ca: echo.ca },
  });
  for (const s of ["sbx-a", "sbx-b"]) fronts[s] = await startFront(handler, s, echo.port);
});

afterAll(() => {
  for (const f of Object.values(fronts)) f.close();
  echo?.close();
});

interface Seen {
  conn: number;
  resumed: boolean;
  headers: Record<string, string>;
}

/** One GET on a new client connection, as sandbox `sandbox`. */
function get(sandbox: string, host: string, path = "/"): Promise<Seen> {
  return new Promise((resolve, reject) => {
    https
      .get({ host: "127.0.0.1", port: fronts[sandbox]!.port, servername: host, ca: cas[sandbox]!.certPem, agent: false, path, headers: { host } }, (res) => {
        let body = "";
        res.on("data", (c: Buffer) => (body += c.toString()));
        res.on("end", () => (res.statusCode === 200 ? resolve(JSON.parse(body) as Seen) : reject(new Error(`${res.statusCode} ${body}`))));
      })
      .on("error", reject);
  });
}

it("reuses a sandbox's upstream connection across its client connections, never for another sandbox or name", async () => {
  const a1 = await get("sbx-a", "api.test");
  const a2 = await get("sbx-a", "api.test");
  expect(a2.conn).toBe(a1.conn);
  // Credentials are added per request, on the pooled connection too.
  expect(a1.headers.authorization).toBe("Bearer secret-of-sbx-a");
  expect(a2.headers.authorization).toBe("Bearer secret-of-sbx-a");

  const b1 = await get("sbx-b", "api.test");
  expect(b1.conn).not.toBe(a1.conn);
  expect(b1.headers.authorization).toBe("Bearer secret-of-sbx-b");
  const b2 = await get("sbx-b", "api.test");
  expect(b2.conn).toBe(b1.conn);
  const a3 = await get("sbx-a", "api.test");
  expect(a3.conn).toBe(a1.conn);
  expect(a3.headers.authorization).toBe("Bearer secret-of-sbx-a");

  // Another SNI to the same ip:port is another connection.
  const o1 = await get("sbx-a", "other.test");
  expect([a1.conn, b1.conn]).not.toContain(o1.conn);
});

it("does not reuse a connection the upstream closes, and resumes the sandbox's TLS session on the next", async () => {
  const first = await get("sbx-a", "api.test");
  const closing = await get("sbx-a", "api.test", "/close");
  expect(closing.conn).toBe(first.conn);
  const next = await get("sbx-a", "api.test");
  expect(next.conn).not.toBe(first.conn);
  expect(next.resumed).toBe(true);
  expect(next.headers.authorization).toBe("Bearer secret-of-sbx-a");
});
