// The runtime as a pod runs it (k8s/Dockerfile, k8s/entrypoint.sh): the bundle, optionally its V8
// code cache, then start.cjs with the pod's node flags and allocator setting; and the control
// plane's one answer the e2b SDK needs to bind a Sandbox to it.
import { type ChildProcess, spawn } from "node:child_process";
import { mkdirSync, rmSync } from "node:fs";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { Sandbox } from "e2b";
import { bundleRuntime, RUNTIME_NODE_FLAGS, writeCodeCache } from "../../../controllers/runtime/bundle.ts";
import { ENVD_VERSION } from "../../../controllers/runtime/version.ts";

export interface PodRuntime {
  url: string;
  /** What it wrote to stderr so far. */
  stderr(): string;
  /** SIGTERM, then removes the bundle's folder. */
  stop(): Promise<void>;
}

/** Bundles into `dir` (inside the checkout, as dist/runtime is in the image: the external add-ons
 * resolve from the node_modules above it) and starts it on a free loopback port. */
export async function startPodRuntime(dir: string, opts: { codeCache?: boolean; env?: Record<string, string> } = {}): Promise<PodRuntime> {
  mkdirSync(dir, { recursive: true });
  const bundle = await bundleRuntime(join(dir, "main.cjs"));
  if (opts.codeCache) writeCodeCache(bundle);
  const child: ChildProcess = spawn(process.execPath, [...RUNTIME_NODE_FLAGS, join(dir, "start.cjs"), "--port", "0", "--host", "127.0.0.1"], {
    cwd: "/",
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, MALLOC_ARENA_MAX: "2", ...opts.env },
  });
  let stderr = "";
  child.stderr!.on("data", (d) => void (stderr += String(d)));
  const url = await new Promise<string>((res, rej) => {
    child.stdout!.on("data", (d) => {
      const m = /listening on (http:\/\/\S+)/.exec(String(d));
      if (m) res(m[1]!);
    });
    child.once("exit", (code) => rej(new Error(`runtime exited ${code}: ${stderr}`)));
  });
  return {
    url,
    stderr: () => stderr,
    async stop() {
      if (child.exitCode === null) {
        const exited = new Promise((r) => child.once("exit", r));
        child.kill("SIGTERM");
        await exited;
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A Sandbox of the e2b SDK bound to `runtimeUrl`, through a stand-in control plane that answers
 * only the create (closed by `close`). */
export async function sandboxAt(runtimeUrl: string, sandboxID: string): Promise<{ sbx: Sandbox; close(): void }> {
  const api = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      if (req.method === "POST" && req.url === "/v2/sandboxes") {
        res.writeHead(201, { "content-type": "application/json" }).end(JSON.stringify({ sandboxID, templateID: "base", clientID: "test", envdVersion: ENVD_VERSION }));
      } else res.writeHead(404, { "content-type": "application/json" }).end(JSON.stringify({ code: 404, message: "not here" }));
    });
  });
  await new Promise<void>((r) => api.listen(0, "127.0.0.1", r));
  const sbx = await Sandbox.create("base", { apiKey: `e2b_${"0".repeat(40)}`, apiUrl: `http://127.0.0.1:${(api.address() as AddressInfo).port}`, sandboxUrl: runtimeUrl });
  return { sbx, close: () => api.close() };
}
