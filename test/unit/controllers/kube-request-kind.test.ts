// The kube API counter's labels: the Kubernetes verb and resource of a request, from its method and
// URL, bounded to a known set of resources; and the counter itself, fed by a real client's requests
// to a stand-in API server on loopback.
import { createServer } from "node:http";
import { CoreV1Api, KubeConfig } from "@kubernetes/client-node";
import { describe, expect, it } from "vitest";
import { countRequests, requestKind } from "../../../controllers/drivers/kubernetes/kube-api.ts";
import { registry } from "../../../controllers/lib/metrics.ts";
import { parsePrometheus, value } from "../../support/prometheus-text.ts";

const S = "https://10.0.0.1:6443";

describe("requestKind", () => {
  it("names core and custom resources, namespaced or not, by Kubernetes verb", () => {
    expect(requestKind("GET", `${S}/api/v1/namespaces/team-a/pods/sbx-1`)).toEqual({ verb: "get", resource: "pods" });
    expect(requestKind("GET", `${S}/api/v1/namespaces/team-a/pods?labelSelector=x`)).toEqual({ verb: "list", resource: "pods" });
    expect(requestKind("GET", `${S}/api/v1/namespaces/team-a/pods?watch=true&resourceVersion=5`)).toEqual({ verb: "watch", resource: "pods" });
    expect(requestKind("POST", `${S}/api/v1/namespaces/team-a/events`)).toEqual({ verb: "create", resource: "events" });
    expect(requestKind("PATCH", `${S}/apis/agents.kruise.io/v1alpha1/namespaces/ns/sandboxes/s1/status`)).toEqual({ verb: "patch", resource: "sandboxes" });
    expect(requestKind("PUT", `${S}/apis/agents.kruise.io/v1alpha1/namespaces/ns/sandboxsets/p`)).toEqual({ verb: "update", resource: "sandboxsets" });
    expect(requestKind("DELETE", `${S}/api/v1/namespaces/ns/pods/p1`)).toEqual({ verb: "delete", resource: "pods" });
    expect(requestKind("DELETE", `${S}/api/v1/namespaces/ns/pods`)).toEqual({ verb: "deletecollection", resource: "pods" });
    expect(requestKind("GET", `${S}/api/v1/namespaces`)).toEqual({ verb: "list", resource: "namespaces" });
    expect(requestKind("GET", `${S}/apis/agents.kruise.io/v1alpha1/sandboxclaims`)).toEqual({ verb: "list", resource: "sandboxclaims" });
  });

  it("keeps the label set bounded: unknown resources and methods are `other`", () => {
    expect(requestKind("GET", `${S}/api/v1/namespaces/ns/made-up-${Math.random()}`)).toEqual({ verb: "list", resource: "other" });
    expect(requestKind("OPTIONS", `${S}/version`)).toEqual({ verb: "other", resource: "other" });
  });
});

describe("countRequests", () => {
  it("counts each request a KubeConfig's clients make, by verb and resource, in the agent's registry", async () => {
    // A stand-in API server on loopback: an empty pod list, and one pod by name.
    const server = createServer((req, res) => {
      res.setHeader("content-type", "application/json");
      if (req.url?.startsWith("/api/v1/namespaces/team-a/pods/p1")) res.end(JSON.stringify({ apiVersion: "v1", kind: "Pod", metadata: { name: "p1", namespace: "team-a" } }));
      else res.end(JSON.stringify({ apiVersion: "v1", kind: "PodList", metadata: {}, items: [] }));
    });
    await new Promise<void>((ok) => server.listen(0, "127.0.0.1", ok));
    try {
      const port = (server.address() as { port: number }).port;
      const kc = new KubeConfig();
      kc.loadFromOptions({
        clusters: [{ name: "c", server: `http://127.0.0.1:${port}`, skipTLSVerify: true }],
        users: [{ name: "u", token: "t" }],
        contexts: [{ name: "x", cluster: "c", user: "u" }],
        currentContext: "x",
      });
      countRequests(kc);
      const count = async (labels: Record<string, string>) => value(parsePrometheus(await registry.metrics()), "sandbox_agent_kube_api_requests_total", labels);
      const list0 = await count({ verb: "list", resource: "pods" });
      const get0 = await count({ verb: "get", resource: "pods" });
      const api = kc.makeApiClient(CoreV1Api);
      await api.listNamespacedPod({ namespace: "team-a" });
      await api.listNamespacedPod({ namespace: "team-a" });
      await api.readNamespacedPod({ namespace: "team-a", name: "p1" });
      expect(await count({ verb: "list", resource: "pods" })).toBe(list0 + 2);
      expect(await count({ verb: "get", resource: "pods" })).toBe(get0 + 1);
    } finally {
      server.close();
    }
  });
});
