// The data plane through the edge's gateway: envd traffic (commands, files, watch, PTY) and user
// ports, with the real e2b JS SDK (shared reference e2b-protocol.md §5.4 items 1–18, 25, 26).
import { CommandExitError, FileType, Sandbox, TimeoutError } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { getWithHost } from "./host-request.ts";
import { e2b, sleep } from "./sdk.ts";

let sbx: Sandbox;
beforeAll(async () => {
  sbx = await Sandbox.create({ ...e2b(), envs: { FOO: "bar" } });
});
afterAll(async () => {
  await sbx?.kill().catch(() => false);
});

describe("commands through the gateway", () => {
  it("runs a command and returns its output", async () => {
    const r = await sbx.commands.run('echo "Hello, World!"');
    expect(r).toMatchObject({ exitCode: 0, stdout: "Hello, World!\n", stderr: "" });
  });

  it("rejects a non-zero exit with CommandExitError", async () => {
    const err = await sbx.commands.run("echo out; echo err >&2; exit 3").catch((e: unknown) => e);
    expect(err).toBeInstanceOf(CommandExitError);
    expect(err).toMatchObject({ exitCode: 3, stdout: "out\n", stderr: "err\n", error: "exit status 3" });
  });

  it("streams output incrementally", async () => {
    const seen: string[] = [];
    await sbx.commands.run("for i in 1 2 3; do echo $i; sleep 0.2; done", { onStdout: (d) => void seen.push(d) });
    expect(seen.join("")).toBe("1\n2\n3\n");
    expect(seen.length).toBeGreaterThanOrEqual(2);
  });

  it("applies sandbox env, per-command env and cwd", async () => {
    expect((await sbx.commands.run("echo $FOO")).stdout).toBe("bar\n");
    expect((await sbx.commands.run("echo $ONLY", { envs: { ONLY: "here" } })).stdout).toBe("here\n");
    expect((await sbx.commands.run("echo $ONLY")).stdout).toBe("\n");
    expect((await sbx.commands.run("pwd", { cwd: "/tmp" })).stdout).toBe("/tmp\n");
  });

  it("runs as the default user, or root when asked", async () => {
    expect((await sbx.commands.run("whoami")).stdout).toBe("user\n");
    expect((await sbx.commands.run("whoami", { user: "root" })).stdout).toBe("root\n");
  });

  it("times out, kills, lists and connects to background commands", async () => {
    await expect(sbx.commands.run("sleep 10", { timeoutMs: 1_000 })).rejects.toThrow();
    const a = await sbx.commands.run("sleep 30", { background: true });
    const b = await sbx.commands.run("sleep 30", { background: true });
    const pids = (await sbx.commands.list()).map((p) => p.pid);
    expect(pids).toEqual(expect.arrayContaining([a.pid, b.pid]));
    const again = await sbx.commands.connect(a.pid);
    expect(again.pid).toBe(a.pid);
    expect(await sbx.commands.kill(a.pid)).toBe(true);
    expect(await sbx.commands.kill(b.pid)).toBe(true);
    expect(await sbx.commands.kill(999_999)).toBe(false);
  });

  it("feeds stdin and closes it", async () => {
    const cat = await sbx.commands.run("cat", { background: true, stdin: true });
    await sbx.commands.sendStdin(cat.pid, "Hello, World!");
    const deadline = Date.now() + 2_500;
    while (cat.stdout !== "Hello, World!" && Date.now() < deadline) await sleep(50);
    expect(cat.stdout).toBe("Hello, World!");
    await sbx.commands.closeStdin(cat.pid);
    const done = await cat.wait();
    expect(done.exitCode).toBe(0);
  });
});

