// Tenancy through the real e2b JS SDK against the whole local system (issue 10.4 and 10.5): the
// team owns its sandboxes (another key of it lists, drives and kills them, also after the creating
// key is deleted; another team gets not-found) and the team's quota answers the SDK with its 429,
// for a create over its running sandboxes and for a pause over its paused ones.
import { RateLimitError, Sandbox, SandboxNotFoundError } from "e2b";
import { afterAll, describe, expect, it } from "vitest";
import { e2b, uniqueTag } from "./sdk.ts";

const created: string[] = [];
afterAll(async () => {
  await Promise.all(created.map((id) => Sandbox.kill(id, e2b()).catch(() => false)));
});

/** An HTTP call with the admin key (e2b().apiKey), or with `key`. */
async function api(path: string, init: { method?: string; body?: unknown; key?: string } = {}): Promise<any> {
  const res = await fetch(`${e2b().apiUrl}${path}`, {
    method: init.method ?? (init.body === undefined ? "GET" : "POST"),
    headers: { "x-api-key": init.key ?? e2b().apiKey, "content-type": "application/json" },
    body: init.body === undefined ? undefined : JSON.stringify(init.body),
  });
  const text = await res.text();
  if (!res.ok) throw new Error(`${path}: ${res.status} ${text}`);
  return text ? JSON.parse(text) : null;
}

async function create(apiKey: string): Promise<Sandbox> {
  const sbx = await Sandbox.create({ ...e2b(), apiKey });
  created.push(sbx.sandboxId);
  return sbx;
}

describe("tenancy", () => {
  it("the team owns its sandboxes and its quota: another key drives them, a stranger gets not-found, the SDK gets the 429", async () => {
    const team = uniqueTag();
    const first = await api("/api-keys", { body: { name: "first", teamName: team } });
    const second = await api("/api-keys", { key: first.key, body: { name: "second" } });
    const stranger = await api("/api-keys", { body: { name: "stranger", teamName: uniqueTag() } });
    await api(`/admin/teams/${team}/quota`, { method: "PUT", body: { runningSandboxes: 2 } });

    const a = await create(first.key);
    const b = await create(first.key);
    const refused = await Sandbox.create({ ...e2b(), apiKey: second.key }).catch((err: unknown) => err);
    expect(refused).toBeInstanceOf(RateLimitError);
    expect(String((refused as Error).message)).toContain(`team "${team}" has 2 of 2 running sandboxes (quota runningSandboxes)`);

    // Another key of the team: lists both, connects and runs a command (the data plane checks the
    // sandbox's token, not the key).
    const listed = await Sandbox.list({ ...e2b(), apiKey: second.key }).nextItems();
    expect(listed.map((s) => s.sandboxId).sort()).toEqual([a.sandboxId, b.sandboxId].sort());
    const viaSecond = await Sandbox.connect(a.sandboxId, { ...e2b(), apiKey: second.key });
    expect((await viaSecond.commands.run("echo team")).stdout.trim()).toBe("team");

    // Another team sees nothing of them.
    await expect(Sandbox.getInfo(a.sandboxId, { ...e2b(), apiKey: stranger.key })).rejects.toBeInstanceOf(SandboxNotFoundError);
    expect(await Sandbox.kill(a.sandboxId, { ...e2b(), apiKey: stranger.key })).toBe(false);
    expect(await Sandbox.list({ ...e2b(), apiKey: stranger.key }).nextItems()).toEqual([]);

    // The creating key goes; the team keeps its sandboxes, and a kill frees a slot at once.
    await api(`/api-keys/${first.id}`, { method: "DELETE", key: second.key });
    expect(await Sandbox.kill(a.sandboxId, { ...e2b(), apiKey: second.key })).toBe(true);
    const c = await create(second.key);
    expect((await c.commands.run("echo again")).stdout.trim()).toBe("again");
    expect((await Sandbox.getInfo(b.sandboxId, { ...e2b(), apiKey: second.key })).state).toBe("running");
  });

  it("a pause over the team's paused-sandboxes quota is the SDK's RateLimitError, and the sandbox keeps running", async () => {
    const team = uniqueTag();
    const { key } = await api("/api-keys", { body: { name: "paused", teamName: team } });
    await api(`/admin/teams/${team}/quota`, { method: "PUT", body: { pausedSandboxes: 1 } });
    const a = await create(key);
    const b = await create(key);
    expect(await a.pause({ keepMemory: false })).toBe(true);
    const refused = await b.pause().catch((err: unknown) => err);
    expect(refused).toBeInstanceOf(RateLimitError);
    expect(String((refused as Error).message)).toContain(`team "${team}" has 1 of 1 paused sandboxes (quota pausedSandboxes)`);
    expect((await b.commands.run("echo still running")).stdout.trim()).toBe("still running");
    // A kill of the paused one frees its slot at once.
    expect(await Sandbox.kill(a.sandboxId, { ...e2b(), apiKey: key })).toBe(true);
    expect(await b.pause()).toBe(true);
    expect((await Sandbox.getInfo(b.sandboxId, { ...e2b(), apiKey: key })).state).toBe("paused");
  });
});
