// The runtime as a pod runs it (k8s/Dockerfile, k8s/entrypoint.sh): the image's entrypoint starts
// it from the startup snapshot the image build writes (main.blob, controllers/runtime/snapshot.ts),
// or, without one, through start.cjs from the bundle's V8 code cache. Both run the bundle outside
// Node's module loader (a snapshot's deserialized heap, a vm.Script), so the native add-ons the
// bundle leaves out (@napi-rs/xattr on every file write, @lydell/node-pty for a terminal) load by
// other ways than a plain require: the real e2b SDK drives each through each entry.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import type { Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sandboxAt, startPodRuntime, type PodRuntime } from "./support/pod-runtime.ts";

const ROOT = join(import.meta.dirname, "../..");
const TOKEN = "start-entry-token";

function entry(name: string, opts: { snapshot: boolean }) {
  const dir = join(ROOT, ".cache", `runtime-start-${name}-${process.pid}`);
  const state = {} as { runtime: PodRuntime; sbx: Sandbox; closeApi: () => void; dir: string };
  beforeAll(async () => {
    state.dir = dir;
    // The token comes from the pod's environment when it starts, never from the image build.
    state.runtime = await startPodRuntime(dir, { codeCache: true, snapshot: opts.snapshot, env: { RUNTIME_CODE_CACHE_DEBUG: "1", RUNTIME_ACCESS_TOKEN: TOKEN } });
    const { sbx, close } = await sandboxAt(state.runtime.url, `start-${name}`, TOKEN);
    state.sbx = sbx;
    state.closeApi = close;
  }, 120_000);
  afterAll(async () => {
    state.closeApi?.();
    await state.runtime?.stop();
  });
  return state;
}

/** What both entries must do alike. */
function servesTheSdk(state: ReturnType<typeof entry>) {
  it("takes its access token from the environment it starts in", async () => {
    const denied = await fetch(new URL("/envs", state.runtime.url));
    expect(denied.status).toBe(401);
    const allowed = await fetch(new URL("/envs", state.runtime.url), { headers: { "x-access-token": TOKEN } });
    expect(allowed.status).toBe(200);
  });

  it("runs a command and a terminal (the node-pty add-on)", async () => {
    const r = await state.sbx.commands.run("echo from-the-$((6*7))-entry");
    expect(r.exitCode).toBe(0);
    expect(r.stdout).toBe("from-the-42-entry\n");
    let out = "";
    const d = new TextDecoder();
    const term = await state.sbx.pty.create({ cols: 80, rows: 24, onData: (b) => void (out += d.decode(b, { stream: true })) });
    await state.sbx.pty.sendInput(term.pid, new TextEncoder().encode("echo pty-$((40+2))\nexit\n"));
    expect((await term.wait()).exitCode).toBe(0);
    expect(out).toContain("pty-42");
  });

  it("writes a file with metadata as extended attributes (the xattr add-on) and reads it back", async () => {
    const path = join(state.dir, "written.txt");
    const w = await state.sbx.files.write(path, "through the pod's entry", { metadata: { kind: "entry-test" } });
    expect(w.metadata).toEqual({ kind: "entry-test" });
    expect(await state.sbx.files.read(path)).toBe("through the pod's entry");
    expect((await state.sbx.files.getInfo(path)).metadata).toEqual({ kind: "entry-test" });
    // On the file itself, not the in-memory fallback: another process reads the attribute.
    const attr = await state.sbx.commands.run(`python3 -c 'import os,sys; print(os.getxattr(sys.argv[1], "user.e2b.kind").decode())' ${path}`);
    expect(attr.stdout).toBe("entry-test\n");
  });
}

describe("the pod's entry with the image's startup snapshot", () => {
  const state = entry("snapshot", { snapshot: true });

  it("starts from the snapshot", async () => {
    const cmdline = readFileSync(`/proc/${state.runtime.pid}/cmdline`, "utf8").split("\0");
    expect(cmdline).toContain("--snapshot-blob");
    expect(cmdline[cmdline.indexOf("--snapshot-blob") + 1]).toBe(join(state.dir, "main.blob"));
    expect(state.runtime.stderr()).not.toMatch(/Error|Warning/);
    expect((await fetch(new URL("/health", state.runtime.url))).status).toBeLessThan(300);
  });

  servesTheSdk(state);
});

describe("the pod's entry without a snapshot: start.cjs", () => {
  const state = entry("code-cache", { snapshot: false });

  it("runs the bundle from the code cache the image build writes", async () => {
    expect(state.runtime.stderr()).toContain("code cache: used");
    expect(state.runtime.stderr()).not.toMatch(/Error|USE_MAIN_CONTEXT_DEFAULT_LOADER/);
    expect((await fetch(new URL("/health", state.runtime.url))).status).toBeLessThan(300);
  });

  servesTheSdk(state);
});