describe("files through the gateway", () => {
  it("writes, reads, lists, renames and removes files", async () => {
    const info = await sbx.files.write("test_write.txt", "first");
    expect(info).toMatchObject({ name: "test_write.txt", type: "file", path: "/home/user/test_write.txt" });
    await sbx.files.write("test_write.txt", "second");
    expect(await sbx.files.read("test_write.txt")).toBe("second");
    await sbx.files.write("/home/user/deep/er/f.txt", "nested");
    expect(await sbx.files.read("/home/user/deep/er/f.txt")).toBe("nested");

    const entries = await sbx.files.list("/home/user/deep");
    expect(entries.map((e) => [e.name, e.type])).toEqual([["er", FileType.DIR]]);
    const moved = await sbx.files.rename("/home/user/deep/er/f.txt", "/home/user/deep/g.txt");
    expect(moved.path).toBe("/home/user/deep/g.txt");
    await sbx.files.remove("/home/user/deep/g.txt");
    expect(await sbx.files.exists("/home/user/deep/g.txt")).toBe(false);
    await sbx.files.remove("/home/user/never-was.txt");
    expect(await sbx.files.makeDir("/home/user/made")).toBe(true);
    expect(await sbx.files.makeDir("/home/user/made")).toBe(false);
  });

  it("round-trips a binary file of several MB byte for byte", async () => {
    const data = new Uint8Array(5 * 1024 * 1024);
    for (let i = 0; i < data.length; i++) data[i] = (i * 7919) & 0xff;
    await sbx.files.write("/home/user/blob.bin", data.buffer);
    const back = await sbx.files.read("/home/user/blob.bin", { format: "bytes" });
    expect(back.length).toBe(data.length);
    expect(Buffer.from(back).equals(Buffer.from(data))).toBe(true);
  });

  it("reports a missing file as FileNotFoundError", async () => {
    await expect(sbx.files.read("/home/user/nope.txt")).rejects.toThrow(/does not exist|not found/i);
  });

  it("watches a directory", async () => {
    await sbx.files.makeDir("/home/user/watched");
    const events: { type: string; name: string }[] = [];
    const handle = await sbx.files.watchDir("/home/user/watched", (e) => void events.push({ type: e.type, name: e.name }));
    await sbx.files.write("/home/user/watched/f.txt", "x");
    const deadline = Date.now() + 5_000;
    while (!events.some((e) => e.name === "f.txt") && Date.now() < deadline) await sleep(50);
    await handle.stop();
    expect(events.some((e) => e.name === "f.txt")).toBe(true);
  });

  it("serves signed download and upload URLs to clients without headers", async () => {
    await sbx.files.write("/home/user/hello.txt", "signed hello");
    const url = await sbx.downloadUrl("/home/user/hello.txt");
    const res = await fetch(url);
    expect(res.status).toBe(200);
    expect(await res.text()).toBe("signed hello");

    const tampered = new URL(url);
    tampered.searchParams.set("path", "/home/user/other.txt");
    expect((await fetch(tampered)).status).toBe(401);

    const up = await sbx.uploadUrl("/home/user/uploaded.txt");
    const form = new FormData();
    form.append("file", new Blob(["via signed upload"]), "uploaded.txt");
    const posted = await fetch(up, { method: "POST", body: form });
    expect(posted.status).toBe(200);
    expect(await sbx.files.read("/home/user/uploaded.txt")).toBe("via signed upload");
  });
});

describe("PTY through the gateway", () => {
  it("runs an interactive shell, resizes it, and sees input echoed", async () => {
    let out = "";
    const dec = new TextDecoder();
    const pty = await sbx.pty.create({ cols: 80, rows: 24, envs: { ABC: "123" }, onData: (d) => void (out += dec.decode(d)) });
    await sbx.pty.sendInput(pty.pid, new TextEncoder().encode("echo $ABC; tput cols\n"));
    let deadline = Date.now() + 5_000;
    while (!(out.includes("123") && out.includes("80")) && Date.now() < deadline) await sleep(50);
    expect(out).toContain("123");
    await sbx.pty.resize(pty.pid, { cols: 100, rows: 24 });
    out = "";
    await sbx.pty.sendInput(pty.pid, new TextEncoder().encode("tput cols\nexit\n"));
    const result = await pty.wait();
    expect(result.exitCode).toBe(0);
    expect(out).toContain("100");
  });
});

describe("gateway security and routing", () => {
  it("answers a wrong access token with 401 JSON and an unknown sandbox with 502", async () => {
    const { apiUrl } = e2b();
    const wrong = await fetch(`${apiUrl}/process.Process/List`, {
      method: "POST",
      headers: { "content-type": "application/json", "e2b-sandbox-id": sbx.sandboxId, "e2b-sandbox-port": "49983", "x-access-token": "nope" },
      body: "{}",
    });
    expect(wrong.status).toBe(401);
    expect(await wrong.json()).toMatchObject({ code: 401 });

    const unknown = await fetch(`${apiUrl}/health`, { headers: { "e2b-sandbox-id": "doesnotexist0000", "e2b-sandbox-port": "49983" } });
    expect(unknown.status).toBe(502);
    expect(await unknown.json()).toEqual({ sandboxId: "doesnotexist0000", message: "The sandbox was not found", code: 502 });
  });

  it("reaches a user port through {port}-{id} host routing", async () => {
    await sbx.files.write("/home/user/www/index.html", "hello from port 8000");
    await sbx.commands.run("cd /home/user/www && python3 -m http.server 8000 >/dev/null 2>&1", { background: true });
    const { apiUrl } = e2b();
    const host = sbx.getHost(8000);
    expect(host).toBe(`8000-${sbx.sandboxId}.${sbx.sandboxDomain}`);
    // What a browser sends for https://8000-<id>.<domain>/ once DNS points at the edge.
    let res: { status: number; body: string } | undefined;
    const deadline = Date.now() + 10_000;
    while (Date.now() < deadline) {
      res = await getWithHost(`${apiUrl}/index.html`, host);
      if (res.status === 200) break;
      await sleep(200);
    }
    expect(res).toEqual({ status: 200, body: "hello from port 8000" });
  });

  it("cuts open streams when the sandbox is killed, and the SDK reports it killed", async () => {
    const victim = await Sandbox.create(e2b());
    let ticks = 0;
    const handle = await victim.commands.run("while true; do echo tick; sleep 0.2; done", { background: true, onStdout: () => void ticks++ });
    while (ticks === 0) await sleep(50);
    await Sandbox.kill(victim.sandboxId, e2b());
    const err = await handle.wait().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TimeoutError);
    // As against E2B: the connection itself is cut (undici's "terminated"), then the SDK's health
    // probe hears the 502 "not found".
    expect(String((err as Error).message)).toMatch(/terminated: The sandbox was killed or reached its end of life/);
  });
});
