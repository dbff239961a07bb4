import { z } from "zod";

/*
 * The injection configuration (OpenKruise Agents `sandbox-injection-config`, §1.1 `runtimes`, §5.1):
 * which containers the kubernetes driver adds to a sandbox pod beside the template's. A ConfigMap
 * holds one key per component, its value the component as JSON:
 *
 *   data:
 *     agent-runtime: '{"kind":"sidecar","image":"…","args":["--port","49983"],"livenessProbe":{…}}'
 *
 * The system ConfigMap (`sandbox-injection-config`, installed by k8s/) holds the defaults; the user
 * ConfigMap (`sandbox-injection-config-user`) replaces whole components by name, and a component
 * it does not name keeps the system's. Both live in the agent's namespace.
 */

export const SYSTEM_INJECTION_CONFIGMAP = "sandbox-injection-config";
export const USER_INJECTION_CONFIGMAP = "sandbox-injection-config-user";

/** Every component, in injection order. A pod's injected containers always come in this order
 * (whatever the order of the ConfigMap's keys or the template's `runtimes`), so a config change
 * never reorders the spec of pods built later against those built before. */
export const INJECTION_COMPONENTS = ["agent-runtime", "csi", "traffic-proxy"] as const;
export type InjectionComponentName = (typeof INJECTION_COMPONENTS)[number];

const name = z.string().regex(/^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/, "a DNS-1123 label");
const quantity = z.string().regex(/^[0-9]+(\.[0-9]+)?(m|k|Ki|Mi|Gi|Ti|M|G|T)?$/, "a Kubernetes quantity such as 100m or 128Mi");
const resourceList = z.strictObject({ cpu: quantity.optional(), memory: quantity.optional(), "ephemeral-storage": quantity.optional() });
const port = z.number().int().min(1).max(65535);

/** The probe shapes the data plane needs (an HTTP GET, a TCP connect or a command). */
export const InjectedProbeSchema = z
  .strictObject({
    httpGet: z.strictObject({ path: z.string().startsWith("/").max(1024), port, scheme: z.enum(["HTTP", "HTTPS"]).optional() }).optional(),
    tcpSocket: z.strictObject({ port }).optional(),
    exec: z.strictObject({ command: z.array(z.string()).min(1) }).optional(),
    initialDelaySeconds: z.number().int().min(0).optional(),
    periodSeconds: z.number().int().min(1).optional(),
    timeoutSeconds: z.number().int().min(1).optional(),
    failureThreshold: z.number().int().min(1).optional(),
    successThreshold: z.number().int().min(1).optional(),
  })
  .refine((p) => [p.httpGet, p.tcpSocket, p.exec].filter(Boolean).length === 1, "exactly one of httpGet, tcpSocket, exec");
export type InjectedProbe = z.infer<typeof InjectedProbeSchema>;

export const InjectionComponentSchema = z.strictObject({
  /** `init`: an init container (runs to completion before the template's); `sidecar`: runs beside them. */
  kind: z.enum(["init", "sidecar"]).default("sidecar"),
  /** The agent-runtime may omit it: the agent's `--runtime-image` is used. */
  image: z.string().min(1).max(512).optional(),
  command: z.array(z.string()).optional(),
  args: z.array(z.string()).optional(),
  env: z.array(z.strictObject({ name: z.string().min(1), value: z.string() })).optional(),
  resources: z.strictObject({ requests: resourceList.optional(), limits: resourceList.optional() }).optional(),
  ports: z.array(z.strictObject({ name: z.string().max(15).optional(), containerPort: port })).optional(),
  volumeMounts: z.array(z.strictObject({ name, mountPath: z.string().startsWith("/"), subPath: z.string().optional(), readOnly: z.boolean().optional() })).optional(),
  /** Pod volumes the component's mounts need that the template does not declare (emptyDir only). */
  volumes: z.array(z.strictObject({ name, emptyDir: z.strictObject({ medium: z.enum(["", "Memory"]).optional(), sizeLimit: quantity.optional() }) })).optional(),
  readinessProbe: InjectedProbeSchema.optional(),
  /** Startup and liveness probes of the data plane (the runtime's /health). */
  startupProbe: InjectedProbeSchema.optional(),
  livenessProbe: InjectedProbeSchema.optional(),
});
export type InjectionComponent = z.infer<typeof InjectionComponentSchema>;

/** The ConfigMap key of the operator's pod policy: `{"allow":["nodeName",...]}`, the fields of a
 * tenant's pod template the driver otherwise refuses because they are the operator's to set
 * (where a pod runs, its priority, its runtime class: review 25 M5). None by default. */
export const POD_POLICY_KEY = "pod-policy";
/** The operator's pod fields a template may set only where `allow` names them (review 25 M5,
 * review 26 M7): where and how a sandbox pod runs. `schedulerName`: a scheduler other than the
 * default may ignore taints (the kubelet does not enforce NoSchedule), placing pods on dedicated
 * or control-plane nodes whatever the tolerations and node selection judges say. */
