// The stored TrafficPolicy set (policy-store.ts) against an in-memory API: a load that overlapped
// a save must not make the store believe the server holds the older set it read.
import { gunzipSync } from "node:zlib";
import type { CoreV1Api, V1ConfigMap } from "@kubernetes/client-node";
import { describe, expect, it } from "vitest";
import { PolicySetStore } from "../../../../../controllers/drivers/kubernetes/policy-store.ts";
import { TrafficPolicySpec, type TrafficPolicyEntry } from "../../../../../schema/api/traffic-policy.ts";

const entry = (name: string): TrafficPolicyEntry => ({ team: null, name, spec: TrafficPolicySpec.parse({ egress: { rules: [{ action: "allow", to: [{ cidr: "8.8.8.8" }] }] } }) });

/** One ConfigMap in memory; reads wait for `release` when `hold` is set (the slow read). */
function memoryCore() {
  let stored: V1ConfigMap | undefined;
  let release: (() => void) | undefined;
  let hold = false;
  const core = {
    async readNamespacedConfigMap(): Promise<V1ConfigMap> {
      const seen = structuredClone(stored);
      if (hold) await new Promise<void>((r) => (release = r));
      if (!seen) throw Object.assign(new Error("not found"), { code: 404 });
      return seen;
    },
    async createNamespacedConfigMap({ body }: { body: V1ConfigMap }) {
      if (stored) throw Object.assign(new Error("exists"), { code: 409 });
      stored = structuredClone(body);
    },
    async replaceNamespacedConfigMap({ body }: { body: V1ConfigMap }) {
      stored = structuredClone(body);
    },
  };
  return { core: core as unknown as CoreV1Api, hold: (h: boolean) => (hold = h), release: () => release?.(), stored: () => JSON.parse(gunzipSync(Buffer.from(Object.values(stored!.binaryData!)[0]!, "base64")).toString()) as TrafficPolicyEntry[] };
}

describe("PolicySetStore", () => {
  it("a load that read the old set while a newer one was saved does not skip saving the old set again", async () => {
    const api = memoryCore();
    await new PolicySetStore(api.core, "ns", () => {}).save([entry("a")]);
    const store = new PolicySetStore(api.core, "ns", () => {}); // the restarted agent
    api.hold(true);
    const loading = store.load(); // reads [a], answers late
    await store.save([entry("b")]); // the edge's newer set arrives meanwhile
    api.release();
    expect((await loading)!.map((e) => e.name)).toEqual(["a"]);
    api.hold(false);
    await store.save([entry("a")]); // the edge goes back to [a]: it must reach the server
    expect(api.stored().map((e) => e.name)).toEqual(["a"]);
    expect((await new PolicySetStore(api.core, "ns", () => {}).load())!.map((e) => e.name)).toEqual(["a"]);
  });

  it("a load with no save meanwhile makes an unchanged save free", async () => {
    const api = memoryCore();
    await new PolicySetStore(api.core, "ns", () => {}).save([entry("a")]);
    let requests = 0;
    const store = new PolicySetStore(api.core, "ns", () => requests++);
    await store.load();
    await store.save([entry("a")]);
    expect(requests).toBe(1);
  });
});
