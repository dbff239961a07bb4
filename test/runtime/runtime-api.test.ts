// The runtime as the agent embeds it (many sandboxes, routed by E2b-Sandbox-Id) and as a
// standalone program (main.ts over a Unix socket).
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { request } from "node:http";
import { connect } from "node:net";
import { once } from "node:events";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { TimeoutError } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startHarness, type Harness } from "./support/harness.ts";
import { unaryCall } from "./support/connect-wire.ts";

let h: Harness;
beforeAll(async () => {
  h = await startHarness();
});
afterAll(() => h?.close());

describe("many sandboxes in one runtime", () => {
  it("routes by E2b-Sandbox-Id: each sandbox has its own token and env", async () => {
    const a = await h.create({ envs: { WHO: "a" } });
    const b = await h.create({ envs: { WHO: "b" } });
    expect((await a.commands.run("echo $WHO")).stdout).toBe("a\n");
    expect((await b.commands.run("echo $WHO")).stdout).toBe("b\n");
    const aToken = h.runtime.getSandbox(a.sandboxId)!.accessToken!;
    const cross = await unaryCall(h.runtimeUrl, "process.Process/List", {}, { "e2b-sandbox-id": b.sandboxId, "x-access-token": aToken });
    expect(cross.status).toBe(401);
  });

  it("processes of one sandbox are invisible to another", async () => {
    const a = await h.create();
    const b = await h.create();
    const p = await a.commands.run("sleep 20", { background: true });
    expect((await b.commands.list()).map((x) => x.pid)).not.toContain(p.pid);
    expect(await b.commands.kill(p.pid)).toBe(false);
    await p.kill();
  });

  it("an unknown sandbox gets 502, which the SDK reads as not running", async () => {
    const res = await fetch(`${h.runtimeUrl}/health`, { headers: { "e2b-sandbox-id": "nosuchsandbox" } });
    expect(res.status).toBe(502);
    expect(await res.json()).toEqual({ sandboxId: "nosuchsandbox", message: "The sandbox was not found", code: 502 });
  });

  it("removing a sandbox cuts its open streams: wait() reports the sandbox was killed", async () => {
    const sbx = await h.create();
    expect(await sbx.isRunning()).toBe(true);
    const handle = await sbx.commands.run("sleep 60", { background: true });
    const waiting = handle.wait().catch((e) => e);
    await new Promise((r) => setTimeout(r, 100));
    expect(await sbx.kill()).toBe(true);
    const err = await waiting;
    expect(err).toBeInstanceOf(TimeoutError);
    expect(err.message).toContain("sandbox was killed or reached its end of life");
    expect(await sbx.isRunning()).toBe(false);
  });

  it("freeze stops the sandbox's processes and thaw resumes them", async () => {
    const sbx = await h.create();
    const file = `/tmp/rt-freeze-${sbx.sandboxId}`;
    await sbx.commands.run(`while true; do echo x >> ${file}; sleep 0.05; done`, { background: true });
    await new Promise((r) => setTimeout(r, 300));
    await h.runtime.freeze(sbx.sandboxId);
    await new Promise((r) => setTimeout(r, 100));
    const frozen = readFileSync(file, "utf8").length;
    await new Promise((r) => setTimeout(r, 400));
    expect(readFileSync(file, "utf8").length).toBe(frozen);
    await h.runtime.thaw(sbx.sandboxId);
    await expect.poll(() => readFileSync(file, "utf8").length, { timeout: 2000 }).toBeGreaterThan(frozen);
    rmSync(file, { force: true });
  });
});

function viaSocket(socketPath: string, method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ socketPath, method, path, headers: { "content-type": "application/json", ...headers } }, (res) => {
      let text = "";
      res.on("data", (d) => (text += d));
      res.on("end", () => resolve({ status: res.statusCode!, body: text }));
    });
    req.on("error", reject);
    req.end(body === undefined ? undefined : JSON.stringify(body));
  });
}

describe("standalone main.ts on a Unix socket", () => {
  let child: ChildProcess;
  let dir: string;
  let sock: string;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "rt-sock-"));
    sock = join(dir, "runtime.sock");
    child = spawn(process.execPath, ["controllers/runtime/main.ts", "--socket", sock], { stdio: ["ignore", "pipe", "inherit"] });
    await new Promise<void>((resolve, reject) => {
      child.stdout!.on("data", (d) => String(d).includes("listening") && resolve());
      child.once("exit", (code) => reject(new Error(`runtime exited ${code}`)));
    });
  });
  afterAll(() => {
    child?.kill("SIGTERM");
    rmSync(dir, { recursive: true, force: true });
  });

  it("serves health and applies /init idempotently by timestamp", async () => {
    expect((await viaSocket(sock, "GET", "/health")).status).toBe(204);
    const init = { accessToken: "secret-1", envVars: { A: "1" }, defaultUser: "user", timestamp: "2026-01-01T00:00:10Z" };
    expect((await viaSocket(sock, "POST", "/init", init)).status).toBe(204);
    expect((await viaSocket(sock, "GET", "/envs")).status).toBe(401);
    const auth = { "x-access-token": "secret-1" };
    expect(JSON.parse((await viaSocket(sock, "GET", "/envs", undefined, auth)).body)).toEqual({ A: "1" });
    const stale = { accessToken: "secret-1", envVars: { A: "old" }, timestamp: "2026-01-01T00:00:05Z" };
    expect((await viaSocket(sock, "POST", "/init", stale, auth)).status).toBe(204);
    expect(JSON.parse((await viaSocket(sock, "GET", "/envs", undefined, auth)).body)).toEqual({ A: "1" });
    expect((await viaSocket(sock, "POST", "/init", { timestamp: "yesterday" }, auth)).status).toBe(400);
    expect((await viaSocket(sock, "POST", "/init", { accessToken: "hijack" })).status).toBe(401);
  });

  it("reports metrics in envd's shape", async () => {
    const r = await viaSocket(sock, "GET", "/metrics", undefined, { "x-access-token": "secret-1" });
    const m = JSON.parse(r.body);
    for (const k of ["ts", "cpu_count", "cpu_used_pct", "mem_total", "mem_used", "mem_cache", "mem_total_mib", "mem_used_mib", "disk_used", "disk_total"]) {
      expect(typeof m[k], k).toBe("number");
    }
    expect(m.mem_total).toBeGreaterThan(m.mem_used);
  });
});

