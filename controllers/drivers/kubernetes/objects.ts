// The shapes the kubernetes driver reads and is given (Sandbox, SandboxSet, the desired sandbox
// with its pool, the observation with its endpoint, a user's kubectl request) and the names and
// labels a sandbox's objects carry. Types and pure functions only.
import type { Backstop } from "./traffic-pod.ts";
import type { KubeConfig, KubernetesObject, V1PodTemplateSpec } from "@kubernetes/client-node";
import { createHash } from "node:crypto";
import type { DesiredSandbox, DriverCapabilities, SandboxObservation } from "../driver.ts";
import type { VolumeClaimTemplate } from "./pod-spec.ts";
import type { SandboxStatus } from "./pod-state.ts";
import type { z } from "zod";
import type { AutoPausePolicy } from "../../../schema/api/auto-pause.ts";
import type { Lifecycle } from "../../../schema/api/hooks.ts";

/** A Sandbox object as the driver reads it. */
export interface SandboxObject extends KubernetesObject {
  spec: {
    paused?: boolean;
    template?: V1PodTemplateSpec;
    volumeClaimTemplates?: VolumeClaimTemplate[];
    pauseStrategy?: { type?: string };
    /** Optional components to inject (csi, traffic-proxy); the agent-runtime always is. */
    runtimes?: { name: string }[];
  };
  status?: SandboxStatus;
}

/** A SandboxSet as the driver reads it. */
export interface SandboxSetObject extends KubernetesObject {
  spec: { replicas?: number; template?: V1PodTemplateSpec; volumeClaimTemplates?: VolumeClaimTemplate[]; runtimes?: { name: string }[] };
  status?: { updateRevision?: string };
}

/**
 * The desired state plus where the sandbox belongs. `pool` names the SandboxSet (its template is
 * used, and it owns the sandbox while unclaimed); without it `template` is a SandboxSet name in
 * the namespace, or else an image.
 */
export interface KubeDesiredSandbox extends DesiredSandbox {
  pool?: string;
  /** False while a warm pool member; true once claimed or when created on demand. */
  claimed?: boolean;
  /** Set by the driver for a new sandbox made from a snapshot: the checkpoint its engine restores
   * (checkpoint/snapshots.ts), written on its Sandbox and pod. */
  restoreCheckpointId?: string;
  /** The runtime's access token, sent with freeze/thaw once the sandbox has one. */
  accessToken?: string | null;
  /** When the driver took the claim (ms): its claim-timestamp, written behind it (claim-writes.ts). */
  claimedAt?: number;
}

/** A driver observation plus what only a remote runtime has: where it is and whether it is ready. */
export interface KubeSandboxObservation extends SandboxObservation {
  ready: boolean;
  /** `http://<podIP>:49983` (or the runtime-url annotation) once the pod has an IP. */
  endpoint?: string;
  reason?: string;
}

/** A change a user made to a Sandbox object, for the edge to apply (proposal: agent → edge `requests`). */
export interface SandboxRequest {
  sandboxId: string;
  /** The namespace of the edited Sandbox (the edge acts only when it is the sandbox's team's). */
  namespace: string;
  /** `autoPause`: the Sandbox's probes/autoPausePolicy, in `autoPausePolicy`. */
  action: "pause" | "resume" | "kill" | "autoPause" | "lifecycle";
  autoPausePolicy?: z.input<typeof AutoPausePolicy>;
  /** `lifecycle`: the Sandbox's own hooks (`{}`: none any more). */
  lifecycle?: z.input<typeof Lifecycle>;
  /** A first look after the agent started, at a Sandbox without a policy or hooks (the protocol's
   * `resync`): the edge drops what the Sandbox had given it, if anything. */
  resync?: true;
  /** The edge generation (the agents.kruise.io/edge-generation annotation) the Sandbox showed when
   * the user edited it: the edge refuses an edit made against a generation it has moved past. Read
   * from the edited object itself, so an edit found by the first list after a restart keeps the
   * generation it was made at even when a redelivered intent rewrites the annotation before the
   * agent's link is up. */
  generation: number;
}

/** The sandbox-id label value: the id itself, or (ids over 63 characters, which no label value
 * may hold) a hash of it; the id is then kept in the sandbox-id annotation. */
export function idLabel(id: string): string {
  return id.length <= 63 ? id : `h${createHash("sha256").update(id).digest("hex").slice(0, 40)}`;
}

