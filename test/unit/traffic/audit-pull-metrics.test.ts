// What an operator sees of the kubernetes driver's audit pulls on the agent's /metrics (the
// registry it serves): records kept and those the sidecar dropped, and pulls that took nothing,
// by a reason from a fixed set. Real pulls by the collector (kubernetes/pod-audit.ts) from a
// sidecar's buffer served as main.ts serves it, and from loopback servers that answer wrongly.
import { mkdtempSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, expect, it } from "vitest";
import { PodAuditCollector } from "../../../controllers/drivers/kubernetes/pod-audit.ts";
import { registry } from "../../../controllers/lib/metrics.ts";
import { AuditBuffer } from "../../../controllers/traffic/audit-buffer.ts";
import type { NetworkAuditRecord } from "../../../schema/api/network-audit.ts";
import { MAX_POD_AUDIT_RECORDS } from "../../../schema/protocol/pod-audit.ts";
import { parsePrometheus, value } from "../../support/prometheus-text.ts";

const token = "t".repeat(32);
const servers: Server[] = [];
afterAll(() => servers.forEach((s) => s.close()));

async function serve(handler: Parameters<typeof createServer>[1]): Promise<string> {
  const s = createServer(handler);
  servers.push(s);
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
  return `http://127.0.0.1:${(s.address() as AddressInfo).port}`;
}

const scrape = async (name: string, labels: Record<string, string>) => value(parsePrometheus(await registry.metrics()), name, labels) ?? 0;
const records = (outcome: string) => scrape("sandbox_agent_pod_audit_records_total", { outcome });
const failures = (reason: string) => scrape("sandbox_agent_pod_audit_pull_failures_total", { reason });

it("counts the records pulled and dropped, and failed pulls by reason, on the agent's /metrics", async () => {
  const dir = mkdtempSync(join(tmpdir(), "audit-metrics-"));
  writeFileSync(join(dir, "audit.token"), token);
  const buffer = new AuditBuffer(join(dir, "audit.token"));
  const sidecar = await serve((req, res) => buffer.serve(req, res));
  const record = (i: number): NetworkAuditRecord => ({ sandbox: "", host: "api.test", method: "GET", path: `/${i}`, rule: "allow api.test", status: 200, bytesOut: 1, bytesIn: 1, refused: false });
  // Two more than the sidecar keeps: it drops them and says how many.
  for (let i = 0; i < MAX_POD_AUDIT_RECORDS + 2; i++) buffer.add(record(i));
  const notJson = await serve((_req, res) => res.end("<html>"));
  const notRecords = await serve((_req, res) => res.end(JSON.stringify({ records: "x" })));
  const targets: Record<string, string> = { sidecar, notJson, notRecords, gone: "http://127.0.0.1:1" };
  const agent = new PodAuditCollector({ sandboxes: () => Object.keys(targets), targetOf: (id) => ({ url: targets[id]!, token }), sink: () => {} });
  const before = { kept: await records("kept"), dropped: await records("dropped"), request: await failures("request"), notJson: await failures("not_json"), invalid: await failures("invalid") };
  let kept = 0;
  for (let pull = 0; pull < 4; pull++) kept += (await agent.pull("sidecar")).kept;
  expect(kept).toBe(MAX_POD_AUDIT_RECORDS);
  await agent.pull("notJson");
  await agent.pull("notRecords");
  await agent.pull("gone");
  expect({ kept: await records("kept"), dropped: await records("dropped"), request: await failures("request"), notJson: await failures("not_json"), invalid: await failures("invalid") }).toEqual({
    kept: before.kept + MAX_POD_AUDIT_RECORDS,
    dropped: before.dropped + 2,
    request: before.request + 1,
    notJson: before.notJson + 1,
    invalid: before.invalid + 1,
  });
});
