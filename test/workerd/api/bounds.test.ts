// Bounded inputs (issue 10.8): every list or map a request carries (query parameters, body arrays
// and maps, free-form strings) has a limit, and going past it is a 400 that names the limit, never
// a 500 or a request the store has to survive.
import { beforeAll, describe, expect, it } from "vitest";
import { call, createTeam, expectError, expectStatus, startAgent, unique, type TestTeam } from "../helpers.ts";

let team: TestTeam;

beforeAll(async () => {
  team = await createTeam(unique("bounds"));
  await startAgent(team.cluster);
});

/** The SDK's triple encoding of a metadata filter (see list-query.ts). */
function metadataQuery(pairs: [string, string][]): string {
  const inner = new URLSearchParams(pairs.map(([k, v]) => [encodeURIComponent(k), encodeURIComponent(v)])).toString();
  return `metadata=${encodeURIComponent(inner)}`;
}

const create = (body: Record<string, unknown>) => call("/v2/sandboxes", { key: team.key, body: { templateID: team.template, ...body } });
const many = <T,>(n: number, f: (i: number) => T): T[] => Array.from({ length: n }, (_, i) => f(i));

describe("list query", () => {
  it("3,000 metadata filter pairs are a 400 naming the limit (was a 500: SQLite's expression tree too large)", async () => {
    const q = metadataQuery(many(3000, (i): [string, string] => [`k${i}`, "v"]));
    await expectError(call(`/v2/sandboxes?${q}`, { key: team.key }), 400, /at most 64 key=value pairs/);
    await expectError(call(`/sandboxes?${q}`, { key: team.key }), 400, /at most 64 key=value pairs/);
  });

  it("64 pairs still filter, and oversized keys, values or a huge parameter are 400s", async () => {
    await expectStatus(call(`/v2/sandboxes?${metadataQuery(many(64, (i): [string, string] => [`k${i}`, "v"]))}`, { key: team.key }), 200);
    await expectError(call(`/v2/sandboxes?${metadataQuery([["k".repeat(300), "v"]])}`, { key: team.key }), 400, /keys are at most 256/);
    await expectError(call(`/v2/sandboxes?${metadataQuery([["k", "v".repeat(5000)]])}`, { key: team.key }), 400, /values are at most 4096/);
    await expectError(call(`/v2/sandboxes?metadata=${"a".repeat(70_000)}`, { key: team.key }), 400, /longer than 65536/);
  });

  it("repeated states collapse, and long template or nextToken values are 400s", async () => {
    const states = many(20_000, (i) => (i % 2 ? "running" : "paused")).join(",");
    await expectStatus(call(`/v2/sandboxes?state=${states}`, { key: team.key }), 200);
    await expectError(call(`/v2/sandboxes?template=${"t".repeat(300)}`, { key: team.key }), 400, /template/);
    await expectError(call(`/v2/sandboxes?nextToken=${"A".repeat(300)}`, { key: team.key }), 400, /nextToken/);
  });
});

describe("create body", () => {
  it("bounds env var names and values", async () => {
    await expectError(create({ envVars: { ["A".repeat(300)]: "x" } }), 400, /envVars/);
    await expectError(create({ envVars: { BIG: "x".repeat(40_000) } }), 400, /envVars/);
    await expectError(create({ envVars: Object.fromEntries(many(300, (i): [string, string] => [`V${i}`, "x"])) }), 400, /at most 256 env vars/);
  });

  it("bounds network rules, ports, DNS servers and header rules", async () => {
    await expectError(create({ network: { allowOut: many(101, (i) => `10.0.${i}.1`) } }), 400, /allowOut/);
    await expectError(create({ network: { denyOut: [`${"a".repeat(300)}.com`] } }), 400, /denyOut/);
    await expectError(create({ network: { httpsPorts: many(65, (i) => 1000 + i) } }), 400, /httpsPorts/);
    await expectError(create({ network: { dnsServers: ["1".repeat(100)] } }), 400, /dnsServers/);
    await expectError(create({ network: { maskRequestHost: "h".repeat(300) } }), 400, /maskRequestHost/);
    await expectError(create({ network: { rules: Object.fromEntries(many(65, (i): [string, never[]] => [`h${i}.com`, []])) } }), 400, /at most 64 rules/);
  });

  it("bounds volume mounts, mcp servers and the template name", async () => {
    await expectError(create({ volumeMounts: many(65, (i) => ({ name: `v${i}`, path: `/mnt/${i}` })) }), 400, /volumeMounts/);
    await expectError(create({ volumeMounts: [{ name: "v".repeat(300), path: "/mnt" }] }), 400, /volumeMounts/);
    await expectError(create({ mcp: Object.fromEntries(many(65, (i): [string, object] => [`s${i}`, {}])) }), 400, /at most 64 mcp servers/);
    await expectError(call("/v2/sandboxes", { key: team.key, body: { templateID: "t".repeat(300) } }), 400, /templateID/);
  });
});

describe("admin bodies", () => {
  const put = (spec: Record<string, unknown>) => call(`/admin/teams/${team.name}/templates/bounded`, { method: "PUT", body: { spec } });

  it("bounds a template's env, image, user, workdir and disk", async () => {
    await expectError(put({ env: Object.fromEntries(many(300, (i): [string, string] => [`V${i}`, "x"])) }), 400, /at most 256 env vars/);
    await expectError(put({ env: { "BAD NAME": "x" } }), 400, /spec\.env/);
    await expectError(put({ image: "i".repeat(300) }), 400, /image/);
    await expectError(put({ user: "u".repeat(40) }), 400, /Linux user name/);
    await expectError(put({ workdir: `/${"w".repeat(5000)}` }), 400, /workdir/);
    await expectError(put({ diskSizeMB: 1e12 }), 400, /diskSizeMB/);
  });
});
