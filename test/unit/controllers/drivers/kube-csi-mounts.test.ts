// Dynamic CSI mounts: the claim's mounts as data (schema/crd/csi-mount.ts) and the request built
// from a PV (controllers/drivers/kubernetes/csi-mounts.ts `mountRequest`).
import { describe, expect, it } from "vitest";
import type { V1PersistentVolume } from "@kubernetes/client-node";
import { csiMountsProblem, parseCsiAnnotation } from "../../../../schema/crd/csi-mount.ts";
import { mountRequest } from "../../../../controllers/drivers/kubernetes/csi-mounts.ts";

const pv = (over: Partial<NonNullable<V1PersistentVolume["spec"]>> = {}): V1PersistentVolume => ({
  metadata: { name: "pv1" },
  spec: { accessModes: ["ReadWriteOnce"], claimRef: { namespace: "team-a", name: "c" }, csi: { driver: "d.example.com", volumeHandle: "h1", volumeAttributes: { a: "1", b: "2" } }, ...over },
});

describe("CSI mount configs", () => {
  it("refuses paths that climb, relative mount points, duplicates and bad PV names, naming the field", () => {
    expect(csiMountsProblem([{ pvName: "pv1", mountPath: "/data" }], "spec.dynamicVolumesMount")).toBeUndefined();
    expect(csiMountsProblem([{ pvName: "pv1", mountPath: "data" }], "spec.dynamicVolumesMount")).toMatch(/^spec\.dynamicVolumesMount\[0\]\.mountPath: must be an absolute clean path/);
    expect(csiMountsProblem([{ pvName: "pv1", mountPath: "/a/../etc" }], "m")).toMatch(/mountPath/);
    expect(csiMountsProblem([{ pvName: "pv1", mountPath: "/" }], "m")).toMatch(/mountPath/);
    expect(csiMountsProblem([{ pvName: "pv1", mountPath: "/a", subPath: "../../x" }], "m")).toMatch(/^m\[0\]\.subPath/);
    expect(csiMountsProblem([{ pvName: "pv1", mountPath: "/a", subPath: "/abs" }], "m")).toMatch(/subPath/);
    expect(csiMountsProblem([{ pvName: "PV_1", mountPath: "/a" }], "m")).toMatch(/pvName/);
    expect(csiMountsProblem([{ pvName: "a", mountPath: "/a" }, { pvName: "b", mountPath: "/a" }], "m")).toMatch(/share a mountPath/);
    expect(csiMountsProblem([{ pvName: "a", mountPath: "/a", extra: 1 }], "m")).toMatch(/extra|Unrecognized/);
    expect(parseCsiAnnotation('[{"pvName":"a","mountPath":"/a"}]')).toEqual([{ pvName: "a", mountPath: "/a" }]);
    expect(parseCsiAnnotation("not json")).toEqual([]);
  });
});

