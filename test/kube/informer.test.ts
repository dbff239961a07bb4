// The informer every piece of the agent watches through (ObjectCache), and the test's kubelet and
// runtime launcher built on it, against the real API server: a watch that keeps failing is retried
// with a growing delay (it was a loop of some 160 requests a second), a quiet watch that ends at
// the client's inactivity bound is resumed at once and is no error, and the test's kubelet and
// runtime launcher still serve pods made after such quiet spells (the launcher's bare watch ended
// for good after 30 s without an event, and a kubelet status write lost once left a pod Pending).
import { CoreV1Api, type V1Pod } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ObjectCache } from "../../controllers/drivers/kubernetes/object-cache.ts";
import { ANNOTATION } from "../../schema/crd/labels.ts";
import { runRuntimes } from "./support/kube-agent.ts";
import { podCache, TestKubelet } from "./support/kubelet.ts";
import { freshNamespace, kubeConfig, until } from "./support/namespace.ts";

const QUIET_MS = 300;
let ns: string;
const core = () => kubeConfig().makeApiClient(CoreV1Api);
const makePod = (name: string) => core().createNamespacedPod({ namespace: ns, body: { metadata: { name }, spec: { containers: [{ name: "sandbox", image: "python:3.12" }] } } });

beforeAll(async () => {
  ns = await freshNamespace("informer");
});

describe("ObjectCache", () => {
  it("retries a watch that keeps failing with a growing delay, not in a loop of requests", async () => {
    const errors: number[] = [];
    const start = Date.now();
    const cache = new ObjectCache(kubeConfig(), {
      path: `/apis/agents.kruise.io/v1alpha1/namespaces/${ns}/nosuchthings`,
      list: async () => ({ items: [], metadata: { resourceVersion: "1" } }),
      slim: (raw) => raw,
      onError: () => errors.push(Date.now() - start),
    });
    await cache.start();
    await new Promise((r) => setTimeout(r, 2000));
    await cache.stop();
    // 0, +0.5 s, +1 s, (+2 s): three or four attempts in two seconds.
    expect(errors.length).toBeGreaterThanOrEqual(2);
    expect(errors.length).toBeLessThanOrEqual(5);
  });

  it("resumes a quiet watch at once, without calling it an error, and sees what is made after", async () => {
    let errors = 0;
    const seen: string[] = [];
    const cache = podCache(kubeConfig(), ns, QUIET_MS);
    const withErrors = new ObjectCache<V1Pod>(kubeConfig(), {
      path: `/api/v1/namespaces/${ns}/pods`,
      list: () => core().listNamespacedPod({ namespace: ns }),
      slim: (raw: V1Pod) => raw,
      watchTimeoutMs: QUIET_MS,
      onError: () => errors++,
    });
    withErrors.onChange((p, verb) => verb === "add" && seen.push(p.metadata!.name!));
    await Promise.all([cache.start(), withErrors.start()]);
    await new Promise((r) => setTimeout(r, 4 * QUIET_MS));
    await makePod("after-quiet");
    // Two watches of their own, each resuming on its own schedule: each sees it in its time.
    await until("the new pod seen by both caches", () => seen.includes("after-quiet") && cache.get("after-quiet") !== undefined, 5000);
    expect(errors).toBe(0);
    await Promise.all([cache.stop(), withErrors.stop()]);
  });
});

describe("the test's kubelet and runtime launcher", () => {
  let kubelet: TestKubelet;
  let runtimes: { stop(): Promise<void> };

  beforeAll(async () => {
    kubelet = new TestKubelet(kubeConfig(), ns, { watchTimeoutMs: QUIET_MS });
    await kubelet.start();
    runtimes = await runRuntimes(ns, { watchTimeoutMs: QUIET_MS });
  });
  afterAll(async () => {
    await runtimes?.stop();
    await kubelet?.stop();
  });

  it("serve a pod made after their watches went quiet: Ready, with a runtime at its runtime-url", async () => {
    await new Promise((r) => setTimeout(r, 4 * QUIET_MS));
    await makePod("late");
    const pod = await until("Ready with a runtime-url", async () => {
      const p = await core().readNamespacedPod({ name: "late", namespace: ns });
      const ready = p.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True");
      return ready && p.metadata?.annotations?.[ANNOTATION.runtimeUrl] ? p : undefined;
    }, 15_000);
    const health = await fetch(`${pod.metadata!.annotations![ANNOTATION.runtimeUrl]}/health`);
    expect(health.status).toBeLessThan(300);
  });
});
