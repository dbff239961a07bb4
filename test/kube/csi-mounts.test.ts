// A SandboxClaim's dynamic CSI mounts (issue 18.3) against the real API server: the claimed
// Sandbox carries them, and once its pod is Ready each goes to the pod's runtime as a CSI
// NodePublishVolumeRequest built from its PV with the claim's attributes over the PV's (the PV is
// not modified); a PV bound to another namespace is refused; a Stop resume mounts again in the new
// pod. The runtime and the CSI node plugin behind it are the named fake boundary: a loopback HTTP
// server recording what it is asked to mount.
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { CoreV1Api, PatchStrategy, setHeaderOptions, type V1Pod } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { KubernetesDriver, idLabel, type KubeDesiredSandbox } from "../../controllers/drivers/kubernetes/kubernetes-driver.ts";
import type { MountRequest } from "../../controllers/drivers/kubernetes/csi-mounts.ts";
import { ANNOTATION, LABEL } from "../../schema/crd/labels.ts";
import { TestKubelet } from "./support/kubelet.ts";
import { freshNamespace, kubeConfig, kubectlOk, until } from "./support/namespace.ts";
import { kubeDesired } from "./support/desired.ts";

const mergePatch = setHeaderOptions("Content-Type", PatchStrategy.MergePatch);
let ns: string;
let driver: KubernetesDriver;
let kubelet: TestKubelet;
let core: CoreV1Api;
let runtime: Server;
let runtimeUrl: string;
const mounted: MountRequest[] = [];
let generation = 1;

const desired = (id: string, over: Partial<KubeDesiredSandbox> = {}) => kubeDesired(id, { generation: generation++, claimed: true, ...over });

async function podOf(id: string): Promise<V1Pod | undefined> {
  return (await core.listNamespacedPod({ namespace: ns, labelSelector: `${LABEL.sandboxId}=${idLabel(id)}` })).items.find((p) => !p.metadata?.deletionTimestamp);
}

/** The pod's runtime at the fake (loopback); only then does the test's kubelet make it Ready, so
 * nothing is ever sent to the pod's made-up IP. */
async function startPod(id: string): Promise<V1Pod> {
  const pod = await until(`${id} pod`, () => podOf(id));
  // Released first: the annotation's write is the event the kubelet then answers with Ready.
  kubelet.hold.delete(pod.metadata!.name!);
  await core.patchNamespacedPod({ name: pod.metadata!.name!, namespace: ns, body: { metadata: { annotations: { [ANNOTATION.runtimeUrl]: runtimeUrl } } } }, mergePatch);
  await until(`${id} ready`, async () => (await driver.observe(id))?.ready);
  return pod;
}

interface Sbx {
  metadata: { annotations?: Record<string, string> };
  status?: { conditions?: { type: string; status: string; reason: string; message: string }[] };
}
const sandbox = (name: string) => JSON.parse(kubectlOk(["-n", ns, "get", "sbx", name, "-o", "json"])) as Sbx;
const volumes = (s: Sbx) => s.status?.conditions?.find((c) => c.type === "VolumesMounted");

function pv(name: string, boundTo: string, attributes: Record<string, string>): string {
  return JSON.stringify({
    apiVersion: "v1",
    kind: "PersistentVolume",
    metadata: { name },
    spec: {
      capacity: { storage: "10Gi" },
      accessModes: ["ReadWriteMany"],
      mountOptions: ["noatime"],
      claimRef: { namespace: boundTo, name: "data" },
      csi: { driver: "nas.csi.example.com", volumeHandle: `handle-${name}`, volumeAttributes: attributes, nodePublishSecretRef: { name: "nas-creds", namespace: boundTo } },
    },
  });
}

beforeAll(async () => {
  ns = await freshNamespace("csi");
  core = kubeConfig().makeApiClient(CoreV1Api);
  runtime = createServer((req, res) => {
    let body = "";
    req.on("data", (c) => (body += c));
    req.on("end", () => {
      if (req.method === "POST" && req.url === "/v1/storage/mounts") {
        const r = JSON.parse(body) as MountRequest;
        mounted.push(r);
        res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ success: true, mountPath: r.publishRequest.targetPath }));
      } else res.writeHead(204).end();
    });
  });
  await new Promise<void>((ok) => runtime.listen(0, "127.0.0.1", ok));
  runtimeUrl = `http://127.0.0.1:${(runtime.address() as AddressInfo).port}`;
  kubectlOk(["apply", "-f", "-"], pv(`${ns}-team`, ns, { server: "nas.example", share: "/exports/team", mode: "rw" }));
  kubectlOk(["apply", "-f", "-"], pv(`${ns}-other`, "another-team", { server: "nas.example", share: "/exports/other" }));
  kubectlOk(["-n", ns, "apply", "-f", "-"], "apiVersion: agents.kruise.io/v1alpha1\nkind: SandboxSet\nmetadata: { name: py }\nspec:\n  replicas: 0\n  template: { spec: { containers: [{ name: sandbox, image: python:3.12 }] } }\n");
  kubelet = new TestKubelet(kubeConfig(), ns);
  for (const id of ["m1", "m2"]) kubelet.hold.add(`py-${id}`);
  await kubelet.start();
  driver = new KubernetesDriver({ kubeConfig: kubeConfig("agent"), namespace: ns, runtimeImage: "ghcr.io/kruise-edge/sandbox-agent:test" });
  await driver.start();
});