/** The Sandbox/Pod name for an id: `{pool}-{id}` or `sbx-{id}`. Names may exceed 63 characters. */
export function sandboxName(id: string, pool?: string): string {
  return `${pool ?? "sbx"}-${id}`.slice(0, 253);
}

/** What the kubernetes driver can do (the conformance suite and the edge read it). */
export const KUBERNETES_CAPABILITIES: DriverCapabilities = {
  level: "kubernetes",
  rootView: true,
  networkIsolation: false,
  limits: { cpu: true, memory: true, pids: false },
  freeze: "signal",
  kill: "namespace",
  snapshotFs: false,
  memorySnapshot: false,
  survivesAgentRestart: true,
  hostView: false,
  notes: [
    "the runtime runs in each pod; the agent reaches it at <podIP>:49983 (no host view)",
    "Stop pause deletes the pod and keeps its PVCs; only PVC data survives",
    "filesystem snapshots and exec through the driver are not implemented (use the runtime's envd API)",
    "allowInternetAccess=false, egress rules and TrafficPolicies are enforced by a traffic-proxy sidecar with an nft TPROXY redirect (injection config `traffic-proxy`) and a per-pod NetworkPolicy backstop (needs a CNI that enforces NetworkPolicy)",
  ],
};

export interface KubernetesDriverOptions {
  kubeConfig: KubeConfig;
  namespace: string;
  /** Image of the injected agent-runtime sidecar. */
  runtimeImage: string;
  /** `--pod-runtime-tracing`: each pod's runtime keeps its spans for the agent to collect (pod-spec.ts
   * `traceRuntime`; the agent's controllers/agent/pod-spans.ts). */
  podRuntimeTracing?: boolean;
  /** A secret kept across agent restarts that pods' runtime tokens derive from (runtime-token.ts);
   * the agent passes one derived from its cluster token. Default: random per driver, so a
   * restarted driver cannot /init the warm pods its predecessor made. */
  runtimeTokenSecret?: string;
  /** The agent's namespace: the only one the sandbox namespaces' ingress policy admits to the
   * runtime ports. Default: env POD_NAMESPACE, else `sandbox-system` (k8s/deployment.yaml). */
  agentNamespace?: string;
  /** The agent-runtime's image in a code-interpreter template's pods: the runtime with Python's
   * Jupyter kernel and data libraries (k8s/code-interpreter/Dockerfile), since the
   * sidecar's commands, kernels included, run in its own file system. Default: the flag's. */
  interpreterImage?: string;
  /** How long a snapshot waits for the checkpoint engine (default 60 s, upstream's). */
  checkpointWaitMs?: number;
  /** Told whenever a sandbox's objects change (pod ready, IP assigned, pod lost). */
  onChange?: (id: string) => void;
  /** A user changed a Sandbox with kubectl (patched spec.paused, or deleted it). The edge decides:
   * the driver does not act on it until an intent with a newer generation arrives. */
  onRequest?: (req: SandboxRequest) => void;
  /** Namespaces watched from start() on besides `namespace` (team namespaces: their Sandboxes are
   * adopted, their orphans found, their SandboxSets read after a restart before any intent
   * arrives), or "all": every namespace holding a Sandbox when start() runs (a cluster-wide list,
   * which needs cluster-wide RBAC). Other team namespaces are still watched from their first intent. */
  watchNamespaces?: string[] | "all";
  /** Ranges a governed pod's NetworkPolicy backstop refuses unless a rule allows a block in them
   * (default DEFAULT_CLUSTER_CIDRS: private and shared space, link-local). `--cluster-cidrs`. */
  clusterCidrs?: string[];
  /** Where a governed pod's DNS may go past the backstop (default DEFAULT_CLUSTER_DNS: the
   * kube-dns pods of kube-system). `--cluster-dns`. */
  clusterDns?: Backstop["dns"];
  /** How often the pods' egress ConfigMaps and NetworkPolicies are compared with the server and
   * put back when someone else changed or deleted them (traffic-objects.ts `resync`); 30 s. */
  trafficResyncMs?: number;
  /** Whether the traffic-proxy is a native sidecar (an init container with `restartPolicy:
   * Always`: the template's own init containers are then governed); default: from the API
   * server's version at start() (traffic-pod.ts nativeSidecarsFor). `--native-sidecars`. */
  nativeSidecars?: boolean;
  now?: () => number;
  log?: (msg: string) => void;
}
