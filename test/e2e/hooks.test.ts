// Lifecycle hooks of a template, through the real e2b SDK against the whole local system: a
// prePause exec hook that fails keeps the sandbox running and the pause answers 409 with the
// hook's output (the SDK's pause reports false); once the hook passes the sandbox pauses, and
// a resume runs postResume inside it. Each run is a condition on the sandbox (admin view).
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { waitFor } from "../support/wait-for.ts";
import { e2b, uniqueTag } from "./sdk.ts";

const template = `hooks${uniqueTag()}`;
let sbx: Sandbox;

function api(path: string, init: { method?: string; body?: unknown } = {}) {
  const { apiUrl, apiKey } = inject("e2b");
  return fetch(new URL(path, apiUrl), {
    method: init.method ?? "GET",
    headers: { "content-type": "application/json", "x-api-key": apiKey },
    body: init.body === undefined ? undefined : JSON.stringify(init.body),
  });
}

beforeAll(async () => {
  const prePause = "if [ -e /tmp/idle ]; then echo flushed > /tmp/pre-pause; else echo 'busy: a job is running' >&2; exit 3; fi";
  const res = await api(`/admin/teams/admin/templates/${template}`, {
    method: "PUT",
    body: {
      spec: {
        replicas: 0,
        lifecycle: {
          prePause: { exec: { command: ["sh", "-c", prePause] }, timeoutSeconds: 20 },
          postResume: { exec: { command: ["sh", "-c", "echo resumed >> /tmp/post-resume"] }, failurePolicy: "Ignore" },
        },
      },
    },
  });
  expect(res.status, await res.text()).toBeLessThan(300);
  sbx = await Sandbox.create(template, e2b());
});

afterAll(async () => {
  await sbx?.kill().catch(() => false);
  await api(`/admin/teams/admin/templates/${template}`, { method: "DELETE" });
});

const conditions = async () => (await (await api(`/admin/sandboxes/${sbx.sandboxId}`)).json()).conditions as { type: string; status: string; reason: string; message: string }[];

