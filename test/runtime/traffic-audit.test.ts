// A pod traffic-proxy's audit records reach the agent (issue 14): the sidecar as its pod runs it
// (controllers/traffic/main.ts with --pod-policy, --secret-dir and --health, a real process) hands
// what it kept at /audit on its health port, to the pod's pull token only; the agent's collector
// (controllers/drivers/kubernetes/pod-audit.ts) pulls, checks and keeps them under the sandbox it
// pulled from. The records of real inspected requests, through a real pod's redirect, are in
// test/kube/traffic-audit.test.ts; here, the endpoint's door and what the agent refuses from a pod
// that answers what it likes (the attack tests).
import { spawn, type ChildProcess } from "node:child_process";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PodAuditCollector } from "../../controllers/drivers/kubernetes/pod-audit.ts";
import type { NetworkAuditRecord } from "../../schema/api/network-audit.ts";
import { MAX_POD_AUDIT_BYTES, MAX_POD_AUDIT_RECORDS } from "../../schema/protocol/pod-audit.ts";
import { waitFor } from "../support/wait-for.ts";

const ROOT = join(import.meta.dirname, "../..");
const dir = join(ROOT, ".cache", `runtime-traffic-audit-${process.pid}`);
const secretDir = join(dir, "secret");
const TOKEN = "k".repeat(43);
let proxy: ChildProcess;
let out = "";
let healthUrl: string;
const servers: Server[] = [];

async function freePort(): Promise<number> {
  const s = createServer().listen(0, "127.0.0.1");
  await new Promise((r) => s.once("listening", r));
  const port = (s.address() as AddressInfo).port;
  await new Promise((r) => s.close(r));
  return port;
}

/** A "pod" that answers /audit with whatever `body` is (a tenant squatting the port). */
async function standIn(body: string): Promise<string> {
  const s = createServer((_req, res) => res.writeHead(200, { "content-type": "application/json" }).end(body)).listen(0, "127.0.0.1");
  servers.push(s);
  await new Promise((r) => s.once("listening", r));
  return `http://127.0.0.1:${(s.address() as AddressInfo).port}`;
}

function collector(url: string, token = TOKEN): { c: PodAuditCollector; kept: NetworkAuditRecord[] } {
  const kept: NetworkAuditRecord[] = [];
  return { c: new PodAuditCollector({ sandboxes: () => ["sbx-pulled"], targetOf: () => ({ url, token }), sink: (r) => kept.push(r) }), kept };
}

const record = (over: Record<string, unknown> = {}) => ({ sandbox: "", host: "api.test", method: "GET", path: "/x", rule: "r", status: 200, bytesOut: 0, bytesIn: 5, refused: false, ...over });

beforeAll(async () => {
  mkdirSync(secretDir, { recursive: true });
  writeFileSync(join(dir, "policy.json"), JSON.stringify({ team: "t", labels: {}, egress: null, trafficPolicies: [] }));
  const port = await freePort();
  healthUrl = `http://127.0.0.1:${port}`;
  proxy = spawn(process.execPath, [join(ROOT, "controllers/traffic/main.ts"), "--listen", "127.0.0.1:0", "--pod-policy", join(dir, "policy.json"), "--secret-dir", secretDir, "--health", `127.0.0.1:${port}`], { stdio: ["ignore", "pipe", "pipe"] });
  proxy.stdout!.on("data", (b: Buffer) => (out += b.toString()));
  proxy.stderr!.on("data", (b: Buffer) => (out += b.toString()));
  await waitFor(() => out.includes("health on") || proxy.exitCode !== null, { what: "the sidecar's health port", timeoutMs: 20_000 });
  expect(out).toContain("health on");
});

afterAll(() => {
  proxy?.kill();
  for (const s of servers) s.close();
  rmSync(dir, { recursive: true, force: true });
});

describe("a pod sidecar's audit records, pulled by its agent", () => {
  it("the sidecar answers /audit only to its pod's token, and an empty pull keeps nothing", async () => {
    const get = (auth?: string) => fetch(new URL("/audit", healthUrl), { headers: auth ? { authorization: auth } : {} });
    // No token file yet (a pod whose agent has not written one): nobody gets the records.
    expect((await get(`Bearer ${TOKEN}`)).status).toBe(403);
    writeFileSync(join(secretDir, "audit.token"), TOKEN);
    expect((await get()).status).toBe(403);
    expect((await get(`Bearer ${"x".repeat(43)}`)).status).toBe(403);
    expect((await get(`Bearer ${TOKEN}x`)).status).toBe(403);
    expect((await fetch(new URL("/audit", healthUrl), { method: "POST", headers: { authorization: `Bearer ${TOKEN}` } })).status).toBe(403);
    const ok = await get(`Bearer ${TOKEN}`);
    expect(ok.status).toBe(200);
    expect(await ok.json()).toEqual({ records: [], dropped: 0 });

    const { c, kept } = collector(healthUrl);
    expect(await c.pull("sbx-pulled")).toEqual({ kept: 0, dropped: 0 });
    expect(kept).toEqual([]);
    // The wrong token: nothing taken, and said why.
    expect(await collector(healthUrl, "y".repeat(43)).c.pull("sbx-pulled")).toMatchObject({ kept: 0, error: "the sidecar answered 403" });
  });

  it("a record is the sandbox's the agent pulled from, whatever it names; a batch past the bounds is not taken", async () => {
    // A pod that claims its records are another sandbox's: kept as the pulled sandbox's.
    const forged = collector(await standIn(JSON.stringify({ records: [record({ sandbox: "sbx-victim", host: "evil.test" })], dropped: 3 })));
    expect(await forged.c.pull("sbx-pulled")).toEqual({ kept: 1, dropped: 3 });
    expect(forged.kept).toEqual([{ ...record({ host: "evil.test" }), sandbox: "sbx-pulled" }]);

    // Past the schema's bounds: refused whole, nothing kept.
    const refuse = async (body: string, error: RegExp) => {
      const { c, kept } = collector(await standIn(body));
      expect((await c.pull("sbx-pulled")).error).toMatch(error);
      expect(kept).toEqual([]);
    };
    await refuse("not json", /not JSON/);
    await refuse(JSON.stringify({ records: [record({ path: `/${"a".repeat(1024)}` })], dropped: 0 }), /not audit records/);
    await refuse(JSON.stringify({ records: [record({ method: "GET /x HTTP/1.1\r\nX: y" })], dropped: 0 }), /not audit records/);
    await refuse(JSON.stringify({ records: [record({ extra: "field" })], dropped: 0 }), /not audit records/);
    await refuse(JSON.stringify({ records: Array.from({ length: MAX_POD_AUDIT_RECORDS + 1 }, () => record()), dropped: 0 }), /not audit records/);
    // Larger than the agent reads at all: the pull is dropped before parsing.
    await refuse(JSON.stringify({ records: [], dropped: 0, pad: "x".repeat(MAX_POD_AUDIT_BYTES) }), new RegExp(`over ${MAX_POD_AUDIT_BYTES} bytes`));
  });
});
