// A team namespace the agent may not read yet (k8s/rbac.yaml grants the agent per namespace, by a
// RoleBinding a platform team may create after the team's first sandbox): the first list is
// refused (403), the ensure fails, and once the RoleBinding exists the next ensure watches the
// namespace, its sandbox is made, and its status follows its pod (the Sandbox shows Ready True,
// written from the pod's change, not by the ensure). The agent is a user with no cluster-wide
// binding (the admin's credentials impersonating it), so the grant is a RoleBinding as in an install.
import { afterAll, describe, expect, it } from "vitest";
import { KubernetesDriver, type KubeDesiredSandbox } from "../../controllers/drivers/kubernetes/kubernetes-driver.ts";
import { TestKubelet } from "./support/kubelet.ts";
import { freshNamespace, kubeConfig, kubectlOk, until } from "./support/namespace.ts";

let driver: KubernetesDriver | undefined;
let kubelet: TestKubelet | undefined;

afterAll(async () => {
  await driver?.stop();
  await kubelet?.stop();
});

describe("a namespace whose first list is refused", () => {
  it("is listed again by the next ensure once RBAC allows it, and its sandboxes' statuses follow their pods", async () => {
    const home = await freshNamespace("late-home");
    const team = await freshNamespace("late-team");
    const user = `late-agent-${home}`;
    kubectlOk(["-n", home, "create", "rolebinding", "agent", "--clusterrole=sandbox-agent", `--user=${user}`]);
    const kc = kubeConfig();
    const me = kc.getCurrentUser()!.name;
    kc.users = kc.users.map((u) => (u.name === me ? { ...u, impersonateUser: user } : u));
    driver = new KubernetesDriver({ kubeConfig: kc, namespace: home, runtimeImage: "ghcr.io/kruise-edge/sandbox-agent:test" });
    await driver.start();
    kubelet = new TestKubelet(kubeConfig(), team);
    await kubelet.start();
    const d: KubeDesiredSandbox = { id: "late1", generation: 1, template: "python:3.12", namespace: team, state: "Running", pauseStrategy: "Stop", resources: { cpuCount: 1, memoryMB: 512 }, allowInternetAccess: true, claimed: true };

    await expect(driver.ensure(d)).rejects.toThrow(/forbidden/i);
    kubectlOk(["-n", team, "create", "rolebinding", "agent", "--clusterrole=sandbox-agent", `--user=${user}`]);
    // The API server's RBAC cache takes the binding shortly: the reconciler's retries, as ensures.
    await until("the ensure that lists the namespace again", () => driver!.ensure(d).then(() => true, () => false));
    await until("the Sandbox Ready, written from its pod's change", () => {
      const sbx = JSON.parse(kubectlOk(["-n", team, "get", "sandboxes", "-o", "json"])) as { items: { status?: { conditions?: { type: string; status: string }[] } }[] };
      return sbx.items[0]?.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True");
    });
    expect((await driver.observe("late1"))?.ready).toBe(true);
  });
});
