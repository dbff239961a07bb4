// The runtime as a pod runs it (k8s/Dockerfile, k8s/entrypoint.sh): the bundle, optionally its V8
// code cache and its startup snapshot, then the image's entrypoint (from the snapshot when there
// is one, else start.cjs, with the pod's node flags and allocator setting); and the control
// plane's one answer the e2b SDK needs to bind a Sandbox to it.
import { type ChildProcess, spawn } from "node:child_process";
import { mkdirSync, rmSync } from "node:fs";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { dirname, join } from "node:path";
import { Sandbox } from "e2b";
import { bundleRuntime, bundleRuntimeSnapshot, writeCodeCache, writeSnapshot } from "../../../controllers/runtime/bundle.ts";
import { ENVD_VERSION } from "../../../controllers/runtime/version.ts";

export interface PodRuntime {
  url: string;
  pid: number;
  /** What it wrote to stderr so far. */
  stderr(): string;
  /** SIGTERM, then removes the bundle's folder. */
  stop(): Promise<void>;
}

const ENTRYPOINT = join(import.meta.dirname, "../../../k8s/entrypoint.sh");

/** Bundles into `dir` (inside the checkout, as dist/runtime is in the image: the external add-ons
 * resolve from the node_modules above it), with what the image build adds (`codeCache`,
 * `snapshot`), and starts it through the image's entrypoint on a free loopback port. */
export async function startPodRuntime(dir: string, opts: { codeCache?: boolean; snapshot?: boolean; env?: Record<string, string> } = {}): Promise<PodRuntime> {
  mkdirSync(dir, { recursive: true });
  const bundle = await bundleRuntime(join(dir, "main.cjs"));
  if (opts.codeCache) writeCodeCache(bundle);
  if (opts.snapshot) writeSnapshot(await bundleRuntimeSnapshot(join(dir, "snapshot.cjs")));
  const child: ChildProcess = spawn("/bin/sh", [ENTRYPOINT, "--port", "0", "--host", "127.0.0.1"], {
    cwd: "/",
    stdio: ["ignore", "pipe", "pipe"],
    // The image's `node` is this one.
    env: { ...process.env, PATH: `${dirname(process.execPath)}:${process.env.PATH}`, RUNTIME_DIST: dir, ...opts.env },
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
    pid: child.pid!,
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
 * only the create (closed by `close`), handing out `accessToken` as the sandbox's token. */
export async function sandboxAt(runtimeUrl: string, sandboxID: string, accessToken?: string): Promise<{ sbx: Sandbox; close(): void }> {
  const api = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      if (req.method === "POST" && req.url === "/v2/sandboxes") {
        res.writeHead(201, { "content-type": "application/json" }).end(JSON.stringify({ sandboxID, templateID: "base", clientID: "test", envdVersion: ENVD_VERSION, envdAccessToken: accessToken }));
      } else res.writeHead(404, { "content-type": "application/json" }).end(JSON.stringify({ code: 404, message: "not here" }));
    });
  });
  await new Promise<void>((r) => api.listen(0, "127.0.0.1", r));
  const sbx = await Sandbox.create("base", { apiKey: `e2b_${"0".repeat(40)}`, apiUrl: `http://127.0.0.1:${(api.address() as AddressInfo).port}`, sandboxUrl: runtimeUrl });
  return { sbx, close: () => api.close() };
}