export const OPERATOR_FIELDS = ["nodeName", "priorityClassName", "runtimeClassName", "schedulerName"] as const;
/** Everything `allow` may name: the OPERATOR_FIELDS (whole), tolerations, nodeSelector and node
 * affinity (also key by key: `tolerationKeys`, `nodeSelectorKeys`; pod (anti-)affinity to the
 * pod's own namespace is the tenant's, to other namespaces' pods only with `affinity` allowed),
 * `resourceClaims` (dynamic resource allocation: the pod's `resourceClaims` and a container's
 * `resources.claims`, devices the quota does not count), `resources` (pod-level requests and
 * limits, k8s 1.32+: the scheduler reserves them, the quota counts containers only) and
 * `overhead` (a RuntimeClass's, which admission fills in; review 27 M2, L5). */
export const POD_POLICY_FIELDS = [...OPERATOR_FIELDS, "tolerations", "nodeSelector", "affinity", "resourceClaims", "resources", "overhead"] as const;
/** The resources a template may name in requests and limits without `resourceKeys`: cpu and
 * memory, which the quota counts (pod-resources.ts), and ephemeral-storage, which it neither
 * counts nor bounds (node disk a template may ask for, uncounted; review 27 L2).
 * Any other key (`nvidia.com/gpu`, `hugepages-2Mi`, ...) needs `resourceKeys`. */
export const ALLOWED_RESOURCES = ["cpu", "memory", "ephemeral-storage"] as const;
const labelKey = z.string().min(1).max(317);
export const PodPolicySchema = z.strictObject({
  allow: z.array(z.enum(POD_POLICY_FIELDS)).max(POD_POLICY_FIELDS.length).default([]),
  /** Taint keys a template may tolerate (a toleration without a key, which tolerates every
   * taint, needs `tolerations` in `allow`). */
  tolerationKeys: z.array(labelKey).max(64).default([]),
  /** Node label keys a template's nodeSelector and node affinity may name. */
  nodeSelectorKeys: z.array(labelKey).max(64).default([]),
  /** Resource names beyond ALLOWED_RESOURCES a template's requests and limits may name, each
   * whole (`nvidia.com/gpu`, `hugepages-2Mi`): the quota does not count them (review 26 M7). */
  resourceKeys: z.array(labelKey).max(64).default([]),
  /** Image repositories an in-place image change (E2B `e2b.agents.kruise.io/image`, a
   * SandboxClaim's `inplaceUpdate.image`) may name, as prefixes of the repository with Docker
   * Hub's defaults filled in (`docker.io/library/python`, `registry.example.com/team-a/`): a
   * prefix ending in `/` takes everything under it, one without it that repository only. None:
   * no in-place image change (review 25 M3: the tenant would name any image on the node, another
   * team's private one included). */
  inplaceImages: z.array(z.string().min(1).max(512)).max(64).default([]),
});
export type PodPolicy = z.infer<typeof PodPolicySchema>;

/** A parsed ConfigMap: the components it names, and its pod policy. */
export type InjectionConfig = Partial<Record<InjectionComponentName, InjectionComponent>> & { [POD_POLICY_KEY]?: PodPolicy };

/** The built-in defaults, used until a system ConfigMap is read (and where it names no agent-runtime):
 * the runtime on 49983 with a readiness probe, as the driver always injected it. */
export const BUILTIN_INJECTION: InjectionConfig = {
  "agent-runtime": {
    kind: "sidecar",
    args: ["--port", "49983"],
    ports: [{ name: "envd", containerPort: 49983 }],
    readinessProbe: { httpGet: { path: "/health", port: 49983 }, periodSeconds: 1 },
  },
};

/** Parses a ConfigMap's `data`: every key must be a component and every value one as JSON. */
export function parseInjectionConfig(data: Record<string, string> | undefined): { ok: true; config: InjectionConfig } | { ok: false; message: string } {
  const config: InjectionConfig = {};
  for (const [key, raw] of Object.entries(data ?? {})) {
    if (key !== POD_POLICY_KEY && !(INJECTION_COMPONENTS as readonly string[]).includes(key)) return { ok: false, message: `key "${key}" is no component (${INJECTION_COMPONENTS.join(", ")}) nor ${POD_POLICY_KEY}` };
    let json: unknown;
    try {
      json = JSON.parse(raw);
    } catch (err) {
      return { ok: false, message: `${key}: not JSON: ${(err as Error).message}` };
    }
    if (key === POD_POLICY_KEY) {
      const policy = PodPolicySchema.safeParse(json);
      if (!policy.success) return { ok: false, message: `${key}: ${policy.error.issues[0]!.path.join(".") || "(value)"}: ${policy.error.issues[0]!.message}` };
      config[POD_POLICY_KEY] = policy.data;
      continue;
    }
    const parsed = InjectionComponentSchema.safeParse(json);
    if (!parsed.success) {
      const issue = parsed.error.issues[0]!;
      return { ok: false, message: `${key}: ${issue.path.join(".") || "(value)"}: ${issue.message}` };
    }
    if (key !== "agent-runtime" && !parsed.data.image) return { ok: false, message: `${key}: image: required (only the agent-runtime defaults to the agent's --runtime-image)` };
    config[key as InjectionComponentName] = parsed.data;
  }
  return { ok: true, config };
}

/** The components in force: the user's replace the system's by name; the rest keep the system's,
 * and the built-in agent-runtime stands where neither names one. */
export function mergeInjection(system: InjectionConfig, user: InjectionConfig): InjectionConfig {
  return { ...BUILTIN_INJECTION, ...system, ...user };
}
