// POST /v1/storage/mounts (issue 18.3): the standalone runtime, as a pod runs it, hands a dynamic
// mount to the pod's CSI node plugin over its Unix socket as gRPC `csi.v1.Node/NodePublishVolume`.
// The node plugin is the named fake boundary: a real gRPC server (connect-node, gRPC protocol over
// HTTP/2) on a Unix socket that records what it is asked and can refuse.
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer, type Http2Server } from "node:http2";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Code, ConnectError } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Node, VolumeCapability_AccessMode_Mode, type NodePublishVolumeRequest } from "../../schema/csi/gen/csi_pb.js";

const TOKEN = "tok-storage";
let dir: string;
let plugin: Http2Server;
let runtime: ChildProcess;
let url: string;
const asked: NodePublishVolumeRequest[] = [];

async function startRuntime(socket: string): Promise<{ child: ChildProcess; url: string }> {
  const child = spawn(process.execPath, ["controllers/runtime/main.ts", "--port", "0", "--host", "127.0.0.1", "--csi-socket", socket, "--access-token", TOKEN], { stdio: ["ignore", "pipe", "inherit"], env: { ...process.env, MALLOC_ARENA_MAX: "2" } });
  const at = await new Promise<string>((res, rej) => {
    let out = "";
    child.stdout!.on("data", (d) => {
      out += d;
      const m = /listening on (http:\/\/\S+)/.exec(out);
      if (m) res(m[1]!);
    });
    child.once("exit", (code) => rej(new Error(`runtime exited ${code}`)));
  });
  return { child, url: at };
}

const mount = (base: string, body: unknown, token: string | null = TOKEN) =>
  fetch(`${base}/v1/storage/mounts`, { method: "POST", headers: { "content-type": "application/json", ...(token ? { "x-access-token": token } : {}) }, body: JSON.stringify(body) });

const request = (over: Record<string, unknown> = {}) => ({
  driver: "nas.csi.example.com",
  publishRequest: {
    volumeId: "handle-1",
    targetPath: "/mnt/data",
    readonly: false,
    volumeCapability: { mount: { fsType: "", mountFlags: ["noatime"] }, accessMode: { mode: "MULTI_NODE_MULTI_WRITER" } },
    volumeContext: { server: "nas.example", mode: "ro" },
  },
  ...over,
});

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "csi-plugin-"));
  plugin = createServer(
    connectNodeAdapter({
      routes: (router) =>
        router.service(Node, {
          async nodePublishVolume(req) {
            asked.push(req);
            if (req.volumeId === "broken") throw new ConnectError("volume handle broken: no such export", Code.NotFound);
            return {};
          },
        }),
    }),
  );
  await new Promise<void>((r) => plugin.listen(join(dir, "csi.sock"), r));
  ({ child: runtime, url } = await startRuntime(join(dir, "csi.sock")));
});

afterAll(async () => {
  runtime?.kill("SIGTERM");
  await new Promise<void>((r) => plugin?.close(() => r()));
  rmSync(dir, { recursive: true, force: true });
});

describe("POST /v1/storage/mounts", () => {
  it("hands the mount to the pod's CSI node plugin as NodePublishVolume", async () => {
    const res = await mount(url, request({ subPath: "projects/a", nodePublishSecretRef: { name: "nas-creds", namespace: "team-a" } }));
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ success: true, mountPath: "/mnt/data" });
    const got = asked.at(-1)!;
    expect(got.volumeId).toBe("handle-1");
    expect(got.targetPath).toBe("/mnt/data");
    expect(got.readonly).toBe(false);
    expect(got.volumeCapability?.accessMode?.mode).toBe(VolumeCapability_AccessMode_Mode.MULTI_NODE_MULTI_WRITER);
    expect(got.volumeCapability?.accessType.case).toBe("mount");
    expect(got.volumeCapability?.accessType.value).toMatchObject({ mountFlags: ["noatime"] });
    expect(got.volumeContext).toEqual({ server: "nas.example", mode: "ro", "csi.agents.kruise.io/sub-path": "projects/a", "csi.agents.kruise.io/node-publish-secret": "team-a/nas-creds" });
    expect(got.secrets).toEqual({});
  });

  it("sets the platform's volume_context keys itself: values the request carries for them never reach the plugin (review 25 H5)", async () => {
    const injected = { ...request().publishRequest.volumeContext, "csi.agents.kruise.io/sub-path": "../../team-b", "csi.agents.kruise.io/node-publish-secret": "kube-system/platform-creds" };
    expect((await mount(url, request({ publishRequest: { ...request().publishRequest, volumeContext: injected } }))).status).toBe(200);
    expect(asked.at(-1)!.volumeContext).toEqual({ server: "nas.example", mode: "ro" });
    const withOwn = await mount(url, request({ publishRequest: { ...request().publishRequest, volumeContext: injected }, subPath: "projects/a" }));
    expect(withOwn.status).toBe(200);
    expect(asked.at(-1)!.volumeContext).toEqual({ server: "nas.example", mode: "ro", "csi.agents.kruise.io/sub-path": "projects/a" });
  });

  it("a plugin's refusal is a 502 naming the driver and the plugin's reason", async () => {
    const res = await mount(url, request({ publishRequest: { ...request().publishRequest, volumeId: "broken" } }));
    expect(res.status).toBe(502);
    expect(await res.json()).toEqual({ success: false, message: "CSI driver nas.csi.example.com refused the mount: volume handle broken: no such export" });
  });

  it("checks the token and the request before the plugin hears of it", async () => {
    const before = asked.length;
    expect((await mount(url, request(), null)).status).toBe(401);
    expect((await mount(url, request(), "wrong")).status).toBe(401);
    const unknownField = await mount(url, request({ publishRequest: { ...request().publishRequest, nodeStageSecret: "x" } }));
    expect(unknownField.status).toBe(400);
    expect((await unknownField.json()).message).toMatch(/^publishRequest is not a CSI NodePublishVolumeRequest/);
    expect((await mount(url, request({ publishRequest: { volumeId: "v", targetPath: "relative" } }))).status).toBe(400);
    expect((await mount(url, { publishRequest: request().publishRequest })).status).toBe(400);
    expect(asked.length).toBe(before);
  });

  it("without a node plugin in the pod it is a 501 that says so", async () => {
    const lone = await startRuntime(join(dir, "nothing-here.sock"));
    try {
      const res = await mount(lone.url, request());
      expect(res.status).toBe(501);
      expect((await res.json()).message).toMatch(/no CSI node plugin in this pod/);
    } finally {
      lone.child.kill("SIGTERM");
    }
  });
});
