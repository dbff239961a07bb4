// The kube API counter's labels: the Kubernetes verb and resource of a request, from its method and
// URL, bounded to a known set of resources.
import { describe, expect, it } from "vitest";
import { requestKind } from "../../../controllers/drivers/kubernetes/kube-api.ts";

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
