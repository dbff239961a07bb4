// POST /v1/storage/mounts (upstream's agent-runtime route): a dynamic CSI mount of this sandbox's
// pod, asked by the agent after a claim or a resume (controllers/drivers/kubernetes/csi-mounts.ts).
// The body names the CSI driver and carries a NodePublishVolumeRequest as protobuf JSON; the
// runtime hands it to the pod's CSI node plugin (the injected `csi` component) over its Unix
// socket, as the kubelet would: gRPC `csi.v1.Node/NodePublishVolume`. The plugin does the mount.
// Token-checked like every runtime route; the request is parsed strictly (unknown fields refused)
// and is data for the plugin, never run by the runtime.
import { existsSync } from "node:fs";
import { connect } from "node:net";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { JsonValue } from "@bufbuild/protobuf";
import type { RuntimeSandbox } from "../sandbox.ts";
import { readJson } from "./read-json.ts";
import { HttpError, sendJson, type HttpHandler } from "./respond.ts";

/** Where the injected `csi` component's node plugin listens (its emptyDir, k8s/injection-config.yaml). */
export const DEFAULT_CSI_SOCKET = "/var/run/sandbox-csi/csi.sock";
/** volume_context keys for what NodePublishVolume has no field for (the plugin reads them). */
export const SUB_PATH_KEY = "csi.agents.kruise.io/sub-path";
export const SECRET_REF_KEY = "csi.agents.kruise.io/node-publish-secret";

interface MountBody {
  driver?: unknown;
  mountID?: unknown;
  publishRequest?: unknown;
  subPath?: unknown;
  nodePublishSecretRef?: { name?: unknown; namespace?: unknown };
}

const str = (v: unknown, what: string, max: number): string => {
  if (typeof v !== "string" || v.length === 0 || v.length > max) throw new HttpError(400, `${what} must be a string of 1 to ${max} characters`);
  return v;
};

/** The CSI descriptors are large; loaded on the first mount, not at the runtime's start. */
const csi = () =>
  Promise.all([import("@bufbuild/protobuf"), import("@connectrpc/connect"), import("@connectrpc/connect-node"), import("../../../schema/csi/gen/csi_pb.js")]).then(
    ([{ fromJson }, { ConnectError, createClient }, { createGrpcTransport }, { Node, NodePublishVolumeRequestSchema }]) => ({ fromJson, ConnectError, createClient, createGrpcTransport, Node, NodePublishVolumeRequestSchema }),
  );

export function postStorageMount(socket: string): HttpHandler {
  return async (req: IncomingMessage, res: ServerResponse, _sbx: RuntimeSandbox) => {
    const body = (await readJson(req)) as MountBody;
    const { fromJson, ConnectError, createClient, createGrpcTransport, Node, NodePublishVolumeRequestSchema } = await csi();
    const driver = str(body.driver, "driver", 253);
    let publish;
    try {
      publish = fromJson(NodePublishVolumeRequestSchema, (body.publishRequest ?? null) as JsonValue);
    } catch (err) {
      throw new HttpError(400, `publishRequest is not a CSI NodePublishVolumeRequest: ${(err as Error).message}`);
    }
    if (!publish.volumeId || !publish.targetPath.startsWith("/")) throw new HttpError(400, "publishRequest needs volumeId and an absolute targetPath");
    // Ours, set last: a value the request's volumeContext carries for them (a claim's attributes)
    // is dropped, never passed on as if the platform had checked it.
    delete publish.volumeContext[SUB_PATH_KEY];
    delete publish.volumeContext[SECRET_REF_KEY];
    if (body.subPath !== undefined) publish.volumeContext[SUB_PATH_KEY] = str(body.subPath, "subPath", 1024);
    const ref = body.nodePublishSecretRef;
    if (ref) publish.volumeContext[SECRET_REF_KEY] = `${str(ref.namespace, "nodePublishSecretRef.namespace", 63)}/${str(ref.name, "nodePublishSecretRef.name", 253)}`;
    if (!existsSync(socket)) throw new HttpError(501, `no CSI node plugin in this pod (nothing listens at ${socket}: the template's runtimes must name the csi component)`);
    const transport = createGrpcTransport({ baseUrl: "http://csi.local", nodeOptions: { createConnection: () => connect(socket) } });
    try {
      await createClient(Node, transport).nodePublishVolume(publish, { timeoutMs: 60_000 });
    } catch (err) {
      const e = ConnectError.from(err);
      return sendJson(res, 502, { success: false, message: `CSI driver ${driver} refused the mount: ${e.rawMessage}` });
    }
    sendJson(res, 200, { success: true, mountPath: publish.targetPath });
  };
}
