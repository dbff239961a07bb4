// Snapshots and fork through the real e2b JS SDK against the whole local system (issue 11.5):
// createSnapshot with a name, sandboxes from it (each its own id, token and hostname) see the files
// as they were and not later writes, listSnapshots with its filters and pages, fork in both forms,
// another team's snapshot is not found, an agent restart between snapshot and create, a memory
// snapshot is a 501 that says why, deleteSnapshot frees the files and leaves the sandboxes made
// from it intact. Its own system, because it restarts the agent.
import { Sandbox, SandboxNotFoundError } from "e2b";
import { existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startSystem, type System } from "../../scripts/lib/system.ts";
import { uniqueTag } from "./sdk.ts";

let sys: System;
let dataDir: string;
let team: string;
let key: string;
let strangerKey: string;
const created: string[] = [];
const opts = (apiKey = key) => ({ apiKey, apiUrl: sys.apiUrl, sandboxUrl: sys.apiUrl, requestTimeoutMs: 60_000 });
const snapshotDir = () => join(dataDir, "agent", "local", "snapshots");

async function api(path: string, init: { method?: string; body?: unknown; key?: string } = {}): Promise<Response> {
  return fetch(`${sys.apiUrl}${path}`, {
    method: init.method ?? (init.body === undefined ? "GET" : "POST"),
    headers: { "x-api-key": init.key ?? sys.apiKey, "content-type": "application/json" },
    body: init.body === undefined ? undefined : JSON.stringify(init.body),
  });
}

async function create(template: string, apiKey = key): Promise<Sandbox> {
  const sbx = await Sandbox.create(template, opts(apiKey));
  created.push(sbx.sandboxId);
  return sbx;
}

const read = async (sbx: Sandbox, script: string) => (await sbx.commands.run(script)).stdout;

beforeAll(async () => {
  dataDir = mkdtempSync(join(tmpdir(), "sbx-snap-"));
  sys = await startSystem({ dataDir, onExit: "destroy" });
  team = uniqueTag();
  key = ((await (await api("/api-keys", { body: { name: "snap", teamName: team } })).json()) as { key: string }).key;
  strangerKey = ((await (await api("/api-keys", { body: { name: "stranger", teamName: uniqueTag() } })).json()) as { key: string }).key;
}, 180_000);

afterAll(async () => {
  await Promise.all(created.map((id) => Sandbox.kill(id, opts()).catch(() => false)));
  await sys?.stop();
  rmSync(dataDir, { recursive: true, force: true });
}, 120_000);

