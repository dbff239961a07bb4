// A Sandbox status write the API server never answers fails after its bound instead of holding
// the sandbox's later writes: each sandbox's writes run one at a time (its converge chain), so a
// PATCH whose stream hung on the pooled HTTP/2 session (undici ends it only after 300 s) kept every
// later status of that sandbox (Ready, a failure's reason) off the object kubectl shows. The server
// here is a stand-in for the API server that holds the first status PATCH open and answers the next.
import { CoreV1Api, CustomObjectsApi } from "@kubernetes/client-node";
import { afterAll, beforeAll, expect, it } from "vitest";
import type { DriverContext } from "../../../../../controllers/drivers/kubernetes/context.ts";
import { ObjectCache } from "../../../../../controllers/drivers/kubernetes/object-cache.ts";
import type { SandboxObject } from "../../../../../controllers/drivers/kubernetes/objects.ts";
import { StatusWriter, StatusWriteTimeout } from "../../../../../controllers/drivers/kubernetes/status-writer.ts";
import { GROUP, VERSION } from "../../../../../schema/crd/labels.ts";
import { holdFirstPatch, type HeldPatchServer } from "../../../../support/kube-stand-in.ts";

const sandbox = (status?: object, rv = "10"): SandboxObject =>
  ({
    apiVersion: `${GROUP}/${VERSION}`,
    kind: "Sandbox",
    metadata: { name: "sbx-a", namespace: "ns", uid: "u1", generation: 1, resourceVersion: rv, creationTimestamp: "2026-12-05T00:00:00Z" },
    spec: { template: { spec: { containers: [{ name: "main", image: "python:3.13" }] } } },
    ...(status ? { status } : {}),
  }) as never;

let api: HeldPatchServer;
beforeAll(async () => {
  api = await holdFirstPatch(`/apis/${GROUP}/${VERSION}/namespaces/ns/sandboxes/sbx-a/status`, (body) => sandbox(body.status, "11"));
});
afterAll(() => api.close());

it("a Sandbox status PATCH left unanswered fails after its bound, and the sandbox's next write lands", { timeout: 15_000 }, async () => {
  const { kc, patches } = api;
  const sandboxes = new ObjectCache<SandboxObject>(kc, { path: "/unused", list: async () => ({ items: [] }), slim: (x: SandboxObject) => x });
  sandboxes.created(sandbox());
  const ctx = {
    core: kc.makeApiClient(CoreV1Api),
    custom: kc.makeApiClient(CustomObjectsApi),
    patchJson: async () => ({}),
    count: () => {},
    now: () => Date.parse("2026-12-05T00:00:01Z"),
    log: () => {},
    scopeOf: () => ({ namespace: "ns", sandboxes }),
    sandbox: (id: string) => sandboxes.get(id),
    pod: () => undefined,
  } as unknown as DriverContext;
  const writer = new StatusWriter(ctx, { writeTimeoutMs: 500 });

  // The first write's PATCH is never answered: the write fails (the converge chain's error path
  // retries it), not waits on it (without the bound it waits past this test's timeout).
  const started = Date.now();
  const err = await writer.write("sbx-a").catch((e: unknown) => e);
  expect(err).toBeInstanceOf(StatusWriteTimeout);
  expect((err as Error).message).toBe("status of sandbox sbx-a: no answer from the API server in 500 ms");
  // Aborted at its bound, not at once (a refusal would not be this error).
  expect(Date.now() - started).toBeGreaterThanOrEqual(450);
  expect(patches).toHaveLength(1);

  // The next write of the same sandbox goes out and its answer is what the driver now reads.
  await writer.write("sbx-a");
  expect(patches).toHaveLength(2);
  expect(patches[1]!.body.status?.phase).toBe(patches[0]!.body.status?.phase);
  expect(writer.wrote("sbx-a", sandboxes.get("sbx-a")!)).toBe(true);
});
