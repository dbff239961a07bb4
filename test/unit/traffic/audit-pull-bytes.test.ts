// A tenant cannot make the agent drop its own pulled L7 audit (review finding 2). The sidecar's
// buffer (audit-buffer.ts) behind a loopback server as main.ts serves it, pulled by the agent's
// collector (kubernetes/pod-audit.ts) with the pull token. The tenant's requests fill a full
// buffer of records whose fields, within the schema's character bounds, are large once encoded:
// control characters in the MCP tool name (6 bytes each JSON-escaped) and latin1 high-bit bytes in
// the path (2 bytes each in UTF-8), about 2 MB in all, past the agent's 1 MiB answer bound. Every
// record must still reach the agent over the next pulls, none lost, none counted as dropped.
import { mkdtempSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeEach, describe, expect, it } from "vitest";
import { PodAuditCollector } from "../../../controllers/drivers/kubernetes/pod-audit.ts";
import { AuditBuffer } from "../../../controllers/traffic/audit-buffer.ts";
import type { NetworkAuditRecord } from "../../../schema/api/network-audit.ts";
import { MAX_AUDIT_HOST, MAX_AUDIT_PATH, MAX_AUDIT_RULE, MAX_AUDIT_TOOL, MAX_POD_AUDIT_RECORDS } from "../../../schema/protocol/pod-audit.ts";

const token = "t".repeat(32);
let buffer: AuditBuffer;
let url: string;
const servers: Server[] = [];

/** A fresh sidecar's buffer, served as main.ts serves it. */
async function sidecar(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), "audit-pull-"));
  writeFileSync(join(dir, "audit.token"), token);
  const b = (buffer = new AuditBuffer(join(dir, "audit.token")));
  const s = createServer((req, res) => b.serve(req, res));
  servers.push(s);
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
  url = `http://127.0.0.1:${(s.address() as AddressInfo).port}`;
}
beforeEach(sidecar);
afterAll(() => servers.forEach((s) => s.close()));

describe("the pulled audit under records made large by the tenant", () => {
  it("reaches the agent whole over the following pulls", async () => {
    const heavy = (i: number): NetworkAuditRecord => ({
      sandbox: "",
      host: "\u00ff".repeat(MAX_AUDIT_HOST),
      method: "POST",
      path: `/${i}/${"\u00e9".repeat(MAX_AUDIT_PATH)}`,
      rule: "\u0002".repeat(MAX_AUDIT_RULE),
      status: 200,
      bytesOut: 1,
      bytesIn: 1,
      tool: "\u0001".repeat(MAX_AUDIT_TOOL),
      refused: false,
    });
    for (let i = 0; i < MAX_POD_AUDIT_RECORDS; i++) buffer.add(heavy(i));
    const kept: NetworkAuditRecord[] = [];
    let dropped = 0;
    const agent = new PodAuditCollector({ sandboxes: () => ["sbx-a"], targetOf: () => ({ url, token }), sink: (r) => kept.push(r) });
    for (let pull = 0; pull < 4; pull++) dropped += (await agent.pull("sbx-a")).dropped;
    expect(dropped).toBe(0);
    expect(kept).toHaveLength(MAX_POD_AUDIT_RECORDS);
    expect(kept.map((r) => r.path.split("/")[1])).toEqual(Array.from({ length: MAX_POD_AUDIT_RECORDS }, (_, i) => String(i)));
    expect(kept.every((r) => r.sandbox === "sbx-a")).toBe(true);
  });
});

describe("a pulled batch whose answer is lost", () => {
  it("is handed again to the next pull, and kept once", async () => {
    const record = (i: number): NetworkAuditRecord => ({ sandbox: "", host: "api.test", method: "GET", path: `/${i}`, rule: "r", status: 200, bytesOut: 0, bytesIn: 1, refused: false });
    buffer.add(record(1));
    buffer.add(record(2));
    // A pull whose answer never reaches the agent (its timeout fired as the answer left): the
    // sidecar has handed the batch over, the agent has nothing.
    const lost = await fetch(new URL("/audit", url), { headers: { authorization: `Bearer ${token}`, "x-audit-ack": "none" } });
    expect((await lost.json()) as { records: unknown[] }).toMatchObject({ records: [{ path: "/1" }, { path: "/2" }] });
    const kept: NetworkAuditRecord[] = [];
    const agent = new PodAuditCollector({ sandboxes: () => ["sbx-b"], targetOf: () => ({ url, token }), sink: (r) => kept.push(r) });
    await agent.pull("sbx-b");
    buffer.add(record(3));
    await agent.pull("sbx-b");
    await agent.pull("sbx-b");
    expect(kept.map((r) => r.path)).toEqual(["/1", "/2", "/3"]);
  });

  it("an agent older than acknowledgements (no header) gets each batch once, in the shape its strict schema reads", async () => {
    buffer.add({ sandbox: "", host: "api.test", method: "GET", path: "/old", rule: "r", status: 200, bytesOut: 0, bytesIn: 1, refused: false });
    const pull = async () => (await fetch(new URL("/audit", url), { headers: { authorization: `Bearer ${token}` } })).json();
    expect(await pull()).toEqual({ records: [expect.objectContaining({ path: "/old" })], dropped: 0 });
    expect(await pull()).toEqual({ records: [], dropped: 0 });
  });
});
