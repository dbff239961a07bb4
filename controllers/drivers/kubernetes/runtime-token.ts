// Pure: a sandbox pod's runtime is never open. Every pod's agent-runtime gets a token of its own
// from its creation (env RUNTIME_ACCESS_TOKEN from the pod's Secret `<pod>-runtime`), so nothing
// on the pod network can run commands in a warm member before its claim (review 25 H2); the
// claim's /init presents it and sets the claim's token in its place (the old one stops working).
// The token is HMAC(key, namespace/pod): the agent can write Secrets but not read them
// (k8s/rbac.yaml), and derives it again after a restart instead of reading it back.
// Also the namespace's ingress NetworkPolicy: the runtime's ports admit only the agent's namespace.
import { createHmac } from "node:crypto";
import type { V1EnvVar, V1NetworkPolicy, V1OwnerReference, V1PodSpec, V1Secret } from "@kubernetes/client-node";
import { INTERPRETER_PORT, LABEL, RUNTIME_CONTAINER, RUNTIME_PORT } from "../../../schema/crd/labels.ts";
import { HEALTH_PORT, RUNTIME_SECRET_SUFFIX } from "./traffic-pod.ts";

/** The variable the runtime reads its initial token from (controllers/runtime/cli.ts). */
export const RUNTIME_TOKEN_ENV = "RUNTIME_ACCESS_TOKEN";
export const RUNTIME_TOKEN_KEY = "token";
const LABEL_TEXT = "kruise-edge runtime pod token v1";

export function runtimeTokenSecretName(pod: string): string {
  return `${pod}${RUNTIME_SECRET_SUFFIX}`;
}

/** The pod's token (base64url of an HMAC-SHA256: 43 characters). */
export function podRuntimeToken(key: string, namespace: string, pod: string): string {
  return createHmac("sha256", key).update(`${LABEL_TEXT}\n${namespace}/${pod}`).digest("base64url");
}

/** The key the agent derives pod tokens with, from a secret it keeps across restarts. */
export function runtimeTokenKey(secret: string): string {
  return createHmac("sha256", secret).update(LABEL_TEXT).digest("base64url");
}

export function runtimeTokenSecret(o: { pod: string; namespace: string; labels: Record<string, string>; owner: V1OwnerReference }, token: string): V1Secret {
  return {
    apiVersion: "v1",
    kind: "Secret",
    type: "Opaque",
    metadata: { name: runtimeTokenSecretName(o.pod), namespace: o.namespace, labels: o.labels, ownerReferences: [o.owner] },
    data: { [RUNTIME_TOKEN_KEY]: Buffer.from(token).toString("base64") },
  };
}

/** The runtime container reads its token from the Secret, whatever the template set (a template's
 * own RUNTIME_ACCESS_TOKEN would be a token the tenant knows before the claim). */
export function withRuntimeToken(spec: V1PodSpec, secretName: string): void {
  const rt = spec.containers.find((c) => c.name === RUNTIME_CONTAINER);
  if (!rt) return;
  const env: V1EnvVar = { name: RUNTIME_TOKEN_ENV, valueFrom: { secretKeyRef: { name: secretName, key: RUNTIME_TOKEN_KEY } } };
  rt.env = [...(rt.env ?? []).filter((e) => e.name !== RUNTIME_TOKEN_ENV), env];
}

/** envd's port, the code interpreter's and the traffic-proxy's health port. */
export const RUNTIME_PORTS = [RUNTIME_PORT, INTERPRETER_PORT, HEALTH_PORT] as const;
export const INGRESS_POLICY_NAME = "sandbox-runtime-ingress";

/** Every other TCP port as ranges (NetworkPolicy `endPort`), so user ports stay as open as before. */
function otherTcpRanges(): { protocol: string; port: number; endPort?: number }[] {
  const out: { protocol: string; port: number; endPort?: number }[] = [];
  let from = 1;
  for (const p of [...RUNTIME_PORTS].sort((a, b) => a - b)) {
    if (p > from) out.push({ protocol: "TCP", port: from, endPort: p - 1 });
    from = p + 1;
  }
  out.push({ protocol: "TCP", port: from, endPort: 65535 });
  return out;
}

/** The namespace's ingress policy for sandbox pods: the runtime's ports only from the agent's
 * namespace; other ports (the tenant's own servers) and UDP from anywhere, as without it.
 * Enforced only by a CNI that implements NetworkPolicy. */
export function runtimeIngressPolicy(namespace: string, agentNamespace: string): V1NetworkPolicy {
  return {
    apiVersion: "networking.k8s.io/v1",
    kind: "NetworkPolicy",
    metadata: { name: INGRESS_POLICY_NAME, namespace, labels: { [LABEL.createdBy]: "sandbox" } },
    spec: {
      podSelector: { matchLabels: { [LABEL.createdBy]: "sandbox" } },
      policyTypes: ["Ingress"],
      ingress: [
        { _from: [{ namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": agentNamespace } } }] },
        { ports: [...otherTcpRanges(), { protocol: "UDP", port: 1, endPort: 65535 }] },
      ],
    },
  };
}
