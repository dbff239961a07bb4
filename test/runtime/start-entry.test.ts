// The runtime as a pod runs it (k8s/Dockerfile, k8s/entrypoint.sh): the bundle, its V8 code cache
// written by start.cjs --write-code-cache, then start.cjs with the pod's node flags and
// allocator setting. start.cjs runs the bundle through a vm.Script, so the native add-ons the
// bundle leaves external (@napi-rs/xattr on every file write, @lydell/node-pty for a terminal)
// load through the main context's loader: the real e2b SDK drives each through that entry.
import { join } from "node:path";
import type { Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sandboxAt, startPodRuntime, type PodRuntime } from "./support/pod-runtime.ts";

const ROOT = join(import.meta.dirname, "../..");
const dir = join(ROOT, ".cache", `runtime-start-${process.pid}`);
let runtime: PodRuntime;
let runtimeUrl: string;
let sbx: Sandbox;
let closeApi: () => void;

beforeAll(async () => {
  runtime = await startPodRuntime(dir, { codeCache: true, env: { RUNTIME_CODE_CACHE_DEBUG: "1" } });
  runtimeUrl = runtime.url;
  ({ sbx, close: closeApi } = await sandboxAt(runtimeUrl, "start-entry"));
}, 120_000);

afterAll(async () => {
  closeApi?.();
  await runtime?.stop();
});

describe("start.cjs, the runtime's entry in pods", () => {
  it("runs the bundle from the code cache the image build writes", async () => {
    expect(runtime.stderr()).toContain("code cache: used");
    expect(runtime.stderr()).not.toMatch(/Error|USE_MAIN_CONTEXT_DEFAULT_LOADER/);
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