afterAll(async () => {
  await driver?.stop();
  await kubelet?.stop();
  runtime?.close();
  kubectlOk(["delete", "pv", `${ns}-team`, `${ns}-other`, "--wait=false"]);
});

describe("SandboxClaim dynamic CSI mounts", () => {
  it("mounts each volume through the runtime with the claim's attributes over the PV's, leaving the PV as it was", async () => {
    await driver.ensure(desired("m1", { accessToken: "tok-m1" }));
    const pod = await startPod("m1");
    await driver.labelClaimed(["m1"], "claim-a", [
      { pvName: `${ns}-team`, mountPath: "/mnt/data", subPath: "projects/a", attributes: { mode: "ro", cache: "none" } },
      { pvName: `${ns}-team`, mountPath: "/mnt/shared", readOnly: true, mountID: "shared" },
    ]);
    const sbx = await until("VolumesMounted", () => {
      const s = sandbox("py-m1");
      return volumes(s)?.status === "True" && s;
    });
    expect(volumes(sbx)).toMatchObject({ reason: "Mounted", message: "2 volumes mounted: /mnt/data, /mnt/shared" });
    expect(sbx.metadata.annotations?.[ANNOTATION.csiMountedPod]).toBe(pod.metadata!.uid);
    const byPath = Object.fromEntries(mounted.map((m) => [m.publishRequest.targetPath, m]));
    expect(byPath["/mnt/data"]).toEqual({
      driver: "nas.csi.example.com",
      publishRequest: {
        volumeId: `handle-${ns}-team`,
        targetPath: "/mnt/data",
        readonly: false,
        volumeCapability: { mount: { fsType: "", mountFlags: ["noatime"] }, accessMode: { mode: "MULTI_NODE_MULTI_WRITER" } },
        volumeContext: { server: "nas.example", share: "/exports/team", mode: "ro", cache: "none" },
      },
      subPath: "projects/a",
      nodePublishSecretRef: { name: "nas-creds", namespace: ns },
    });
    expect(byPath["/mnt/shared"]).toMatchObject({ mountID: "shared", publishRequest: { readonly: true, volumeCapability: { accessMode: { mode: "MULTI_NODE_READER_ONLY" } }, volumeContext: { mode: "rw" } } });
    // The claim's attributes were for this mount only.
    const after = JSON.parse(kubectlOk(["get", "pv", `${ns}-team`, "-o", "json"]));
    expect(after.spec.csi.volumeAttributes).toEqual({ server: "nas.example", share: "/exports/team", mode: "rw" });
  });

  it("mounts again in the new pod after a Stop pause and resume", async () => {
    const before = mounted.length;
    await driver.ensure(desired("m1", { state: "Paused", accessToken: "tok-m1" }));
    await until("pod gone", async () => !(await podOf("m1")));
    kubelet.hold.add("py-m1");
    await driver.ensure(desired("m1", { accessToken: "tok-m1" }));
    const pod = await startPod("m1");
    await until("mounted again", () => sandbox("py-m1").metadata.annotations?.[ANNOTATION.csiMountedPod] === pod.metadata!.uid);
    expect(mounted.slice(before).map((m) => m.publishRequest.targetPath).sort()).toEqual(["/mnt/data", "/mnt/shared"]);
    expect(volumes(sandbox("py-m1"))?.status).toBe("True");
  });

  it("refuses a PV bound to another namespace, with a condition and an Event, and asks the runtime for nothing", async () => {
    const before = mounted.length;
    await driver.ensure(desired("m2"));
    await startPod("m2");
    await driver.labelClaimed(["m2"], "claim-b", [{ pvName: `${ns}-other`, mountPath: "/mnt/x" }, { pvName: "no-such-pv", mountPath: "/mnt/y" }]);
    const sbx = await until("VolumesMounted False", () => {
      const s = sandbox("py-m2");
      return volumes(s)?.status === "False" && s;
    });
    expect(volumes(sbx)).toMatchObject({ reason: "MountFailed", message: `/mnt/x: PersistentVolume ${ns}-other is not bound to a claim in namespace ${ns}; /mnt/y: PersistentVolume no-such-pv not found` });
    await until("VolumeMountFailed event", () => kubectlOk(["-n", ns, "get", "events", "--field-selector", "involvedObject.kind=Sandbox,involvedObject.name=py-m2", "-o", "jsonpath={.items[*].reason}"]).includes("VolumeMountFailed"));
    expect(mounted.length).toBe(before);
    expect(sbx.metadata.annotations?.[ANNOTATION.csiMountedPod]).toBeUndefined();
  });
});
