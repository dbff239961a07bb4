// The CRDs as platform teams meet them: installed by `kubectl apply -k k8s/`, listed with short
// names and printer columns, defaulted and validated by the API server itself.
import { readFileSync } from "node:fs";
import { beforeAll, describe, expect, inject, it } from "vitest";
import { freshNamespace, kubectl, kubectlOk, table } from "./support/namespace.ts";

let ns: string;
beforeAll(async () => {
  ns = await freshNamespace("crds");
  console.log(`kube-apiserver ${inject("kube").version}`);
});

const sandboxSet = (name: string, spec: string) => `
apiVersion: agents.kruise.io/v1alpha1
kind: SandboxSet
metadata:
  name: ${name}
spec:
${spec}`;

const VALID_TEMPLATE = `  template:
    spec:
      containers:
        - name: sandbox
          image: python:3.12`;

describe("CRDs installed by kubectl apply -k k8s/", () => {
  it("runs against a real kube-apiserver and names its version", () => {
    expect(inject("kube").version).toMatch(/^v1\.\d+\.\d+/);
    const version = JSON.parse(kubectlOk(["version", "-o", "json"])) as { serverVersion: { gitVersion: string } };
    expect(version.serverVersion.gitVersion).toBe(inject("kube").version);
  });

  it("serves all eleven kinds with their short names and scopes", () => {
    const rows = table(kubectlOk(["api-resources", "--api-group", "agents.kruise.io"]));
    const byKind = Object.fromEntries(rows.map((r) => [r.KIND, r]));
    const expected: [string, string, string][] = [
      ["Sandbox", "sbx", "true"],
      ["SandboxSet", "sbs", "true"],
      ["SandboxTemplate", "sbt", "true"],
      ["SandboxClaim", "sbc", "true"],
      ["Checkpoint", "cp", "true"],
      ["SandboxUpdateOps", "suo", "true"],
      ["PoolAutoscaler", "pa", "true"],
      ["TrafficPolicy", "tp", "true"],
      ["GlobalTrafficPolicy", "gtp", "false"],
      ["SecurityProfile", "sp", "true"],
      ["GlobalSecurityProfile", "gsp", "false"],
    ];
    for (const [kind, short, namespaced] of expected) {
      expect(byKind[kind], kind).toBeDefined();
      expect(byKind[kind]!.SHORTNAMES).toBe(short);
      expect(byKind[kind]!.NAMESPACED).toBe(namespaced);
      expect(byKind[kind]!.APIVERSION).toBe("agents.kruise.io/v1alpha1");
    }
    // The agent's Deployment, RBAC and namespace came with the same kustomization.
    expect(kubectlOk(["-n", "sandbox-system", "get", "deployment", "sandbox-agent", "-o", "name"]).trim()).toBe("deployment.apps/sandbox-agent");
    expect(kubectlOk(["get", "clusterrole", "sandbox-agent", "-o", "name"]).trim()).toBe("clusterrole.rbac.authorization.k8s.io/sandbox-agent");
  });

  it("RBAC: the base grants the agent its own namespace only; a team's RoleBinding adds that team; rbac-all-namespaces.yaml every namespace", () => {
    const as = ["--as", "system:serviceaccount:sandbox-system:sandbox-agent"];
    const can = (...where: string[]) => kubectl(["auth", "can-i", "list", "sandboxsets.agents.kruise.io", ...where, ...as]).stdout.trim();
    expect(can("-n", "sandbox-system")).toBe("yes");
    expect(can("-n", ns)).toBe("no");
    expect(can("--all-namespaces")).toBe("no");
    kubectlOk(["apply", "-f", "-"], readFileSync("k8s/rbac-team.example.yaml", "utf8").replaceAll("TEAM", ns));
    expect(can("-n", ns)).toBe("yes");
    expect(can("--all-namespaces")).toBe("no");
    kubectlOk(["apply", "-f", "k8s/rbac-all-namespaces.yaml"]);
    try {
      expect(can("--all-namespaces")).toBe("yes");
    } finally {
      kubectlOk(["delete", "-f", "k8s/rbac-all-namespaces.yaml"]);
    }
  });

  it("kubectl get suo shows PHASE, TOTAL, UPDATED, UPDATING, FAILED, AGE", () => {
    kubectlOk(["-n", ns, "apply", "-f", "-"], `
apiVersion: agents.kruise.io/v1alpha1
kind: SandboxUpdateOps
metadata: { name: bump-image }
spec:
  selector: { matchLabels: { app: agent } }
  patch: { spec: { containers: [{ name: sandbox, image: python:3.13 }] } }
`);
    const out = kubectlOk(["-n", ns, "get", "suo"]);
    expect(out.split("\n")[0]!.split(/\s+/).filter(Boolean)).toEqual(["NAME", "PHASE", "TOTAL", "UPDATED", "UPDATING", "FAILED", "AGE"]);
    const suo = JSON.parse(kubectlOk(["-n", ns, "get", "suo", "bump-image", "-o", "json"])) as { spec: Record<string, unknown> };
    // Defaults from the schema (upstream's webhook defaults): Recreate, one at a time, Running only.
    expect(suo.spec.updateStrategy).toEqual({ type: "Recreate", maxUnavailable: 1 });
    expect(suo.spec.stateFilter).toEqual({ states: ["Running"] });
    expect(suo.spec.paused).toBe(false);
  });

  it("applies SandboxClaim defaults (replicas 1, claimTimeout 1m, createOnNoStock) and shows its columns", () => {
    kubectlOk(["-n", ns, "apply", "-f", "-"], `
apiVersion: agents.kruise.io/v1alpha1
kind: SandboxClaim
metadata: { name: batch }
spec: { templateName: python, envVars: { MODE: eval } }
`);
    const claim = JSON.parse(kubectlOk(["-n", ns, "get", "sbc", "batch", "-o", "json"])) as { spec: Record<string, unknown> };
    expect(claim.spec).toMatchObject({ replicas: 1, claimTimeout: "1m", ttlAfterCompleted: "60m", createOnNoStock: true, waitReadyTimeout: "30s", skipInitRuntime: false });
    const header = kubectlOk(["-n", ns, "get", "sbc"]).split("\n")[0]!.split(/\s+/).filter(Boolean);
    expect(header).toEqual(["NAME", "PHASE", "TEMPLATE", "DESIRED", "CLAIMED", "AGE"]);
  });

  it("rejects invalid SandboxSets with the schema's error, through kubectl apply", () => {
    const negative = kubectl(["-n", ns, "apply", "-f", "-"], sandboxSet("bad-replicas", `  replicas: -1\n${VALID_TEMPLATE}`));
    expect(negative.status).not.toBe(0);
    expect(negative.stderr).toContain("spec.replicas");
    expect(negative.stderr).toMatch(/should be greater than or equal to 0/);

    const both = kubectl(["-n", ns, "apply", "-f", "-"], sandboxSet("bad-both", `  templateRef: { name: other }\n${VALID_TEMPLATE}`));
    expect(both.status).not.toBe(0);
    expect(both.stderr).toContain("exactly one of template and templateRef must be set");

    const noContainers = kubectl(["-n", ns, "apply", "-f", "-"], sandboxSet("bad-pod", "  template:\n    spec:\n      containers: []"));
    expect(noContainers.status).not.toBe(0);
    expect(noContainers.stderr).toContain("spec.template.spec.containers");

    const percent = kubectl(["-n", ns, "apply", "-f", "-"], sandboxSet("bad-percent", `  updateStrategy: { maxUnavailable: lots }\n${VALID_TEMPLATE}`));
    expect(percent.status).not.toBe(0);
    expect(percent.stderr).toContain("must be a non-negative integer or a percentage like 20%");

    expect(kubectl(["-n", ns, "get", "sbs", "bad-replicas"]).status).not.toBe(0);
  });

  it("rejects a SandboxClaim whose replicas change, and a PoolAutoscaler with min > max", () => {
    const changed = kubectl(["-n", ns, "patch", "sbc", "batch", "--type", "merge", "-p", '{"spec":{"replicas":3}}']);
    expect(changed.status).not.toBe(0);
    expect(changed.stderr).toContain("replicas is immutable");

    const pa = kubectl(["-n", ns, "apply", "-f", "-"], `
apiVersion: agents.kruise.io/v1alpha1
kind: PoolAutoscaler
metadata: { name: pa }
spec: { scaleTargetRef: { name: python }, minReplicas: 5, maxReplicas: 2 }
`);
    expect(pa.status).not.toBe(0);
    expect(pa.stderr).toContain("minReplicas must not exceed maxReplicas");
  });

  it("accepts an OpenKruise Agents SandboxSet manifest unchanged and defaults its update budget to 20%", () => {
    kubectlOk(["-n", ns, "apply", "-f", "-"], `
apiVersion: agents.kruise.io/v1alpha1
kind: SandboxSet
metadata:
  name: code-interpreter
spec:
  replicas: 2
  runtimes:
    - name: agent-runtime
  template:
    metadata:
      labels: { app: code-interpreter }
    spec:
      containers:
        - name: sandbox
          image: e2bdev/code-interpreter:latest
          resources: { requests: { cpu: "1", memory: 1Gi }, limits: { cpu: "1", memory: 1Gi } }
  volumeClaimTemplates:
    - metadata: { name: workspace }
      spec: { resources: { requests: { storage: 1Gi } } }
`);
    const sbs = JSON.parse(kubectlOk(["-n", ns, "get", "sbs", "code-interpreter", "-o", "json"])) as { spec: Record<string, unknown> };
    expect(sbs.spec.updateStrategy).toEqual({ maxUnavailable: "20%" });
    // The scale subresource: `kubectl scale` works on SandboxSets.
    kubectlOk(["-n", ns, "scale", "sbs", "code-interpreter", "--replicas=4"]);
    expect(JSON.parse(kubectlOk(["-n", ns, "get", "sbs", "code-interpreter", "-o", "json"])).spec.replicas).toBe(4);
  });

  it("accepts traffic and security policies and rejects a peer with two kinds", () => {
    kubectlOk(["-n", ns, "apply", "-f", "-"], `
apiVersion: agents.kruise.io/v1alpha1
kind: TrafficPolicy
metadata: { name: egress-pypi }
spec:
  selector: { matchLabels: { app: code-interpreter } }
  egress:
    rules:
      - action: allow
        to: [{ fqdn: pypi.org }]
        ports: [{ port: 443 }]
`);
    const tp = JSON.parse(kubectlOk(["-n", ns, "get", "tp", "egress-pypi", "-o", "json"])) as { spec: { priority: number; egress: { rules: { ports: { protocol: string }[] }[] } } };
    expect(tp.spec.priority).toBe(1000);
    expect(tp.spec.egress.rules[0]!.ports[0]!.protocol).toBe("TCP");
    const bad = kubectl(["apply", "-f", "-"], `
apiVersion: agents.kruise.io/v1alpha1
kind: GlobalTrafficPolicy
metadata: { name: bad-peer }
spec:
  egress: { rules: [{ action: reject, to: [{ cidr: 10.0.0.0/8, fqdn: example.com }] }] }
`);
    expect(bad.status).not.toBe(0);
    expect(bad.stderr).toContain("exactly one of cidr, fqdn, service, workload");
  });
});