describe("snapshots and fork", () => {
  let source: Sandbox;
  let snapshotId: string;

  it("createSnapshot (named) leaves the sandbox running; 3 sandboxes from it see its files as they were, each with its own id, token and hostname", async () => {
    source = await create("base");
    await source.files.write("/home/user/a.txt", "one");
    await source.commands.run("mkdir -p /home/user/dir && echo deep > /home/user/dir/d && echo t > /tmp/t");
    const snap = await source.createSnapshot({ name: "snap-x" });
    snapshotId = snap.snapshotId;
    expect(snap).toEqual({ snapshotId: `${team}/snap-x:default`, names: [`${team}/snap-x:default`] });
    // Written after the snapshot: not in it.
    await source.files.write("/home/user/a.txt", "two");
    await source.files.write("/home/user/b.txt", "later");
    expect(await source.isRunning()).toBe(true);

    const copies = await Promise.all([create(snapshotId), create(snapshotId), create(`snap-x`)]);
    expect(new Set(copies.map((c) => c.sandboxId)).size).toBe(3);
    for (const c of copies) {
      expect(c.sandboxId).not.toBe(source.sandboxId);
      expect(await c.files.read("/home/user/a.txt")).toBe("one");
      expect(await c.files.exists("/home/user/b.txt")).toBe(false);
      expect(await read(c, "cat /home/user/dir/d /tmp/t; cat /proc/sys/kernel/hostname")).toBe(`deep\nt\n${c.sandboxId}\n`);
    }
    // Separate copies: a write in one is not in another, nor in the source.
    await copies[0]!.files.write("/home/user/mine.txt", "mine");
    expect(await copies[1]!.files.exists("/home/user/mine.txt")).toBe(false);
    expect(await source.files.read("/home/user/a.txt")).toBe("two");
  });

  it("listSnapshots: all, per sandbox, by name, in pages; another team sees none and cannot use or delete it", async () => {
    const other = await create("base");
    const a = await other.createSnapshot();
    const b = await other.createSnapshot();
    expect(a.snapshotId).toMatch(/^[a-z0-9]{20}:default$/);
    expect(a.names).toEqual([]);
    const ids = async (p: ReturnType<typeof Sandbox.listSnapshots>) => {
      const out: string[] = [];
      while (p.hasNext) out.push(...(await p.nextItems()).map((s) => s.snapshotId));
      return out;
    };
    expect(await ids(Sandbox.listSnapshots(opts()))).toEqual([b.snapshotId, a.snapshotId, snapshotId]);
    expect(await ids(Sandbox.listSnapshots({ ...opts(), limit: 1 }))).toEqual([b.snapshotId, a.snapshotId, snapshotId]);
    expect(await ids(other.listSnapshots())).toEqual([b.snapshotId, a.snapshotId]);
    expect(await ids(Sandbox.listSnapshots({ ...opts(), sandboxId: source.sandboxId }))).toEqual([snapshotId]);
    expect(await ids(Sandbox.listSnapshots({ ...opts(), name: "snap-x" }))).toEqual([snapshotId]);
    expect(await ids(Sandbox.listSnapshots({ ...opts(), name: a.snapshotId }))).toEqual([a.snapshotId]);

    expect(await ids(Sandbox.listSnapshots(opts(strangerKey)))).toEqual([]);
    await expect(Sandbox.create(snapshotId, opts(strangerKey))).rejects.toThrow(/not found/i);
    await expect(Sandbox.create(a.snapshotId, opts(strangerKey))).rejects.toThrow(/not found/i);
    expect(await Sandbox.deleteSnapshot(a.snapshotId, opts(strangerKey))).toBe(false);
    await expect(Sandbox.createSnapshot(source.sandboxId, opts(strangerKey))).rejects.toBeInstanceOf(SandboxNotFoundError);
    expect(await Sandbox.deleteSnapshot(a.snapshotId, opts())).toBe(true);
    expect(await Sandbox.deleteSnapshot(b.snapshotId, opts())).toBe(true);
  });

  it("fork, instance and static: new sandboxes with the source's files as they are now; the source keeps running", async () => {
    const [one] = await source.fork();
    expect(one).toBeInstanceOf(Sandbox);
    const forked = [one as Sandbox, ...((await Sandbox.fork(source.sandboxId, { ...opts(), count: 2 })) as Sandbox[])];
    created.push(...forked.map((f) => f.sandboxId));
    expect(forked).toHaveLength(3);
    for (const f of forked) {
      expect(f).toBeInstanceOf(Sandbox);
      expect(await f.files.read("/home/user/a.txt")).toBe("two");
      expect(await f.files.read("/home/user/b.txt")).toBe("later");
    }
    expect(await read(source, "cat /home/user/a.txt")).toBe("two");
    // The fork's snapshot is not kept: nothing but the named one is listed.
    expect((await Sandbox.listSnapshots(opts()).nextItems()).map((s) => s.snapshotId)).toEqual([snapshotId]);
    await expect(Sandbox.fork("nosuchsandbox0000000", opts())).rejects.toBeInstanceOf(SandboxNotFoundError);
  });

  it("a memory snapshot is a 501 that says why; a bad name is a 400 naming it", async () => {
    const mem = await api(`/sandboxes/${source.sandboxId}/snapshots`, { key, body: { keepMemory: true } });
    expect(mem.status).toBe(501);
    expect(((await mem.json()) as { message: string }).message).toMatch(/CRIU .*6\.13/);
    const bad = await api(`/sandboxes/${source.sandboxId}/snapshots`, { key, body: { name: "Bad/Name" } });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { message: string }).message).toContain('name "Bad/Name"');
  });

  it("outlives an agent restart and its source sandbox", async () => {
    await source.kill();
    await sys.stopAgent("SIGKILL");
    await sys.startAgent();
    const after = await create(snapshotId);
    expect(await after.files.read("/home/user/a.txt")).toBe("one");
  });

  it("deleteSnapshot frees it; the sandboxes made from it keep their files; a create from it is then not found", async () => {
    const before = await create(snapshotId);
    const id = readdirSync(snapshotDir()).find((n) => !n.includes("."));
    expect(id).toBeDefined();
    expect(await Sandbox.deleteSnapshot(snapshotId, opts())).toBe(true);
    expect(await Sandbox.deleteSnapshot(snapshotId, opts())).toBe(false);
    await expect(Sandbox.create(snapshotId, opts())).rejects.toThrow(/404: .* not found/);
    await expect.poll(() => existsSync(join(snapshotDir(), id!)), { timeout: 10_000 }).toBe(false);
    expect(await before.files.read("/home/user/a.txt")).toBe("one");
  });
});
