// Starts one real control plane (etcd + kube-apiserver) for the kube tier, installs everything in
// k8s/ with the machine's kubectl (`kubectl apply -k k8s/`), waits for the CRDs to be Established,
// and binds the agent's ClusterRole to the test's agent identity. Tests make a namespace each.
// It also builds the runtime as the pod image does (its bundle and startup snapshot), which the
// tier's pod runtimes start from through the image's entrypoint (support/kube-agent.ts), and makes
// sure the host has the user they run commands as.
import { rmSync } from "node:fs";
import { join, resolve } from "node:path";
import type { TestProject } from "vitest/node";
import { bundleRuntime, bundleRuntimeSnapshot, writeSnapshot } from "../../controllers/runtime/bundle.ts";
import { AGENT_USER, startCluster } from "./support/cluster.ts";
import { ensureTestUser } from "../runtime/support/test-user.ts";

declare module "vitest" {
  export interface ProvidedContext {
    kube: { server: string; version: string; adminKubeconfig: string; agentKubeconfig: string };
    /** The folder of the runtime's bundle and main.blob (k8s/entrypoint.sh's RUNTIME_DIST). */
    runtimeDist: string;
  }
}

export default async function setup(project: TestProject) {
  const started = Date.now();
  // The pods' runtimes run on this host as the template's default user (`user`, as the e2b base
  // image has it): without it every /init is refused ("default user 'user' does not exist") and no
  // member is ever ready at the edge. `npm test` creates it too, so only a kube run on a fresh
  // machine lacked it.
  ensureTestUser();
  // Inside the checkout, as dist/runtime is in the image: the add-ons resolve from node_modules.
  const runtimeDist = join(resolve(import.meta.dirname, "../.."), ".cache", `kube-runtime-${process.pid}`);
  await bundleRuntime(join(runtimeDist, "main.cjs"));
  writeSnapshot(await bundleRuntimeSnapshot(join(runtimeDist, "snapshot.cjs")));
  project.provide("runtimeDist", runtimeDist);
  const cluster = await startCluster();
  try {
    cluster.kubectl(["apply", "-k", "k8s/"]);
    cluster.kubectl(["wait", "--for=condition=Established", "--timeout=60s", "crd", "--all"]);
    cluster.kubectl(["create", "clusterrolebinding", "sandbox-agent-test", "--clusterrole=sandbox-agent", `--user=${AGENT_USER}`]);
    // Each test's namespace is the agent's own: it reads the injection ConfigMaps there.
    cluster.kubectl(["create", "clusterrolebinding", "sandbox-agent-injection-test", "--clusterrole=sandbox-agent-injection-config", `--user=${AGENT_USER}`]);
    cluster.kubectl(["create", "clusterrolebinding", "sandbox-agent-volumes-test", "--clusterrole=sandbox-agent-volumes", `--user=${AGENT_USER}`]);
  } catch (err) {
    await cluster.stop();
    rmSync(runtimeDist, { recursive: true, force: true });
    throw err;
  }
  console.log(`kube tier: kube-apiserver ${cluster.version} at ${cluster.server} (ready and CRDs installed in ${Date.now() - started} ms)`);
  project.provide("kube", { server: cluster.server, version: cluster.version, adminKubeconfig: cluster.adminKubeconfig, agentKubeconfig: cluster.agentKubeconfig });
  return async () => {
    await cluster.stop();
    rmSync(runtimeDist, { recursive: true, force: true });
  };
}
