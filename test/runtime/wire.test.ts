// The Connect wire contract of e2b-protocol.md §3.1, asserted on raw bytes.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { HostView } from "../../controllers/runtime/host-view.ts";
import { createRuntime, type Runtime } from "../../controllers/runtime/runtime.ts";
import { streamCall, unaryCall } from "./support/connect-wire.ts";

let runtime: Runtime;
let base: string;
const H = { "e2b-sandbox-id": "wire", "x-access-token": "tok" };
beforeAll(async () => {
  runtime = createRuntime();
  runtime.addSandbox("wire", new HostView(), { accessToken: "tok" });
  const server = await runtime.listen({ port: 0, host: "127.0.0.1" });
  base = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
});
afterAll(() => runtime?.close());

const bash = (script: string) => ({ process: { cmd: "/bin/bash", args: ["-c", script] }, stdin: false });

describe("server streaming", () => {
  it("Start: start first, data, end with Go status strings, then an empty end-stream frame", async () => {
    const r = await streamCall(base, "process.Process/Start", bash("echo hi; echo warn >&2; exit 3"), H);
    expect(r.status).toBe(200);
    expect(r.contentType).toBe("application/connect+json");
    const [first, ...rest] = r.envelopes;
    expect(first).toMatchObject({ flags: 0, json: { event: { start: { pid: expect.any(Number) } } } });
    const last = rest.pop()!;
    expect(last).toEqual({ flags: 2, json: {} });
    const end = rest.pop()!;
    expect(end.json).toEqual({ event: { end: { exitCode: 3, exited: true, status: "exit status 3", error: "exit status 3" } } });
    const data = rest.map((e) => e.json.event.data);
    expect(data).toContainEqual({ stdout: Buffer.from("hi\n").toString("base64") });
    expect(data).toContainEqual({ stderr: Buffer.from("warn\n").toString("base64") });
  });

  it("exit 0 omits exitCode and error, a signal gives -1 and exited false", async () => {
    const ok = await streamCall(base, "process.Process/Start", bash("true"), H);
    expect(ok.envelopes.at(-2)!.json).toEqual({ event: { end: { exited: true, status: "exit status 0" } } });
    const killed = await streamCall(base, "process.Process/Start", bash("kill -9 $$"), H);
    expect(killed.envelopes.at(-2)!.json).toEqual({ event: { end: { exitCode: -1, status: "signal: killed", error: "signal: killed" } } });
  });

  it("sends keepalives at Keepalive-Ping-Interval while the process is quiet", async () => {
    const r = await streamCall(base, "process.Process/Start", bash("sleep 2.3; echo done"), { ...H, "keepalive-ping-interval": "1" });
    const kinds = r.envelopes.slice(0, -1).map((e) => Object.keys(e.json.event)[0]);
    expect(kinds[0]).toBe("start");
    expect(kinds.filter((k) => k === "keepalive").length).toBeGreaterThanOrEqual(2);
    expect(kinds.indexOf("keepalive")).toBeLessThan(kinds.indexOf("data"));
  });

  it("Connect-Timeout-Ms is the process deadline: the stream ends deadline_exceeded and the process dies", async () => {
    const started = Date.now();
    const r = await streamCall(base, "process.Process/Start", bash("sleep 30"), { ...H, "connect-timeout-ms": "700" });
    expect(Date.now() - started).toBeLessThan(5000);
    const pid = r.envelopes[0]!.json.event.start.pid;
    expect(r.envelopes.at(-1)).toMatchObject({ flags: 2, json: { error: { code: "deadline_exceeded" } } });
    await expect.poll(() => { try { process.kill(pid, 0); return true; } catch { return false; } }, { timeout: 2000 }).toBe(false);
  });

  it("Connect on an exited process replays start and its retained end", async () => {
    const r = await streamCall(base, "process.Process/Start", bash("exit 7"), H);
    const pid = r.envelopes[0]!.json.event.start.pid;
    const again = await streamCall(base, "process.Process/Connect", { process: { pid } }, H);
    expect(again.envelopes.map((e) => e.json)).toEqual([
      { event: { start: { pid } } },
      { event: { end: { exitCode: 7, exited: true, status: "exit status 7", error: "exit status 7" } } },
      {},
    ]);
  });

  it("WatchDir on a missing directory ends with not_found in the end-stream frame", async () => {
    const r = await streamCall(base, "filesystem.Filesystem/WatchDir", { path: "/no/such/dir" }, H);
    expect(r.status).toBe(200);
    expect(r.envelopes).toEqual([{ flags: 2, json: { error: { code: "not_found", message: expect.stringContaining("/no/such/dir") } } }]);
  });
});

