// The edge's side of snapshots and fork (issue 11.5): routes, the snapshot operation, the sandbox
// machine's snapshot intent and the libSQL records, with a scripted agent on the real protocol.
// Ordering (the snapshot is an intent of its own generation that keeps the desired state), 404s
// for other teams, validation, a driver that cannot take snapshots (501) or fails one (the sandbox
// unchanged), create-from-snapshot as a fresh sandbox whose intent names the snapshot, and delete
// asking the agent to free the files.
import { env } from "cloudflare:workers";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { getDb } from "../../../durable-objects/store/db.ts";
import { PENDING_SNAPSHOT_TTL_MS, reserveSnapshot } from "../../../durable-objects/store/snapshots.ts";
import type { Intent } from "../../../schema/protocol/index.ts";
import type { ScriptedAgent } from "../../support/scripted-agent.ts";
import { call, createTeam, expectError, expectStatus, startAgent, unique, type TestTeam } from "../helpers.ts";

let team: TestTeam;
let other: TestTeam;
let agent: ScriptedAgent;
let failSnapshot: ((i: Intent) => { reason: string; message: string } | undefined) | undefined;

beforeAll(async () => {
  team = await createTeam(unique("snap"), { replicas: 1 });
  other = await createTeam(unique("snap-other"), { cluster: team.cluster });
  agent = await startAgent(team.cluster, { failSnapshot: (i) => failSnapshot?.(i) });
  await agent.waitUntil(() => agent.running().length >= 1);
});
afterAll(() => agent.disconnect());

const create = async (templateID = team.template, key = team.key) => expectStatus(call("/v2/sandboxes", { key, body: { templateID } }), 201);
const snapshot = (id: string, body: unknown = {}, key = team.key) => call(`/sandboxes/${id}/snapshots`, { key, body });
const lastIntent = (id: string) => agent.received.filter((r) => r.intent.sandboxId === id).at(-1)!.intent;

describe("createSnapshot", () => {
  it("sends the sandbox's next generation with the snapshot and the same desired state, answers E2B's SnapshotInfo, and keeps it running", async () => {
    const sbx = await create();
    const before = lastIntent(sbx.sandboxID);
    const info = await expectStatus(snapshot(sbx.sandboxID, { name: "first" }), 201);
    expect(info).toEqual({ snapshotID: `${team.name}/first:default`, names: [`${team.name}/first:default`] });
    const sent = lastIntent(sbx.sandboxID);
    expect(sent.generation).toBe(before.generation + 1);
    expect(sent.desired).toEqual(before.desired);
    expect(sent.snapshot?.id).toMatch(/^[a-z0-9]{20}$/);
    expect((await expectStatus(call(`/sandboxes/${sbx.sandboxID}`, { key: team.key }), 200)).state).toBe("running");
    // A later intent does not ask again.
    await expectStatus(call(`/sandboxes/${sbx.sandboxID}/pause`, { key: team.key, body: {} }), 204);
    expect(lastIntent(sbx.sandboxID).snapshot).toBeUndefined();
    // A paused sandbox is snapshotted as it is, and stays paused.
    await expectStatus(snapshot(sbx.sandboxID), 201);
    expect(lastIntent(sbx.sandboxID)).toMatchObject({ desired: { state: "paused" }, snapshot: { id: expect.any(String) } });
    expect((await expectStatus(call(`/sandboxes/${sbx.sandboxID}`, { key: team.key }), 200)).state).toBe("paused");
  });

  it("is E2B's 404 for another team's or an unknown sandbox; a bad name is a 400 naming it; memory is a 501 saying why", async () => {
    const sbx = await create();
    await expectError(snapshot(sbx.sandboxID, {}, other.key), 404, /doesn't exist or you don't have access/);
    await expectError(snapshot("nosuchsandbox0000000"), 404);
    await expectError(call(`/sandboxes/${sbx.sandboxID}/snapshots`, { key: null, body: {} }), 401);
    await expectError(snapshot(sbx.sandboxID, { name: "Bad/Name" }), 400, /name "Bad\/Name"/);
    await expectError(snapshot(sbx.sandboxID, { name: "x".repeat(64) }), 400, /1-63 characters/);
    await expectError(snapshot(sbx.sandboxID, { keepMemory: true }), 501, /CRIU .*6\.13/);
    expect(agent.received.filter((r) => r.intent.sandboxId === sbx.sandboxID && r.intent.snapshot)).toEqual([]);
  });

  it("a driver without snapshots is a 501 with its reason; another failure a 500; either way the sandbox runs on and nothing is listed", async () => {
    const sbx = await create();
    failSnapshot = () => ({ message: "snapshots are not supported: no Checkpoint controller", reason: "Unsupported" });
    await expectError(snapshot(sbx.sandboxID, { name: "nope" }), 501, /not taken: snapshots are not supported: no Checkpoint controller/);
    failSnapshot = () => ({ message: "cp: No space left on device", reason: "SnapshotFailed" });
    await expectError(snapshot(sbx.sandboxID, { name: "nope" }), 500, /No space left on device/);
    failSnapshot = undefined;
    // The agent may hold a partial copy: the agent of the sandbox's own cluster is told to free it.
    const failed = lastIntent(sbx.sandboxID).snapshot!.id;
    await agent.waitUntil(() => agent.snapshotDeletes.includes(failed));
    expect((await expectStatus(call(`/sandboxes/${sbx.sandboxID}`, { key: team.key }), 200)).state).toBe("running");
    expect(await expectStatus(call("/snapshots?name=nope", { key: team.key }), 200)).toEqual([]);
    // The next snapshot works.
    await expectStatus(snapshot(sbx.sandboxID), 201);
  });
});

