// The pure half of a governed pod's egress (traffic-pod.ts): which sandboxes are governed and by
// what, E2B's allowInternetAccess as rules, the NetworkPolicy's extra blocks, what the other
// containers lose, and the agent's --cluster-cidrs flag.
import { describe, expect, it } from "vitest";
import { clusterCidrsFlag } from "../../../../../controllers/drivers/kubernetes/flags.ts";
import { allowedInside, DEFAULT_CLUSTER_CIDRS, injectTraffic, podEgress, podPolicy } from "../../../../../controllers/drivers/kubernetes/traffic-pod.ts";
import { TrafficPolicySet } from "../../../../../controllers/traffic/governed.ts";
import { TrafficPolicySpec } from "../../../../../schema/api/traffic-policy.ts";
import { PodTrafficPolicySchema } from "../../../../../schema/protocol/pod-traffic.ts";

const set = new TrafficPolicySet();
set.replace([
  { team: "team-a", name: "web", spec: TrafficPolicySpec.parse({ selector: { matchLabels: { app: "web" } }, egress: { rules: [{ action: "allow", to: [{ cidr: "10.9.0.7" }, { fqdn: "db.internal" }] }] } }) },
  { team: "team-b", name: "other", spec: TrafficPolicySpec.parse({ egress: { rules: [{ action: "allow", to: [{ cidr: "192.168.1.0/24" }] }] } }) },
  { team: null, name: "base", spec: TrafficPolicySpec.parse({ selector: { matchLabels: { tier: "x" } }, egress: { rules: [{ action: "reject", to: [{ cidr: "0.0.0.0/0" }] }] } }) },
]);

describe("traffic-pod", () => {
  it("E2B's rules as a pod enforces them", () => {
    expect(podEgress({ allowInternetAccess: true })).toBeNull();
    expect(podEgress({ allowInternetAccess: true, egress: { allowOut: [], denyOut: ["1.2.3.4"] } })).toEqual({ allowOut: [], denyOut: ["1.2.3.4"] });
    expect(podEgress({ allowInternetAccess: false })).toEqual({ allowOut: [], denyOut: ["0.0.0.0/0"] });
    expect(podEgress({ allowInternetAccess: false, egress: { allowOut: ["pypi.org"], denyOut: [] } })).toEqual({ allowOut: ["pypi.org"], denyOut: ["0.0.0.0/0"] });
  });

  it("only the policies that select the sandbox (its team's and global ones) travel, and the file parses", () => {
    expect(podPolicy(set, { allowInternetAccess: true, labels: { app: "api" } }, "team-a")).toBeNull();
    const p = podPolicy(set, { allowInternetAccess: true, labels: { app: "web" } }, "team-a")!;
    expect(p.trafficPolicies.map((e) => e.name)).toEqual(["web"]);
    expect(PodTrafficPolicySchema.parse(JSON.parse(JSON.stringify(p)))).toEqual(p);
    expect(podPolicy(set, { allowInternetAccess: true, labels: { tier: "x" } }, "team-c")!.trafficPolicies.map((e) => e.name)).toEqual(["base"]);
  });

  it("the backstop lets through the IPv4 blocks allow rules name inside the cluster's ranges, canonical", () => {
    const p = podPolicy(set, { allowInternetAccess: false, egress: { allowOut: ["172.20.1.9/16", "8.8.8.8", "pypi.org", "fd00::1"], denyOut: [] }, labels: { app: "web" } }, "team-a")!;
    expect(allowedInside(p, DEFAULT_CLUSTER_CIDRS)).toEqual(["10.9.0.7/32", "172.20.0.0/16"]);
  });

  it("the other containers lose NET_ADMIN, NET_RAW and privileged; the pair is added once", () => {
    const spec = { containers: [{ name: "sandbox", image: "x", securityContext: { privileged: true, capabilities: { add: ["CAP_NET_ADMIN", "SYS_TIME"], drop: ["MKNOD"] } } }] };
    injectTraffic(spec, { kind: "sidecar", image: "proxy:1" }, "cm");
    injectTraffic(spec, { kind: "sidecar", image: "proxy:1" }, "cm");
    expect(spec.containers[0]!.securityContext).toEqual({ privileged: false, capabilities: { add: ["SYS_TIME"], drop: ["MKNOD", "NET_ADMIN", "NET_RAW"] } });
    expect(spec.containers.map((c) => c.name)).toEqual(["sandbox", "traffic-proxy"]);
    expect((spec as { initContainers?: { name: string }[] }).initContainers!.map((c) => c.name)).toEqual(["traffic-redirect"]);
  });

  it("--cluster-cidrs takes IPv4 blocks only", () => {
    expect(clusterCidrsFlag(undefined)).toBeUndefined();
    expect(clusterCidrsFlag("10.244.0.0/16, 10.96.0.0/12")).toEqual(["10.244.0.0/16", "10.96.0.0/12"]);
    expect(() => clusterCidrsFlag("10.0.0.0/8,fd00::/8")).toThrow(/fd00::\/8/);
  });
});
