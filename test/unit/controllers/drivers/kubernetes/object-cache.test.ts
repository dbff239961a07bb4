// The informer's record of our own writes (no API server: nothing is started, only the calls a
// writer makes). An update's answer that arrives after the object was deleted must not bring it
// back: a "ghost" stayed listed until the agent restarted and was counted in the SandboxSet's
// .status.replicas, so a scale-down never converged.
import { KubeConfig, type KubernetesObject } from "@kubernetes/client-node";
import { describe, expect, it } from "vitest";
import { ObjectCache } from "../../../../../controllers/drivers/kubernetes/object-cache.ts";

const obj = (rv: number, uid = "u1", name = "sbx-a"): KubernetesObject => ({ metadata: { name, uid, resourceVersion: String(rv) } });
const cache = () => new ObjectCache<KubernetesObject>(new KubeConfig(), { path: "/x", list: async () => ({ items: [] }), slim: (o: KubernetesObject) => o });
const names = (c: ObjectCache<KubernetesObject>) => c.list().map((o) => o.metadata!.name);

describe("ObjectCache: a late update answer", () => {
  it("does not bring back an object deleted since (our delete)", () => {
    const c = cache();
    c.created(obj(10));
    c.forget("sbx-a");
    c.remember(obj(12)); // a status patch committed before the DELETE, answered after it
    expect(names(c)).toEqual([]);
    expect(c.get("sbx-a")).toBeUndefined();
  });

  it("does not add a name the cache no longer holds (its DELETED event already handled)", () => {
    const c = cache();
    c.remember(obj(12));
    expect(names(c)).toEqual([]);
  });

  it("is not kept for a name that now holds another object (a new uid)", () => {
    const c = cache();
    c.created(obj(20, "u2"));
    c.remember(obj(21, "u1"));
    expect(c.get("sbx-a")?.metadata?.uid).toBe("u2");
  });

  it("still applies to the object it was written to, and a create still adds", () => {
    const c = cache();
    c.created(obj(10));
    expect(names(c)).toEqual(["sbx-a"]);
    c.remember(obj(12));
    expect(c.get("sbx-a")?.metadata?.resourceVersion).toBe("12");
    c.remember(obj(11)); // answers of two concurrent writes in either order: the newer stays
    expect(c.get("sbx-a")?.metadata?.resourceVersion).toBe("12");
  });
});