describe("unary errors carry the Connect code the SDK maps", () => {
  it.each([
    ["process.Process/SendSignal", { process: { pid: 999999 }, signal: "SIGNAL_SIGKILL" }, 404, "not_found"],
    ["filesystem.Filesystem/Stat", { path: "/no/such/file" }, 404, "not_found"],
    ["filesystem.Filesystem/MakeDir", { path: "/tmp" }, 409, "already_exists"],
    ["filesystem.Filesystem/ListDir", { path: "/etc/hostname" }, 400, "invalid_argument"],
    ["filesystem.Filesystem/GetWatcherEvents", { watcherId: "nope" }, 404, "not_found"],
  ])("%s", async (method, body, status, code) => {
    const r = await unaryCall(base, method, body, H);
    expect(r.status).toBe(status);
    expect(r.json.code).toBe(code);
  });

  it("an unknown user is unauthenticated, never internal", async () => {
    const r = await unaryCall(base, "filesystem.Filesystem/Stat", { path: "/" }, { ...H, authorization: `Basic ${Buffer.from("ghost:").toString("base64")}` });
    expect(r).toMatchObject({ status: 401, json: { code: "unauthenticated" } });
  });

  it("unknown JSON fields are ignored", async () => {
    const r = await unaryCall(base, "filesystem.Filesystem/Stat", { path: "/", someFutureField: 1 }, H);
    expect(r.status).toBe(200);
  });
});

describe("polling watcher", () => {
  it("CreateWatcher buffers events until GetWatcherEvents, RemoveWatcher ends it", async () => {
    const dir = (await import("node:fs")).mkdtempSync("/tmp/rt-poll-");
    const { json } = await unaryCall(base, "filesystem.Filesystem/CreateWatcher", { path: dir, includeEntry: true }, H);
    const watcherId = json.watcherId as string;
    (await import("node:fs")).writeFileSync(`${dir}/a.txt`, "x");
    await expect.poll(async () => (await unaryCall(base, "filesystem.Filesystem/GetWatcherEvents", { watcherId }, H)).json.events ?? [], { timeout: 3000 })
      .toContainEqual(expect.objectContaining({ name: "a.txt", type: "EVENT_TYPE_CREATE", entry: expect.objectContaining({ path: `${dir}/a.txt` }) }));
    expect((await unaryCall(base, "filesystem.Filesystem/RemoveWatcher", { watcherId }, H)).status).toBe(200);
    expect((await unaryCall(base, "filesystem.Filesystem/GetWatcherEvents", { watcherId }, H)).status).toBe(404);
  });
});

describe("client streaming and plain /files details", () => {
  it("StreamInput delivers ordered input to a process started with stdin", async () => {
    const { envelope } = await import("./support/connect-wire.ts");
    const started = fetch(`${base}/process.Process/Start`, {
      method: "POST",
      headers: { "content-type": "application/connect+json", "connect-protocol-version": "1", ...H },
      body: new Uint8Array(envelope({ process: { cmd: "/bin/cat" }, stdin: true })),
    });
    let pid: number | undefined;
    await expect.poll(async () => {
      pid = (await unaryCall(base, "process.Process/List", {}, H)).json.processes?.find((p: any) => p.config.cmd === "/bin/cat")?.pid;
      return pid;
    }).toBeDefined();
    const chunks = ["one ", "two ", "three"].map((t) => envelope({ data: { input: { stdin: Buffer.from(t).toString("base64") } } }));
    const body = Buffer.concat([envelope({ start: { process: { pid } } }), ...chunks]);
    const res = await fetch(`${base}/process.Process/StreamInput`, {
      method: "POST",
      headers: { "content-type": "application/connect+json", "connect-protocol-version": "1", ...H },
      body: new Uint8Array(body),
    });
    expect(res.status).toBe(200);
    await unaryCall(base, "process.Process/CloseStdin", { process: { pid } }, H);
    const { parseEnvelopes } = await import("./support/connect-wire.ts");
    const events = parseEnvelopes(Buffer.from(await (await started).arrayBuffer())).map((e) => e.json.event?.data?.stdout).filter(Boolean);
    expect(Buffer.concat(events.map((b: string) => Buffer.from(b, "base64"))).toString()).toBe("one two three");
  });

  it("GET /files serves a Range as 206 and HEAD without a body", async () => {
    const fs = await import("node:fs");
    const dir = fs.mkdtempSync("/tmp/rt-range-");
    fs.writeFileSync(`${dir}/r.txt`, "0123456789");
    const q = `path=${encodeURIComponent(`${dir}/r.txt`)}`;
    const part = await fetch(`${base}/files?${q}`, { headers: { ...H, range: "bytes=2-5" } });
    expect(part.status).toBe(206);
    expect(part.headers.get("content-range")).toBe("bytes 2-5/10");
    expect(await part.text()).toBe("2345");
    const head = await fetch(`${base}/files?${q}`, { method: "HEAD", headers: H });
    expect(head.status).toBe(200);
    expect(head.headers.get("content-length")).toBe("10");
    expect((await fetch(`${base}/files?${q}`, { headers: { ...H, range: "bytes=20-" } })).status).toBe(416);
    fs.rmSync(dir, { recursive: true });
  });

  it("multipart with a path query and two parts is refused as a duplicate", async () => {
    const form = new FormData();
    form.append("file", new Blob(["a"]), "a.txt");
    form.append("file", new Blob(["b"]), "b.txt");
    const res = await fetch(`${base}/files?path=/tmp/rt-dup.txt`, { method: "POST", headers: H, body: form });
    expect(res.status).toBe(400);
    expect((await res.json()).message).toMatch(/more than once/);
  });
});
