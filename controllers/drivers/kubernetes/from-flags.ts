// Builds and starts the kubernetes driver from the agent's command-line flags:
//   --driver kubernetes [--kubeconfig PATH] [--namespace NS] [--runtime-image IMAGE] [--interpreter-image IMAGE]
//                       [--watch-namespaces A,B | --all-namespaces] [--cluster-cidrs A/8,B/12]
//                       [--cluster-dns kube-system/k8s-app=kube-dns | --cluster-dns 169.254.20.10/32]
//                       [--pod-runtime-tracing (with --otlp-endpoint)] [--native-sidecars auto|on|off]
// Without --kubeconfig the usual lookup applies (KUBECONFIG, ~/.kube/config, or the in-cluster
// service account when running as the Deployment in k8s/).
import { KubeConfig } from "@kubernetes/client-node";
import { logger } from "../../lib/log.ts";
import { countRequests } from "./kube-api.ts";
import { clusterCidrsFlag, clusterDnsFlag, KUBERNETES_FLAGS, nativeSidecarsFlag, podTracingFlag, watchNamespacesFlag } from "./flags.ts";
import { KubernetesDriver, type SandboxRequest } from "./kubernetes-driver.ts";

export async function kubernetesDriverFromFlags(
  flags: { kubeconfig?: string; namespace?: string; "runtime-image"?: string; "interpreter-image"?: string; "watch-namespaces"?: string; "all-namespaces"?: boolean; "cluster-cidrs"?: string; "cluster-dns"?: string; "otlp-endpoint"?: string; "pod-runtime-tracing"?: boolean; "native-sidecars"?: string },
  onChange?: (id: string) => void,
  onRequest?: (req: SandboxRequest) => void,
  /** Pods' runtime tokens derive from it (the agent's cluster token), so a restarted agent can
   * still /init the warm pods it made before. */
  runtimeTokenSecret?: string,
): Promise<KubernetesDriver> {
  const kubeLog = logger("kubernetes");
  const kc = new KubeConfig();
  if (flags.kubeconfig) kc.loadFromFile(flags.kubeconfig);
  else kc.loadFromDefault();
  countRequests(kc);
  const podTracing = podTracingFlag(flags);
  const driver = new KubernetesDriver({
    kubeConfig: kc,
    namespace: flags.namespace ?? "default",
    runtimeImage: flags["runtime-image"] ?? KUBERNETES_FLAGS["runtime-image"].default,
    interpreterImage: flags["interpreter-image"] ?? KUBERNETES_FLAGS["interpreter-image"].default,
    podRuntimeTracing: podTracing,
    onChange,
    onRequest,
    watchNamespaces: watchNamespacesFlag(flags),
    clusterCidrs: clusterCidrsFlag(flags["cluster-cidrs"]),
    clusterDns: clusterDnsFlag(flags["cluster-dns"]),
    nativeSidecars: nativeSidecarsFlag(flags["native-sidecars"]),
    log: (m) => kubeLog.info(m),
    runtimeTokenSecret,
  });
  await driver.start();
  return driver;
}
