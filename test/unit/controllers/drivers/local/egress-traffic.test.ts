// The local driver's TrafficPolicies survive an agent restart: the set the edge sent is kept in
// the data directory and loaded by the next agent before any frame arrives, so a sandbox they
// govern stays behind the proxy (networkMode "proxy") rather than being let out until the edge
// speaks again. An unreadable file loads nothing (and says why) instead of failing the agent.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, expect, it, vi } from "vitest";
import { LocalEgress, networkMode } from "../../../../../controllers/drivers/local/egress.ts";
import { TrafficPolicySpec } from "../../../../../schema/api/traffic-policy.ts";

const dir = mkdtempSync(join(tmpdir(), "egress-traffic-"));
const file = join(dir, "traffic-policies.json");
const made: LocalEgress[] = [];
afterAll(() => {
  made.forEach((e) => e.dispose());
  rmSync(dir, { recursive: true, force: true });
});
const egress = () => {
  const e = new LocalEgress(() => undefined);
  made.push(e);
  return e;
};
const sandbox = { allowInternetAccess: true, egress: null, namespace: "team-a", labels: { app: "web" } };

it("keeps the edge's set on disk and a restarted agent governs with it at once", () => {
  const first = egress();
  first.persistIn(dir);
  expect(first.governing(sandbox)).toBeUndefined();
  first.setTraffic([{ team: "team-a", name: "web", spec: TrafficPolicySpec.parse({ selector: { matchLabels: { app: "web" } }, egress: { rules: [{ action: "reject", to: [{ cidr: "0.0.0.0/0" }] }] } }) }]);
  const restarted = egress();
  restarted.persistIn(dir);
  const g = restarted.governing(sandbox);
  expect(g?.policies.map((p) => p.name)).toEqual(["team-a/web"]);
  expect(networkMode(sandbox, g !== undefined)).toBe("proxy");
  restarted.setTraffic([]);
  const third = egress();
  third.persistIn(dir);
  expect(third.governing(sandbox)).toBeUndefined();
});

it("an unreadable file loads nothing and says why, without failing", () => {
  writeFileSync(file, "{not json");
  const said = vi.spyOn(console, "error").mockImplementation(() => {});
  const e = egress();
  e.persistIn(dir);
  expect(e.traffic.entries).toEqual([]);
  expect(said.mock.calls[0]?.[0]).toContain("unreadable traffic policies");
  said.mockRestore();
});