describe("standalone main.ts with --interpreter-port (a pod whose template has the interpreter)", () => {
  let child: ChildProcess;
  let dir: string;
  let url: string;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "rt-ci-"));
    child = spawn(process.execPath, ["controllers/runtime/main.ts", "--socket", join(dir, "runtime.sock"), "--host", "127.0.0.1", "--interpreter-port", "0"], { stdio: ["ignore", "pipe", "inherit"] });
    url = await new Promise<string>((resolve, reject) => {
      let out = "";
      child.stdout!.on("data", (d) => {
        out += String(d);
        const m = /code interpreter listening on (http:\/\/\S+)/.exec(out);
        if (m) resolve(m[1]!);
      });
      child.once("exit", (code) => reject(new Error(`runtime exited ${code}`)));
    });
  });
  afterAll(() => {
    child?.kill("SIGTERM");
    rmSync(dir, { recursive: true, force: true });
  });

  it("serves E2B's code interpreter API on that port for the one sandbox it is", async () => {
    expect(await (await fetch(`${url}/health`)).text()).toBe("OK");
    const res = await fetch(`${url}/execute`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ code: "echo hi from $(whoami)", language: "bash" }) });
    const lines = (await res.text()).trim().split("\n").map((l) => JSON.parse(l) as { type: string; text?: string });
    expect(lines.filter((l) => l.type === "stdout").map((l) => l.text).join("")).toBe("hi from user\n");
    expect(lines.at(-1)?.type).toBe("end_of_execution");
    expect((await fetch(`${url}/execute`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ code: "1", language: "cobol" }) })).status).toBe(400);
  });

  it("once /init set a token, runs code only for its holder: /execute without it or with a wrong one is envd's 401; the context routes take none (E2B's SDKs send none there) but refuse a wrong one (review24 F1)", async () => {
    expect((await viaSocket(join(dir, "runtime.sock"), "POST", "/init", { accessToken: "ci-token", timestamp: "2026-01-01T00:00:10Z" })).status).toBe(204);
    const cell = (headers: Record<string, string>) =>
      fetch(`${url}/execute`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify({ code: "echo ran", language: "bash" }) });
    for (const headers of [{}, { "x-access-token": "wrong" }, { "x-access-token": "" }] as Record<string, string>[]) {
      const refused = await cell(headers);
      expect(refused.status).toBe(401);
      expect(await refused.json()).toEqual({ code: 401, message: expect.stringMatching(/^unauthorized access/) });
    }
    const ran = await cell({ "x-access-token": "ci-token" });
    expect(ran.status).toBe(200);
    expect(await ran.text()).toContain('"text":"ran\\n"');
    expect((await fetch(`${url}/contexts`)).status).toBe(200);
    expect((await fetch(`${url}/contexts`, { headers: { "x-access-token": "ci-token" } })).status).toBe(200);
    expect((await fetch(`${url}/contexts`, { headers: { "x-access-token": "wrong" } })).status).toBe(401);
    expect((await fetch(`${url}/contexts`, { method: "POST", headers: { "content-type": "application/json", "x-access-token": "wrong" }, body: "{}" })).status).toBe(401);
    expect((await fetch(`${url}/contexts/any/restart`, { method: "POST", headers: { "x-access-token": "wrong" } })).status).toBe(401);
    expect(await (await fetch(`${url}/health`)).text()).toBe("OK");
  });
});

describe("an oversized JSON body (review L8)", () => {
  it("is answered 413 and the connection closed: the runtime stops reading what the client keeps sending", async () => {
    const sbx = await h.create();
    const token = h.runtime.getSandbox(sbx.sandboxId)!.accessToken!;
    const declared = 256 * (1 << 20);
    const sock = connect(Number(new URL(h.runtimeUrl).port), "127.0.0.1");
    sock.on("error", () => {}); // EPIPE / ECONNRESET while still sending: the close is the point
    await once(sock, "connect");
    let answer = "";
    sock.on("data", (c: Buffer) => (answer += c.toString("latin1")));
    const closed = new Promise<"closed">((r) => sock.once("close", () => r("closed")));
    sock.write(`POST /init HTTP/1.1\r\nHost: x\r\nE2b-Sandbox-Id: ${sbx.sandboxId}\r\nX-Access-Token: ${token}\r\nContent-Type: application/json\r\nContent-Length: ${declared}\r\n\r\n`);
    const chunk = Buffer.alloc(64 * 1024, 0x20);
    // The whole declared body, as fast as the runtime reads it: a runtime that drains it reads
    // all of it (and keeps the connection), one that stops reading closes first.
    const sending = (async () => {
      for (let sent = 0; sent < declared && !sock.destroyed; sent += chunk.length) {
        if (!sock.write(chunk)) await Promise.race([once(sock, "drain").catch(() => {}), closed]);
      }
      return sock.destroyed ? "closed" : "all sent";
    })();
    expect(await Promise.race([closed, sending])).toBe("closed");
    sock.destroy();
    expect(answer).toMatch(/^HTTP\/1\.1 413 /);
    expect(answer.toLowerCase()).toContain("connection: close");
  });
});
