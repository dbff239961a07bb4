import { describe, expect, it } from "vitest";
import { MAX_TEAM_API_KEYS } from "../../../schema/api/api-key.ts";
import { ADMIN_KEY, call, createTeam, expectError, expectStatus, unique } from "../helpers.ts";

describe("authentication", () => {
  it("refuses a missing, malformed or unknown key with a JSON 401", async () => {
    await expectError(call("/v2/sandboxes", { key: null }), 401, "Invalid API key");
    await expectError(call("/v2/sandboxes", { key: "not-a-key" }), 401);
    await expectError(call("/v2/sandboxes", { key: `e2b_${"1".repeat(40)}` }), 401);
  });

  it("answers unknown routes with a JSON 404, authenticated or not", async () => {
    await expectError(call("/nope", { key: null }), 404, /not found/);
    await expectError(call("/v3/whatever"), 404);
  });
});

describe("/api-keys and /teams", () => {
  it("lets the admin create a key for a new team; the plaintext is returned once and masked after", async () => {
    const team = unique("keys");
    const created = await expectStatus(call("/api-keys", { body: { name: "ci", teamName: team } }), 201);
    expect(created.key).toMatch(/^e2b_[0-9a-f]{40}$/);
    expect(created.mask).toEqual({ prefix: "e2b_", valueLength: 40, maskedValuePrefix: created.key.slice(4, 6), maskedValueSuffix: created.key.slice(-4) });
    expect(created).toMatchObject({ name: "ci", createdBy: { id: expect.any(String) } });

    const listed = await expectStatus(call("/api-keys", { key: created.key }), 200);
    expect(listed).toHaveLength(1);
    expect(listed[0].id).toBe(created.id);
    expect(JSON.stringify(listed)).not.toContain(created.key.slice(4));

    const teams = await expectStatus(call("/teams", { key: created.key }), 200);
    expect(teams).toEqual([{ teamID: expect.any(String), name: team, apiKey: "", isDefault: true }]);
    const all = await expectStatus(call("/teams"), 200);
    expect(all.map((t: { name: string }) => t.name)).toEqual(expect.arrayContaining(["admin", team]));
  });

  it("keeps team keys inside their team", async () => {
    const a = await createTeam(unique("ka"));
    const b = await createTeam(unique("kb"));
    await expectError(call("/api-keys", { key: a.key, body: { name: "x", teamName: b.name } }), 403);
    // Another team's key is as not found as an unknown one (no existence oracle), and stays.
    await expectError(call(`/api-keys/${b.keyId}`, { key: a.key, method: "DELETE" }), 404, `API key "${b.keyId}" not found`);
    await expectStatus(call("/api-keys", { key: b.key }), 200);
    const own = await expectStatus(call("/api-keys", { key: a.key, body: { name: "extra" } }), 201);
    expect((await expectStatus(call("/api-keys", { key: a.key }), 200)).map((k: { id: string }) => k.id)).toEqual([a.keyId, own.id]);
  });

  it("a team has at most MAX_TEAM_API_KEYS keys, counted exactly under concurrent creates; past it a 429, and a delete frees one", async () => {
    const t = await createTeam(unique("kmax"));
    const statuses = (await Promise.all(Array.from({ length: MAX_TEAM_API_KEYS + 5 }, (_, i) => call("/api-keys", { key: t.key, body: { name: `k${i}` } })))).map((r) => (void r.body?.cancel(), r.status));
    expect(statuses.filter((s) => s === 201)).toHaveLength(MAX_TEAM_API_KEYS - 1);
    expect(statuses.filter((s) => s === 429)).toHaveLength(6);
    await expectError(call("/api-keys", { key: t.key, body: { name: "one-more" } }), 429, `team "${t.name}" has ${MAX_TEAM_API_KEYS} API keys, the most a team has; delete one first`);
    const listed = await expectStatus(call("/api-keys", { key: t.key }), 200);
    expect(listed).toHaveLength(MAX_TEAM_API_KEYS);
    await expectStatus(call(`/api-keys/${listed[1].id}`, { key: t.key, method: "DELETE" }), 204);
    await expectStatus(call("/api-keys", { key: t.key, body: { name: "one-more" } }), 201);
  });

  it("deletes a key, after which it no longer authenticates", async () => {
    const t = await createTeam(unique("kdel"));
    const extra = await expectStatus(call("/api-keys", { key: t.key, body: { name: "temp" } }), 201);
    await expectStatus(call("/v2/sandboxes", { key: extra.key }), 200);
    await expectStatus(call(`/api-keys/${extra.id}`, { key: t.key, method: "DELETE" }), 204);
    await expectError(call("/v2/sandboxes", { key: extra.key }), 401);
    await expectError(call(`/api-keys/${extra.id}`, { key: t.key, method: "DELETE" }), 404);
  });

  it("never deletes the admin key", async () => {
    await expectError(call("/api-keys/550e8400-e29b-41d4-a716-446655440000", { method: "DELETE" }), 403);
    await expectStatus(call("/teams", { key: ADMIN_KEY }), 200);
  });

  it("validates the key request", async () => {
    await expectError(call("/api-keys", { body: { name: "" } }), 400);
    await expectError(call("/api-keys", { body: { name: "x", teamName: "Bad Name" } }), 400);
    await expectError(call("/api-keys", { body: { name: "x", unknown: 1 } }), 400);
  });
});

describe("admin template API", () => {
  it("is admin-only", async () => {
    const t = await createTeam(unique("adm"));
    await expectError(call(`/admin/teams/${t.name}/templates`, { key: t.key }), 403);
  });

  it("creates, scales, lists and deletes a template, visible to the team through GET /templates", async () => {
    const t = await createTeam(unique("tpl"));
    const put = await expectStatus(
      call(`/admin/teams/${t.name}/templates/py`, { method: "PUT", body: { spec: { cpuCount: 2, memoryMB: 1024, cluster: t.cluster } } }),
      201,
    );
    expect(put).toMatchObject({ templateId: "py", spec: { cpuCount: 2, replicas: 0 }, pool: { configured: true, replicas: 0 } });
    const scaled = await expectStatus(call(`/admin/teams/${t.name}/templates/py/scale`, { body: { replicas: 3 } }), 200);
    expect(scaled.pool.replicas).toBe(3);
    expect(scaled.revision).toBe(put.revision);

    const list = await expectStatus(call("/templates", { key: t.key }), 200);
    expect(list.map((x: { templateID: string }) => x.templateID)).toEqual(expect.arrayContaining(["base", "py", t.template]));
    const py = list.find((x: { templateID: string }) => x.templateID === "py");
    expect(py).toMatchObject({ buildID: put.revision, cpuCount: 2, memoryMB: 1024, public: false, buildStatus: "ready", envdVersion: "0.6.4" });
    const one = await expectStatus(call("/templates/py", { key: t.key }), 200);
    expect(one.builds).toHaveLength(1);

    await expectStatus(call(`/admin/teams/${t.name}/templates/py`, { method: "DELETE" }), 204);
    await expectError(call("/templates/py", { key: t.key }), 404);
    await expectError(call(`/admin/teams/${t.name}/templates/py/scale`, { body: { replicas: 1 } }), 404);
  });

  it("rejects invalid specs", async () => {
    await expectError(call("/admin/teams/admin/templates/x", { method: "PUT", body: { spec: { cpuCount: 0 } } }), 400);
    await expectError(call("/admin/teams/admin/templates/x", { method: "PUT", body: { spec: { bogus: true } } }), 400);
    await expectError(call("/admin/teams/admin/templates/x/scale", { body: { replicas: -1 } }), 400);
  });
});
