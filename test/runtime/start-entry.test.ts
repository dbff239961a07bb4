// The runtime as a pod runs it (k8s/Dockerfile, k8s/entrypoint.sh): the bundle, its V8 code cache
// written by start.cjs --write-code-cache, then start.cjs with the pod's node flags and
// allocator setting. start.cjs runs the bundle through a vm.Script, so the native add-ons the
// bundle leaves external (@napi-rs/xattr on every file write, @lydell/node-pty for a terminal)
// load through the main context's loader: the real e2b SDK drives each through that entry.
import { type ChildProcess, spawn } from "node:child_process";
import { mkdirSync, rmSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { bundleRuntime, RUNTIME_NODE_FLAGS, writeCodeCache } from "../../controllers/runtime/bundle.ts";
import { ENVD_VERSION } from "../../controllers/runtime/version.ts";

const ROOT = join(import.meta.dirname, "../..");
// Inside the checkout, as dist/runtime is in the image: the external add-ons resolve from the
// node_modules above it.
const dir = join(ROOT, ".cache", `runtime-start-${process.pid}`);
let runtime: ChildProcess;
let runtimeUrl: string;
let stderr = "";
let api: Server;
let sbx: Sandbox;

/** The control plane's one answer the SDK needs to bind a Sandbox to the runtime's URL. */
async function controlPlane(): Promise<string> {
  api = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      if (req.method === "POST" && req.url === "/v2/sandboxes") {
        res.writeHead(201, { "content-type": "application/json" }).end(JSON.stringify({ sandboxID: "start-entry", templateID: "base", clientID: "test", envdVersion: ENVD_VERSION }));
      } else res.writeHead(404, { "content-type": "application/json" }).end(JSON.stringify({ code: 404, message: "not here" }));
    });
  });
  await new Promise<void>((r) => api.listen(0, "127.0.0.1", r));
  return `http://127.0.0.1:${(api.address() as AddressInfo).port}`;
}

beforeAll(async () => {
  mkdirSync(dir, { recursive: true });
  const bundle = await bundleRuntime(join(dir, "main.cjs"));
  writeCodeCache(bundle);
  runtime = spawn(process.execPath, [...RUNTIME_NODE_FLAGS, join(dir, "start.cjs"), "--port", "0", "--host", "127.0.0.1"], {
    cwd: "/",
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, MALLOC_ARENA_MAX: "2", RUNTIME_CODE_CACHE_DEBUG: "1" },
  });
  runtime.stderr!.on("data", (d) => void (stderr += String(d)));
  runtimeUrl = await new Promise<string>((res, rej) => {
    runtime.stdout!.on("data", (d) => {
      const m = /listening on (http:\/\/\S+)/.exec(String(d));
      if (m) res(m[1]!);
    });
    runtime.once("exit", (code) => rej(new Error(`runtime exited ${code}: ${stderr}`)));
  });
  sbx = await Sandbox.create("base", { apiKey: `e2b_${"0".repeat(40)}`, apiUrl: await controlPlane(), sandboxUrl: runtimeUrl });
}, 120_000);

afterAll(async () => {
  if (runtime && runtime.exitCode === null) {
    const exited = new Promise((r) => runtime.once("exit", r));
    runtime.kill("SIGTERM");
    await exited;
  }
  api?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe("start.cjs, the runtime's entry in pods", () => {
  it("runs the bundle from the code cache the image build writes", async () => {
    expect(stderr).toContain("code cache: used");
    expect(stderr).not.toMatch(/Error|USE_MAIN_CONTEXT_DEFAULT_LOADER/);
    const health = await fetch(new URL("/health", runtimeUrl));
    expect(health.status).toBeLessThan(300);
  });

  it("runs a command and a terminal (node-pty through the main context's loader)", async () => {
    const r = await sbx.commands.run("echo from-the-$((6*7))-entry");
    expect(r.exitCode).toBe(0);
    expect(r.stdout).toBe("from-the-42-entry\n");
    let out = "";
    const d = new TextDecoder();
    const term = await sbx.pty.create({ cols: 80, rows: 24, onData: (b) => void (out += d.decode(b, { stream: true })) });
    await sbx.pty.sendInput(term.pid, new TextEncoder().encode("echo pty-$((40+2))\nexit\n"));
    expect((await term.wait()).exitCode).toBe(0);
    expect(out).toContain("pty-42");
  });

  it("writes a file with metadata as extended attributes (the xattr add-on) and reads it back", async () => {
    const path = join(dir, "written.txt");
    const w = await sbx.files.write(path, "through start.cjs", { metadata: { kind: "entry-test" } });
    expect(w.metadata).toEqual({ kind: "entry-test" });
    expect(await sbx.files.read(path)).toBe("through start.cjs");
    expect((await sbx.files.getInfo(path)).metadata).toEqual({ kind: "entry-test" });
    // On the file itself, not the in-memory fallback: another process reads the attribute.
    const attr = await sbx.commands.run(`python3 -c 'import os,sys; print(os.getxattr(sys.argv[1], "user.e2b.kind").decode())' ${path}`);
    expect(attr.stdout).toBe("entry-test\n");
  });
});
