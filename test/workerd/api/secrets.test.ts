// E2B's /secrets as the SDK calls it (Secret.create/update/getInfo/list/destroy send these
// requests): values are write-only (no answer carries one), stored sealed (the row in libSQL
// holds no plaintext and opens only for its own team, secret and version), names are the
// team's own, lower-cased and unique; bad input is a 400 naming the field.
import { env } from "cloudflare:workers";
import { eq } from "drizzle-orm";
import { describe, expect, it } from "vitest";
import { getDb } from "../../../durable-objects/store/db.ts";
import { open } from "../../../durable-objects/store/secret-box.ts";
import { secretValues } from "../../../durable-objects/store/secrets.ts";
import { secretVersions, teams } from "../../../schema/db/tables.ts";
import { MAX_TEAM_SECRETS, SECRET_VERSIONS_KEPT } from "../../../schema/api/secret.ts";
import { call, createTeam, expectError, expectStatus, unique } from "../helpers.ts";

const VALUE = "ghp_value-that-must-never-come-back-0123456789";

describe("/secrets", () => {
  it("creates, reads, updates and deletes a secret without ever answering its value", async () => {
    const team = await createTeam(unique("secrets"));
    const created = await expectStatus(call("/secrets", { key: team.key, body: { name: "GitHub-Token", value: VALUE, metadata: { owner: "ci" } } }), 201);
    expect(created).toMatchObject({ name: "github-token", currentVersion: 1, metadata: { owner: "ci" } });
    expect(created.secretID).toMatch(/^sec_[0-9a-f]{24}$/);
    expect(Date.parse(created.createdAt)).not.toBeNaN();

    const byName = await expectStatus(call("/secrets/GITHUB-TOKEN", { key: team.key }), 200);
    const byId = await expectStatus(call(`/secrets/${created.secretID}`, { key: team.key }), 200);
    expect(byName).toEqual(created);
    expect(byId).toEqual(created);

    const updated = await expectStatus(call("/secrets/github-token", { key: team.key, body: { value: `${VALUE}-2` } }), 200);
    expect(updated).toMatchObject({ secretID: created.secretID, currentVersion: 2, metadata: { owner: "ci" } });
    const retagged = await expectStatus(call(`/secrets/${created.secretID}`, { key: team.key, body: { value: `${VALUE}-3`, metadata: {} } }), 200);
    expect(retagged).toMatchObject({ currentVersion: 3, metadata: {} });

    const listed = await call("/secrets", { key: team.key });
    const text = await listed.text();
    expect(JSON.parse(text)).toEqual([retagged]);
    for (const body of [JSON.stringify(created), JSON.stringify(updated), text]) expect(body).not.toContain("never-come-back");

    await expectStatus(call(`/secrets/${created.secretID}`, { key: team.key, method: "DELETE" }), 204);
    await expectError(call("/secrets/github-token", { key: team.key }), 404, /not found/);
    await expectError(call("/secrets/github-token", { key: team.key, method: "DELETE" }), 404);
    await expectError(call("/secrets/github-token", { key: team.key, body: { value: "x" } }), 404);
    // Its versions went with it.
    expect(await getDb(env).select().from(secretVersions).where(eq(secretVersions.secretId, created.secretID))).toEqual([]);
  });

  it("stores each version sealed, bound to its team, secret and version", async () => {
    const team: { id?: string } & Awaited<ReturnType<typeof createTeam>> = await createTeam(unique("secrets-sealed"));
    const s = await expectStatus(call("/secrets", { key: team.key, body: { name: "api", value: VALUE } }), 201);
    await expectStatus(call("/secrets/api", { key: team.key, body: { value: "second" } }), 200);
    const rows = await getDb(env).select().from(secretVersions).where(eq(secretVersions.secretId, s.secretID));
    expect(rows.map((r) => r.version).sort()).toEqual([1, 2]);
    for (const r of rows) {
      expect(r.sealed).not.toContain("never-come-back");
      expect(r.sealed).not.toContain(btoa(VALUE).slice(0, 16));
    }
    const v1 = rows.find((r) => r.version === 1)!;
    const key = env.SECRETS_KEY!;
    const [owner] = await getDb(env).select({ id: teams.id }).from(teams).where(eq(teams.name, team.name));
    team.id = owner!.id;
    expect(await open(key, v1.sealed, { teamId: team.id!, secretId: s.secretID, version: 1 })).toBe(VALUE);
    await expect(open(key, v1.sealed, { teamId: team.id!, secretId: s.secretID, version: 2 })).rejects.toThrow();
    await expect(open(key, v1.sealed, { teamId: "another-team", secretId: s.secretID, version: 1 })).rejects.toThrow();
    await expect(open(`${key}-other`, v1.sealed, { teamId: team.id!, secretId: s.secretID, version: 1 })).rejects.toThrow();
    // What the agent link will carry: the current version only, of the names asked for.
    expect(await secretValues(getDb(env), key, team.id!, ["api", "missing"])).toEqual(new Map([["api", "second"]]));
  });

  it("keeps the newest versions only: an update drops the older ones, the current value unchanged", async () => {
    const team = await createTeam(unique("secrets-versions"));
    const s = await expectStatus(call("/secrets", { key: team.key, body: { name: "rolling", value: "v1" } }), 201);
    for (let v = 2; v <= SECRET_VERSIONS_KEPT + 3; v++) await expectStatus(call("/secrets/rolling", { key: team.key, body: { value: `v${v}` } }), 200);
    const last = SECRET_VERSIONS_KEPT + 3;
    const rows = await getDb(env).select().from(secretVersions).where(eq(secretVersions.secretId, s.secretID));
    expect(rows.map((r) => r.version).sort((a, b) => a - b)).toEqual(Array.from({ length: SECRET_VERSIONS_KEPT }, (_, i) => last - SECRET_VERSIONS_KEPT + 1 + i));
    expect((await expectStatus(call("/secrets/rolling", { key: team.key }), 200)).currentVersion).toBe(last);
    const [owner] = await getDb(env).select({ id: teams.id }).from(teams).where(eq(teams.name, team.name));
    expect(await secretValues(getDb(env), env.SECRETS_KEY!, owner!.id, ["rolling"])).toEqual(new Map([["rolling", `v${last}`]]));
  });

  it("a team keeps at most MAX_TEAM_SECRETS secrets: past it a 429 naming the bound, a taken name still a 409, and a delete frees one", async () => {
    const team = await createTeam(unique("secrets-max"));
    const create = (name: string) => call("/secrets", { key: team.key, body: { name, value: "x" } });
    for (let i = 0; i < MAX_TEAM_SECRETS; i += 8) {
      const batch = await Promise.all(Array.from({ length: Math.min(8, MAX_TEAM_SECRETS - i) }, (_, j) => create(`s${i + j}`)));
      for (const r of batch) expect(r.status).toBe(201);
    }
    await expectError(create("one-more"), 429, `team "${team.name}" has ${MAX_TEAM_SECRETS} secrets, the most a team keeps; delete one first`);
    await expectError(create("s0"), 409, /already exists/);
    await expectStatus(call("/secrets/s0", { key: team.key, method: "DELETE" }), 204);
    await expectStatus(create("one-more"), 201);
    await expectError(create("another"), 429);
  });

  it("keeps teams apart: another team neither sees nor changes a secret, and may use the same name", async () => {
    const a = await createTeam(unique("secrets-a"));
    const b = await createTeam(unique("secrets-b"));
    const s = await expectStatus(call("/secrets", { key: a.key, body: { name: "shared-name", value: "a" } }), 201);
    await expectError(call(`/secrets/${s.secretID}`, { key: b.key }), 404);
    await expectError(call(`/secrets/${s.secretID}`, { key: b.key, body: { value: "b" } }), 404);
    await expectError(call(`/secrets/${s.secretID}`, { key: b.key, method: "DELETE" }), 404);
    expect(await expectStatus(call("/secrets", { key: b.key }), 200)).toEqual([]);
    await expectStatus(call("/secrets", { key: b.key, body: { name: "shared-name", value: "b" } }), 201);
    await expectError(call("/secrets", { key: a.key, body: { name: "SHARED-NAME", value: "again" } }), 409, /already exists/);
    await expectError(call("/secrets", { key: null }), 401);
  });

  it("pages by name with X-Next-Token", async () => {
    const team = await createTeam(unique("secrets-page"));
    for (const n of ["c", "a", "b"]) await expectStatus(call("/secrets", { key: team.key, body: { name: n, value: n } }), 201);
    const first = await call("/secrets?limit=2", { key: team.key });
    expect(((await first.json()) as { name: string }[]).map((s: { name: string }) => s.name)).toEqual(["a", "b"]);
    const token = first.headers.get("x-next-token");
    expect(token).toBeTruthy();
    const second = await call(`/secrets?limit=2&nextToken=${token}`, { key: team.key });
    expect(((await second.json()) as { name: string }[]).map((s: { name: string }) => s.name)).toEqual(["c"]);
    expect(second.headers.get("x-next-token")).toBeNull();
    await expectError(call("/secrets?nextToken=%25%25", { key: team.key }), 400, /nextToken/);
    await expectError(call("/secrets?limit=101", { key: team.key }), 400, /limit/);
  });

  it("refuses bad names, values and metadata with a 400 naming the field", async () => {
    const team = await createTeam(unique("secrets-bad"));
    const create = (body: unknown) => call("/secrets", { key: team.key, body });
    await expectError(create({ name: "has space", value: "v" }), 400, /name/);
    await expectError(create({ name: "sec_abc", value: "v" }), 400, /reserved/);
    await expectError(create({ name: "x".repeat(129), value: "v" }), 400, /name/);
    await expectError(create({ name: "ok", value: "" }), 400, /value/);
    await expectError(create({ name: "ok", value: "v".repeat(16 * 1024 + 1) }), 400, /at most 16384 bytes/);
    await expectError(create({ name: "ok" }), 400, /value/);
    const many = Object.fromEntries(Array.from({ length: 33 }, (_, i) => [`k${i}`, "v"]));
    await expectError(create({ name: "ok", value: "v", metadata: many }), 400, /at most 32 metadata entries/);
    await expectError(create({ name: "ok", value: "v", metadata: { k: "v".repeat(1025) } }), 400, /1024 bytes/);
    await expectError(create({ name: "ok", value: "v", metadata: { k: 1 } }), 400, /metadata/);
  });
});