describe("the team's snapshots quota", () => {
  it("refuses a snapshot past the team's bound with 429 naming it, before the agent is asked; a delete frees a slot; concurrent snapshots are counted exactly", async () => {
    const bounded = await createTeam(unique("snap-bound"), { cluster: team.cluster });
    await expectStatus(call(`/admin/teams/${bounded.name}/quota`, { method: "PUT", body: { snapshots: 2 } }), 200);
    const mine = async () => expectStatus(call("/v2/sandboxes", { key: bounded.key, body: { templateID: bounded.template } }), 201);
    const sbx = await mine();
    const snap = (id: string) => call(`/sandboxes/${id}/snapshots`, { key: bounded.key, body: {} });
    const asked = (id: string) => agent.received.filter((r) => r.intent.sandboxId === id && r.intent.snapshot).length;
    const kept = await expectStatus(snap(sbx.sandboxID), 201);
    await expectStatus(snap(sbx.sandboxID), 201);
    await expectError(snap(sbx.sandboxID), 429, `team "${bounded.name}" has 2 of 2 snapshots (quota snapshots)`);
    expect(asked(sbx.sandboxID)).toBe(2);
    expect(await expectStatus(call("/snapshots", { key: bounded.key }), 200)).toHaveLength(2);
    await expectStatus(call(`/templates/${encodeURIComponent(kept.snapshotID)}`, { key: bounded.key, method: "DELETE" }), 204);
    await expectStatus(snap(sbx.sandboxID), 201);
    // Room for one more, asked of four sandboxes at once: one is taken, three are refused.
    await expectStatus(call(`/admin/teams/${bounded.name}/quota`, { method: "PUT", body: { snapshots: 3 } }), 200);
    const four = await Promise.all(Array.from({ length: 4 }, mine));
    const statuses = (await Promise.all(four.map((s) => snap(s.sandboxID)))).map((r) => (void r.body?.cancel(), r.status));
    expect(statuses.sort()).toEqual([201, 429, 429, 429]);
    expect(four.reduce((n, s) => n + asked(s.sandboxID), 0)).toBe(1);
    expect(await expectStatus(call("/snapshots", { key: bounded.key }), 200)).toHaveLength(3);
  });

  it("a slot whose taker is gone counts until it is old, then is dropped (and freed on its cluster) by the next snapshot", async () => {
    const bounded = await createTeam(unique("snap-slot"), { cluster: team.cluster });
    await expectStatus(call(`/admin/teams/${bounded.name}/quota`, { method: "PUT", body: { snapshots: 1 } }), 200);
    const teamId = (await expectStatus(call("/teams", { key: bounded.key }), 200))[0].teamID as string;
    const sbx = await expectStatus(call("/v2/sandboxes", { key: bounded.key, body: { templateID: bounded.template } }), 201);
    const slot = { id: unique("slot").replace(/[^a-z0-9]/g, "").slice(0, 20), teamId, keyId: "k", sandboxId: sbx.sandboxID, cluster: team.cluster };
    const db = getDb(env);
    await reserveSnapshot(db, { ...slot, createdAt: Date.now() - 60_000 }, null);
    const snap = () => call(`/sandboxes/${sbx.sandboxID}/snapshots`, { key: bounded.key, body: {} });
    await expectError(snap(), 429, /has 1 of 1 snapshots/);
    expect(await expectStatus(call("/snapshots", { key: bounded.key }), 200)).toEqual([]);
    await db.$client.execute({ sql: "UPDATE snapshots SET created_at = ? WHERE id = ?", args: [Date.now() - PENDING_SNAPSHOT_TTL_MS - 1, slot.id] });
    await expectStatus(snap(), 201);
    await agent.waitUntil(() => agent.snapshotDeletes.includes(slot.id));
  });
});