describe("lifecycle hooks", () => {
  it("a failing prePause (Fail) keeps the sandbox running and the pause gets 409 with the hook's message", async () => {
    const res = await api(`/sandboxes/${sbx.sandboxId}/pause`, { method: "POST", body: {} });
    expect(res.status).toBe(409);
    const body = (await res.json()) as { code: number; message: string };
    expect(body.message).toContain("prePause hook failed: exit code 3");
    expect(body.message).toContain("busy: a job is running");
    expect(await sbx.pause()).toBe(false); // the SDK reads any 409 as "not paused"
    expect(await sbx.isRunning()).toBe(true);
    expect((await sbx.commands.run("echo still here")).stdout.trim()).toBe("still here");
    expect(await conditions()).toContainEqual(expect.objectContaining({ type: "PrePauseHook", status: "False", reason: "Failed" }));
  });

  it("a passing prePause lets the pause go on; a resume runs postResume inside the sandbox", async () => {
    await sbx.files.write("/tmp/idle", "");
    expect(await sbx.pause()).toBe(true);
    expect((await Sandbox.getInfo(sbx.sandboxId, e2b())).state).toBe("paused");
    expect(await conditions()).toContainEqual(expect.objectContaining({ type: "PrePauseHook", status: "True", reason: "Succeeded" }));

    const resumed = await Sandbox.connect(sbx.sandboxId, e2b());
    expect(await resumed.isRunning()).toBe(true);
    expect((await resumed.files.read("/tmp/pre-pause")).trim()).toBe("flushed");
    expect((await resumed.files.read("/tmp/post-resume")).trim()).toBe("resumed");
    expect(await conditions()).toContainEqual(expect.objectContaining({ type: "PostResumeHook", status: "True", reason: "Succeeded" }));
  });

  it("a wake on traffic runs postResume too", async () => {
    const woke = await Sandbox.create(template, { ...e2b(), lifecycle: { onTimeout: "pause", autoResume: true } });
    try {
      await woke.files.write("/tmp/idle", "");
      expect(await woke.pause()).toBe(true);
      expect((await woke.files.read("/tmp/idle")).trim()).toBe(""); // plain traffic wakes it
      await waitFor(async () => (await woke.files.read("/tmp/post-resume")).trim() === "resumed", { what: "postResume after the wake" });
    } finally {
      await woke.kill().catch(() => false);
    }
  });

  it("a prePause that outlives its timeoutSeconds fails as Timeout: the pause gets 409, the sandbox keeps running, and the run is a Warning step on its event list", async () => {
    const slow = `${template}t`;
    const put = await api(`/admin/teams/admin/templates/${slow}`, { method: "PUT", body: { spec: { replicas: 0, lifecycle: { prePause: { exec: { command: ["sh", "-c", "sleep 30"] }, timeoutSeconds: 1 } } } } });
    expect(put.status, await put.text()).toBeLessThan(300);
    const s = await Sandbox.create(slow, e2b());
    try {
      const res = await api(`/sandboxes/${s.sandboxId}/pause`, { method: "POST", body: {} });
      expect(res.status).toBe(409);
      expect(((await res.json()) as { message: string }).message).toContain("prePause hook failed: did not finish within 1 s");
      expect(await s.isRunning()).toBe(true);
      const view = (await (await api(`/admin/sandboxes/${s.sandboxId}`)).json()) as { conditions: { type: string; reason: string }[]; events: { reason: string; type: string; message: string; source: string }[] };
      expect(view.conditions).toContainEqual(expect.objectContaining({ type: "PrePauseHook", reason: "Timeout" }));
      expect(view.events).toContainEqual(expect.objectContaining({ reason: "PrePauseHook", type: "Warning", source: "lifecycle hook", message: expect.stringContaining("Timeout") }));
    } finally {
      await s.kill().catch(() => false);
      await api(`/admin/teams/admin/templates/${slow}`, { method: "DELETE" });
    }
  });

  it("an http hook's redirect is its answer, never followed: the edge sends nothing (nor the sandbox's token) where the sandbox pointed it", async () => {
    // A host-side server the sandbox names in its 307: what reaches it is what the edge followed.
    const reached: string[] = [];
    const host = createServer((req, res) => {
      reached.push(`${req.method} ${req.url} token=${req.headers["x-access-token"] ?? "-"}`);
      res.end("ok");
    });
    await new Promise<void>((r) => host.listen(0, "127.0.0.1", r));
    const hostUrl = `http://127.0.0.1:${(host.address() as AddressInfo).port}/leak`;
    const redirecting = `hooksredir${uniqueTag()}`;
    let s: Sandbox | undefined;
    try {
      const put = await api(`/admin/teams/admin/templates/${redirecting}`, { method: "PUT", body: { spec: { replicas: 0, lifecycle: { prePause: { http: { port: 8080, path: "/flush" }, timeoutSeconds: 20 } } } } });
      expect(put.status, await put.text()).toBeLessThan(300);
      s = await Sandbox.create(redirecting, e2b());
      const server = `import http.server\nclass H(http.server.BaseHTTPRequestHandler):\n    def do_GET(self):\n        self.send_response(307); self.send_header('Location', '${hostUrl}'); self.end_headers()\nhttp.server.HTTPServer(('0.0.0.0', 8080), H).serve_forever()\n`;
      await s.files.write("/tmp/redirect.py", server);
      await s.commands.run("python3 /tmp/redirect.py", { background: true });
      await waitFor(async () => (await s!.commands.run("curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8080/ || true")).stdout.trim() === "307", { what: "the sandbox's port 8080", timeoutMs: 15_000, intervalMs: 200 });
      const res = await api(`/sandboxes/${s.sandboxId}/pause`, { method: "POST", body: {} });
      expect(res.status, await res.text()).toBeLessThan(300);
      const hook = (await (await api(`/admin/sandboxes/${s.sandboxId}`)).json()).conditions.find((c: { type: string }) => c.type === "PrePauseHook");
      expect(hook).toMatchObject({ status: "True", reason: "Succeeded" });
      expect(hook.message).toContain("HTTP 307");
      expect(reached).toEqual([]);
    } finally {
      await s?.kill().catch(() => false);
      await api(`/admin/teams/admin/templates/${redirecting}`, { method: "DELETE" });
      host.close();
    }
  });

  it("refuses a hook with both exec and http, or neither, with a 400", async () => {
    for (const hook of [{ exec: { command: ["true"] }, http: { port: 8080 } }, { timeoutSeconds: 5 }]) {
      const res = await api(`/admin/teams/admin/templates/${template}`, { method: "PUT", body: { spec: { lifecycle: { prePause: hook } } } });
      expect(res.status).toBe(400);
    }
  });
});
