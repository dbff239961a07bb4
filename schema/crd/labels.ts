// Label and annotation keys on Sandboxes, Pods and PVCs (OpenKruise Agents §1.1.4). Manifests
// written for OpenKruise Agents select on these, so the spelling is the interface.

export const GROUP = "agents.kruise.io";
export const VERSION = "v1alpha1";
export const API_VERSION = `${GROUP}/${VERSION}`;

export const LABEL = {
  /** Owning SandboxSet name (unclaimed and claimed members). */
  pool: "agents.kruise.io/sandbox-pool",
  /** SandboxSet name or templateRef name the sandbox was built from. */
  template: "agents.kruise.io/sandbox-template",
  /** `"false"` while in the warm pool, `"true"` once claimed. */
  claimed: "agents.kruise.io/sandbox-claimed",
  /** Pool revision (`SandboxSet.status.updateRevision`) at creation. */
  templateHash: "agents.kruise.io/template-hash",
  /** The sandbox id. Objects are found by this label, never by name, so names may exceed 63 characters. */
  sandboxId: "agents.kruise.io/sandbox-id",
  /** Claim name (SandboxClaim). */
  claimName: "agents.kruise.io/claim-name",
  /** `sandbox` on every pod this driver created; the pod informer selects on it. */
  createdBy: "agents.kruise.io/created-by",
  /** Name of the Sandbox a pod or PVC belongs to (TrafficPolicy selectors target it). */
  sandboxName: "agents.kruise.io/sandbox-name",
  allowInternetAccess: "agents.kruise.io/allow-internet-access",
  /** On a pod built with the traffic-proxy pair (the informer's slim pods keep labels, not
   * containers): `governed` when a policy governed it from the start, `open` otherwise. A governed
   * sandbox's pod without `governed` is replaced (an open pod's policy would tighten only after the
   * kubelet's ConfigMap refresh, up to a minute). */
  trafficProxy: "agents.kruise.io/traffic-proxy",
} as const;

export const ANNOTATION = {
  /** The full sandbox id (the label holds a hash when the id is longer than 63 characters). */
  sandboxId: "agents.kruise.io/sandbox-id",
  /** The edge generation the object was last written for (the agent's observedGeneration). */
  generation: "agents.kruise.io/edge-generation",
  /** RFC3339 claim time (E2B `startedAt`). */
  claimTimestamp: "agents.kruise.io/claim-timestamp",
  /** Overrides `http://<podIP>:49983` as the runtime's address. */
  runtimeUrl: "agents.kruise.io/runtime-url",
  /** UID of the pod whose processes the runtime froze (Freeze pause); absent when not frozen. */
  frozenPod: "agents.kruise.io/frozen-pod",
  /** `"true"`/`"false"`: the pause the edge last asked for. A spec.paused that differs was set by a
   * user (kubectl patch) and is reported to the edge as a request. */
  desiredPaused: "agents.kruise.io/desired-paused",
  /** How the sandbox pauses (`Freeze` keeps the pod, `Stop` deletes it and keeps its PVCs). */
  pauseStrategy: "agents.kruise.io/pause-strategy",
  /** JSON of the last in-place update applied to the running pod (a claim's `inplaceUpdate`). */
  inplaceUpdate: "agents.kruise.io/inplace-update",
  /** JSON `[]CSIMountConfig`: the claim's dynamic mounts, made after claim and after every resume. */
  csiVolumeConfig: "e2b.agents.kruise.io/csi-volume-config",
  /** UID of the pod whose CSI mounts were made (a new pod, after a Stop resume, mounts again). */
  csiMountedPod: "agents.kruise.io/csi-mounted-pod",
  /** The edge template revision the Sandbox's template is from; a claimed sandbox asked for
   * another one is recreated (an update ops run's Recreate: a new pod, the PVCs kept). */
  revision: "agents.kruise.io/edge-revision",
} as const;

/** Finalizer that keeps a Sandbox until its pod is gone (added by this agent on create). */
export const SANDBOX_FINALIZER = "agents.kruise.io/sandbox";

/** Prefixes reserved for the system; user labels and annotations may not use them. */
export const RESERVED_PREFIXES = ["agents.kruise.io/", "e2b.agents.kruise.io/"] as const;

/** The agent-runtime's port in every sandbox pod (envd's). */
export const RUNTIME_PORT = 49983;
/** E2B's code interpreter port: the agent-runtime serves it in a code-interpreter template's pod. */
export const INTERPRETER_PORT = 49999;
/** Name of the injected agent-runtime container. */
export const RUNTIME_CONTAINER = "agent-runtime";