describe("sandboxes from a snapshot, list and delete", () => {
  it("a create from it is a fresh sandbox (never a warm member) whose intents name the snapshot; each its own id and token", async () => {
    const src = await create();
    const info = await expectStatus(snapshot(src.sandboxID, { name: "base-copy" }), 201);
    const snapId = lastIntent(src.sandboxID).snapshot!.id;
    const warm = new Set(agent.running());
    const a = await create(info.snapshotID);
    const b = await create("base-copy");
    for (const s of [a, b]) {
      expect(warm.has(s.sandboxID)).toBe(false);
      expect(lastIntent(s.sandboxID)).toMatchObject({ restoreFrom: { id: snapId }, owner: { kind: "sandbox" }, desired: { state: "running" } });
      expect(s.templateID).toBe(team.template);
    }
    expect(a.sandboxID).not.toBe(b.sandboxID);
    expect(a.envdAccessToken).not.toBe(b.envdAccessToken);
    await expectError(call("/v2/sandboxes", { key: other.key, body: { templateID: info.snapshotID } }), 404);
    await expectError(call("/v2/sandboxes", { key: other.key, body: { templateID: snapId } }), 404);
  });

  it("lists the team's snapshots newest first, by sandbox and by name, in pages; validates the query", async () => {
    const src = await create();
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) ids.unshift((await expectStatus(snapshot(src.sandboxID), 201)).snapshotID);
    expect((await expectStatus(call(`/snapshots?sandboxID=${src.sandboxID}`, { key: team.key }), 200)).map((s: { snapshotID: string }) => s.snapshotID)).toEqual(ids);
    const seen: string[] = [];
    let token: string | null = null;
    do {
      const res: Response = await call(`/snapshots?sandboxID=${src.sandboxID}&limit=2${token ? `&nextToken=${token}` : ""}`, { key: team.key });
      seen.push(...(await expectStatus(res, 200)).map((s: { snapshotID: string }) => s.snapshotID));
      token = res.headers.get("X-Next-Token");
    } while (token);
    expect(seen).toEqual(ids);
    expect((await expectStatus(call(`/snapshots?name=${encodeURIComponent(ids[1]!)}`, { key: team.key }), 200)).map((s: { snapshotID: string }) => s.snapshotID)).toEqual([ids[1]]);
    expect(await expectStatus(call(`/snapshots?sandboxID=${src.sandboxID}`, { key: other.key }), 200)).toEqual([]);
    await expectError(call("/snapshots?limit=0", { key: team.key }), 400);
    await expectError(call("/snapshots?nextToken=%25%25", { key: team.key }), 400, /nextToken/);
    await expectError(call("/snapshots", { key: null }), 401);
  });

  it("a new snapshot of a name replaces the old, whose files the agent is asked to free; delete frees it and a create from it is then a 404", async () => {
    const src = await create();
    await expectStatus(snapshot(src.sandboxID, { name: "rolling" }), 201);
    const first = lastIntent(src.sandboxID).snapshot!.id;
    const again = await expectStatus(snapshot(src.sandboxID, { name: "rolling" }), 201);
    const second = lastIntent(src.sandboxID).snapshot!.id;
    await agent.waitUntil(() => agent.snapshotDeletes.includes(first));
    expect((await expectStatus(call("/snapshots?name=rolling", { key: team.key }), 200)).length).toBe(1);
    await expectError(call(`/templates/${encodeURIComponent(again.snapshotID)}`, { key: other.key, method: "DELETE" }), 404);
    await expectStatus(call(`/templates/${encodeURIComponent(again.snapshotID)}`, { key: team.key, method: "DELETE" }), 204);
    await agent.waitUntil(() => agent.snapshotDeletes.includes(second));
    await expectError(call(`/templates/${encodeURIComponent(again.snapshotID)}`, { key: team.key, method: "DELETE" }), 404, /not found/);
    await expectError(call("/v2/sandboxes", { key: team.key, body: { templateID: again.snapshotID } }), 404);
    // A template is not a snapshot: its delete goes on to the template route (the template stays
    // here, so another team's delete of it is that route's 404).
    await expectError(call(`/templates/${team.template}`, { key: other.key, method: "DELETE" }), 404, /not found/);
  });
});

describe("fork", () => {
  it("snapshots once, creates count sandboxes from it, frees the snapshot; 404 for another team's", async () => {
    const src = await create();
    const res = await expectStatus(call(`/sandboxes/${src.sandboxID}/fork`, { key: team.key, body: { count: 2, timeout: 30 } }), 201);
    expect(res).toHaveLength(2);
    const snaps = agent.received.filter((r) => r.intent.sandboxId === src.sandboxID && r.intent.snapshot);
    expect(snaps).toHaveLength(1);
    const snapId = snaps[0]!.intent.snapshot!.id;
    for (const f of res) expect(lastIntent(f.sandbox.sandboxID).restoreFrom).toEqual({ id: snapId });
    await agent.waitUntil(() => agent.snapshotDeletes.includes(snapId));
    await expectError(call(`/sandboxes/${src.sandboxID}/fork`, { key: other.key, body: {} }), 404);
    await expectError(call(`/sandboxes/${src.sandboxID}/fork`, { key: team.key, body: { count: 101 } }), 400, /count/);
  });
});
