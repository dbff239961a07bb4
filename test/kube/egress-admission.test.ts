// k8s/egress-admission.yaml against the real API server: with the policy bound to a namespace, an
// admin's kubectl edit or delete of a sandbox pod's `<pod>-traffic` ConfigMap or `<pod>-egress`
// NetworkPolicy (and its `<pod>-traffic` Secret) is refused while the agent's writes go through, and other ConfigMaps are
// untouched. The test cluster's agent is the user `sandbox-agent`, not a service account: the
// policy's user list is rewritten to it, and the binding limited to this file's namespace.
import { readFileSync } from "node:fs";
import { CoreV1Api } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LABEL } from "../../schema/crd/labels.ts";
import { mergePatch } from "../../controllers/drivers/kubernetes/kube-api.ts";
import { AGENT_USER } from "./support/cluster.ts";
import { freshNamespace, kubeConfig, kubectl, kubectlOk, until } from "./support/namespace.ts";

let ns: string;
const name = `egress-adm-${Math.random().toString(36).slice(2, 8)}`;

beforeAll(async () => {
  ns = await freshNamespace("egress-adm");
  const cm = (n: string, labels: Record<string, string>) => ({ apiVersion: "v1", kind: "ConfigMap", metadata: { name: n, namespace: ns, labels }, data: { "policy.json": "{}" } });
  await kubeConfig("agent").makeApiClient(CoreV1Api).createNamespacedConfigMap({ namespace: ns, body: cm("p1-traffic", { [LABEL.sandboxId]: "p1" }) });
  kubectlOk(["-n", ns, "apply", "-f", "-"], JSON.stringify(cm("mine", {})));
  await kubeConfig("agent").makeApiClient(CoreV1Api).createNamespacedSecret({ namespace: ns, body: { metadata: { name: "p1-traffic", namespace: ns, labels: { [LABEL.sandboxId]: "p1" } }, data: { "ca.key": "a2V5" } } });
  const yaml = readFileSync("k8s/egress-admission.yaml", "utf8")
    .replace("'system:serviceaccount:sandbox-system:sandbox-agent'", `'${AGENT_USER}'`)
    .replaceAll("name: sandbox-egress-objects", `name: ${name}`)
    .replace("policyName: sandbox-egress-objects", `policyName: ${name}`)
    .replace('validationActions: ["Deny"]', `validationActions: ["Deny"]\n  matchResources:\n    namespaceSelector:\n      matchLabels: { kubernetes.io/metadata.name: ${ns} }`);
  kubectlOk(["apply", "-f", "-"], yaml);
});

afterAll(() => {
  kubectl(["delete", "validatingadmissionpolicybinding,validatingadmissionpolicy", name]);
});

describe("egress admission policy", () => {
  it("refuses an admin's edit and delete of a sandbox's policy ConfigMap; the agent still writes it", async () => {
    const patch = JSON.stringify({ data: { "policy.json": '{"egress":null}' } });
    const refused = await until("the policy in force", () => {
      const r = kubectl(["-n", ns, "patch", "configmap", "p1-traffic", "--type", "merge", "-p", patch]);
      return r.status !== 0 && r.stderr;
    });
    expect(refused).toContain("written by the sandbox agent only");
    expect(kubectl(["-n", ns, "delete", "configmap", "p1-traffic"]).stderr).toContain("written by the sandbox agent only");
    // Removing the label is an update of an object that had it: refused too.
    expect(kubectl(["-n", ns, "label", "configmap", "p1-traffic", `${LABEL.sandboxId}-`]).status).not.toBe(0);
    const core = kubeConfig("agent").makeApiClient(CoreV1Api);
    const cur = await core.readNamespacedConfigMap({ namespace: ns, name: "p1-traffic" });
    await core.replaceNamespacedConfigMap({ namespace: ns, name: "p1-traffic", body: { ...cur, data: { "policy.json": '{"v":2}' } } });
    expect((await core.readNamespacedConfigMap({ namespace: ns, name: "p1-traffic" })).data).toEqual({ "policy.json": '{"v":2}' });
    // The pod's Secret (its CA key, secret values) likewise: the agent writes it, an admin cannot.
    expect(kubectl(["-n", ns, "patch", "secret", "p1-traffic", "--type", "merge", "-p", JSON.stringify({ data: { "ca.key": "bWluZQ==" } })]).stderr).toContain("written by the sandbox agent only");
    expect(kubectl(["-n", ns, "delete", "secret", "p1-traffic"]).stderr).toContain("written by the sandbox agent only");
    await core.patchNamespacedSecret({ namespace: ns, name: "p1-traffic", body: { data: { "ca.key": "a2V5Mg==" } } }, mergePatch);
    // An unrelated ConfigMap of the namespace is the tenant's.
    kubectlOk(["-n", ns, "patch", "configmap", "mine", "--type", "merge", "-p", patch]);
  });
});