describe("mountRequest", () => {
  it("builds a NodePublishVolumeRequest from the PV with the claim's attributes on top", () => {
    const r = mountRequest(pv({ mountOptions: ["ro"] }), { pvName: "pv1", mountPath: "/m", attributes: { b: "x" }, subPath: "s" }, "team-a");
    expect(r).toEqual({
      ok: true,
      request: {
        driver: "d.example.com",
        publishRequest: { volumeId: "h1", targetPath: "/m", readonly: false, volumeCapability: { mount: { fsType: "", mountFlags: ["ro"] }, accessMode: { mode: "SINGLE_NODE_WRITER" } }, volumeContext: { a: "1", b: "x" } },
        subPath: "s",
      },
    });
  });

  it("uses a PV only when it is a CSI volume bound into the sandbox's namespace", () => {
    expect(mountRequest(undefined, { pvName: "pv1", mountPath: "/m" }, "team-a")).toEqual({ ok: false, message: "PersistentVolume pv1 not found" });
    expect(mountRequest(pv({ csi: undefined, nfs: { server: "s", path: "/" } }), { pvName: "pv1", mountPath: "/m" }, "team-a")).toMatchObject({ ok: false, message: "PersistentVolume pv1 is not a CSI volume" });
    expect(mountRequest(pv(), { pvName: "pv1", mountPath: "/m" }, "team-b")).toMatchObject({ ok: false, message: "PersistentVolume pv1 is not bound to a claim in namespace team-b" });
    expect(mountRequest(pv({ claimRef: undefined }), { pvName: "pv1", mountPath: "/m" }, "team-a").ok).toBe(false);
  });

  it("maps access modes and read-only", () => {
    const mode = (modes: string[], readOnly?: boolean) => {
      const r = mountRequest(pv({ accessModes: modes }), { pvName: "pv1", mountPath: "/m", readOnly }, "team-a");
      return r.ok ? [r.request.publishRequest.volumeCapability.accessMode.mode, r.request.publishRequest.readonly] : r.message;
    };
    expect(mode(["ReadWriteMany"])).toEqual(["MULTI_NODE_MULTI_WRITER", false]);
    expect(mode(["ReadOnlyMany"])).toEqual(["MULTI_NODE_READER_ONLY", true]);
    expect(mode(["ReadWriteOncePod"])).toEqual(["SINGLE_NODE_SINGLE_WRITER", false]);
    expect(mode(["ReadWriteMany"], true)).toEqual(["MULTI_NODE_READER_ONLY", true]);
  });

  it("a claim only tightens read-only, and cannot set the platform's volume_context keys (review 25 H5)", () => {
    const ro = (over: Partial<NonNullable<V1PersistentVolume["spec"]>>, readOnly?: boolean) => {
      const r = mountRequest(pv(over), { pvName: "pv1", mountPath: "/m", readOnly }, "team-a");
      return r.ok ? [r.request.publishRequest.readonly, r.request.publishRequest.volumeCapability.accessMode.mode] : r.message;
    };
    const readOnlyPv = { accessModes: ["ReadWriteMany"], csi: { driver: "d.example.com", volumeHandle: "h1", readOnly: true } };
    expect(ro(readOnlyPv, false)).toEqual([true, "MULTI_NODE_READER_ONLY"]);
    expect(ro(readOnlyPv)).toEqual([true, "MULTI_NODE_READER_ONLY"]);
    expect(ro({ accessModes: ["ReadOnlyMany"] }, false)).toEqual([true, "MULTI_NODE_READER_ONLY"]);
    expect(ro({ accessModes: ["ReadWriteMany"] }, true)).toEqual([true, "MULTI_NODE_READER_ONLY"]);
    expect(ro({ accessModes: ["ReadWriteMany"] }, false)).toEqual([false, "MULTI_NODE_MULTI_WRITER"]);

    const injected = { "csi.agents.kruise.io/sub-path": "../../team-b", "csi.agents.kruise.io/node-publish-secret": "kube-system/platform-creds", "agents.kruise.io/x": "y", share: "/exports/a" };
    expect(csiMountsProblem([{ pvName: "pv1", mountPath: "/m", attributes: injected }], "spec.dynamicVolumesMount")).toMatch(/^spec\.dynamicVolumesMount\[0\]\.attributes.*reserved prefix/);
    expect(csiMountsProblem([{ pvName: "pv1", mountPath: "/m", attributes: { "agents.kruise.io/x": "y" } }], "m")).toMatch(/reserved prefix/);
    expect(csiMountsProblem([{ pvName: "pv1", mountPath: "/m", attributes: { share: "/exports/a" } }], "m")).toBeUndefined();
    // An annotation written before the refusal: the driver still drops them.
    const r = mountRequest(pv(), { pvName: "pv1", mountPath: "/m", attributes: injected }, "team-a");
    expect(r.ok && r.request.publishRequest.volumeContext).toEqual({ a: "1", b: "2", share: "/exports/a" });
  });
});
