// A SandboxSet status write the API server never answers does not hold the pool's status: the
// patch is aborted after its bound and the pool written again (pool-status.ts). Flushes run one
// at a time, so before the bound one stuck PATCH (a stream hung on the pooled HTTP/2 session:
// undici ends it only after 300 s) held every later status write behind it. The server here is a
// stand-in for the API server that holds the first status PATCH open and answers the next.
import { setTimeout as sleep } from "node:timers/promises";
import { CustomObjectsApi } from "@kubernetes/client-node";
import { afterAll, beforeAll, expect, it } from "vitest";
import { ObjectCache } from "../../../../../controllers/drivers/kubernetes/object-cache.ts";
import type { SandboxObject, SandboxSetObject } from "../../../../../controllers/drivers/kubernetes/objects.ts";
import { PoolStatus } from "../../../../../controllers/drivers/kubernetes/pool-status.ts";
import { GROUP, VERSION } from "../../../../../schema/crd/labels.ts";
import { holdFirstPatch, type HeldPatchServer } from "../../../../support/kube-stand-in.ts";

const set = (status?: object): SandboxSetObject =>
  ({
    apiVersion: `${GROUP}/${VERSION}`,
    kind: "SandboxSet",
    metadata: { name: "s", namespace: "ns", uid: "u1", generation: 1, resourceVersion: status ? "11" : "10" },
    spec: { replicas: 2, template: { spec: { containers: [{ name: "main", image: "python:3.13" }] } } },
    ...(status ? { status } : {}),
  }) as never;

let api: HeldPatchServer;
beforeAll(async () => {
  api = await holdFirstPatch(`/apis/${GROUP}/${VERSION}/namespaces/ns/sandboxsets/s/status`, (body) => set(body.status));
});
afterAll(() => api.close());

it("a status PATCH left unanswered is aborted after its bound and the pool's status written again", { timeout: 15_000 }, async () => {
  const { kc, patches } = api;
  const cache = <T extends SandboxObject | SandboxSetObject>() => new ObjectCache<T>(kc, { path: "/unused", list: async () => ({ items: [] }), slim: (x: T) => x });
  const sandboxSets = cache<SandboxSetObject>();
  sandboxSets.created(set());
  const pools = new PoolStatus({ custom: kc.makeApiClient(CustomObjectsApi), namespace: "ns", sandboxes: cache<SandboxObject>(), sandboxSets, count: () => {}, writeTimeoutMs: 500 });
  try {
    pools.touch("s");
    for (let i = 0; i < 100 && patches.length < 2; i++) await sleep(50);
    expect(patches.map((p) => p.body.status?.replicas)).toEqual([0, 0]);
    // Written again only after the first one's bound (not before: flushes stay one at a time).
    expect(patches[1]!.at - patches[0]!.at).toBeGreaterThanOrEqual(450);
    // The answer of the write that landed is what the agent now reads as the set's status.
    for (let i = 0; i < 20 && !sandboxSets.get("s")?.status; i++) await sleep(25);
    expect((sandboxSets.get("s") as { status?: { replicas?: number } }).status?.replicas).toBe(0);
  } finally {
    pools.stop();
  }
});
