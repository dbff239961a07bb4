// The CustomResourceDefinitions of agents.kruise.io/v1alpha1 (OpenKruise Agents §1), the one
// source of k8s/crd/*.yaml (`node scripts/gen-crds.ts` writes them; the kube suite fails when they
// drift). Validation the upstream webhooks do is expressed as OpenAPI bounds and CEL rules here,
// so the API server itself rejects a bad spec.
import {
  arr,
  bool,
  conditions,
  countOrPercent,
  crd,
  enumOf,
  free,
  int32,
  int64,
  labelSelector,
  obj,
  pauseStrategy,
  persistentContents,
  podTemplate,
  runtimes,
  str,
  stringMap,
  templateRef,
  time,
  volumeClaimTemplate,
  type Schema,
} from "./openapi.ts";

/** A Go duration such as `30s`, `1m`, `1h30m`; `negative` also allows a leading minus. */
const duration = (extra: Schema = {}, negative = false): Schema =>
  str({ pattern: `^${negative ? "-?" : ""}([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`, ...extra });
const atLeastOneSecond = { "x-kubernetes-validations": [{ rule: "duration(self) >= duration('1s')", message: "must be at least 1s" }] };
const immutable = (field: string) => ({ "x-kubernetes-validations": [{ rule: "self == oldSelf", message: `${field} is immutable` }] });
const oneTemplate = { rule: "has(self.template) != has(self.templateRef)", message: "exactly one of template and templateRef must be set" };

const exec = obj({ command: arr(str(), { minItems: 1 }) }, { required: ["command"] });
const hook = obj({ exec, timeoutSeconds: int32({ minimum: 1, default: 60 }) }, { required: ["exec"] });
const lifecycle = obj({ preUpgrade: hook, postUpgrade: hook });
/** A Sandbox's own hooks (this platform's superset of upstream's, schema/api/hooks.ts): exec or
 * HTTP to a sandbox port, with a failure policy, for pause and resume too. The agent checks that a
 * hook has exactly one of exec and http (a Warning Event on the Sandbox otherwise). */
const sandboxHook = obj({
  exec,
  http: obj({ port: int32({ minimum: 1, maximum: 65535 }), path: str(), method: enumOf(["GET", "POST"]) }, { required: ["port"] }),
  timeoutSeconds: int32({ minimum: 1, maximum: 600, default: 60 }),
  failurePolicy: enumOf(["Fail", "Ignore"], { default: "Fail" }),
});
const sandboxLifecycle = obj({ prePause: sandboxHook, postResume: sandboxHook, preUpgrade: sandboxHook, postUpgrade: sandboxHook });

const probe = free({ properties: { name: str({ minLength: 1 }), containerName: str() }, required: ["name"] });
const autoPausePolicy = obj({
  pause: obj({
    whenProbedIdleState: obj({ probe: str(), messageRegex: str({ minLength: 1 }), thresholdDuration: duration() }, { required: ["probe", "messageRegex", "thresholdDuration"] }),
  }),
  resume: obj({
    whenProbedScheduleTime: obj(
      { probe: str(), timeFormat: enumOf(["unix", "datetime"], { default: "unix" }), leadTime: duration({ default: "5m" }) },
      { required: ["probe"] },
    ),
  }),
});

/** Fields Sandbox, SandboxSet and SandboxTemplate share. */
const templateFields = {
  template: podTemplate,
  templateRef,
  volumeClaimTemplates: arr(volumeClaimTemplate),
  persistentContents,
  runtimes,
  pauseStrategy,
};

export const sandbox = crd({
  kind: "Sandbox",
  plural: "sandboxes",
  shortNames: ["sbx"],
  spec: obj({
    ...templateFields,
    paused: bool({ default: false }),
    shutdownTime: time(),
    pauseTime: time(),
    lifecycle: sandboxLifecycle,
    upgradePolicy: obj({ type: enumOf(["Recreate", "CheckpointRestore"]) }),
    probes: arr(probe),
    autoPausePolicy,
  }),
  specRules: [oneTemplate],
  status: obj({
    observedGeneration: int64(),
    phase: enumOf(["Pending", "Running", "Paused", "Resuming", "Upgrading", "Succeeded", "Failed", "Recycling", "Terminating"]),
    message: str(),
    conditions,
    podInfo: obj({ annotations: stringMap(), labels: stringMap(), nodeName: str(), podIP: str(), podUID: str() }),
    nodeName: str(),
    sandboxIp: str(),
    updateRevision: str(),
    recycledCount: int32(),
    schedules: arr(obj({ reason: str(), nextResumeTime: time(), nextPauseTime: time() })),
  }),
  columns: [
    { name: "STATUS", type: "string", jsonPath: ".status.phase" },
    { name: "CLAIMED", type: "string", jsonPath: ".metadata.labels.agents\\.kruise\\.io/sandbox-claimed" },
    { name: "SHUTDOWN_TIME", type: "date", jsonPath: ".spec.shutdownTime" },
    { name: "PAUSE_TIME", type: "date", jsonPath: ".spec.pauseTime" },
    { name: "AGE", type: "date", jsonPath: ".metadata.creationTimestamp" },
    { name: "RECYCLED", type: "integer", jsonPath: ".status.recycledCount", priority: 1 },
    { name: "MESSAGE", type: "string", jsonPath: ".status.message", priority: 1 },
  ],
});

export const sandboxSet = crd({
  kind: "SandboxSet",
  plural: "sandboxsets",
  shortNames: ["sbs"],
  spec: obj({
    ...templateFields,
    replicas: int32({ minimum: 0, default: 0 }),
    scaleStrategy: obj({ maxUnavailable: countOrPercent() }),
    updateStrategy: obj({ maxUnavailable: countOrPercent({ default: "20%" }) }, { default: {} }),
  }),
  specRules: [oneTemplate],
  status: obj({
    observedGeneration: int64(),
    replicas: int32(),
    availableReplicas: int32(),
    updatedReplicas: int32(),
    updatedAvailableReplicas: int32(),
    updateRevision: str(),
    currentRevision: str(),
    selector: str(),
    conditions,
  }),
  scale: { specReplicasPath: ".spec.replicas", statusReplicasPath: ".status.replicas", labelSelectorPath: ".status.selector" },
  columns: [
    { name: "DESIRED", type: "integer", jsonPath: ".spec.replicas" },
    { name: "REPLICAS", type: "integer", jsonPath: ".status.replicas" },
    { name: "AVAILABLE", type: "integer", jsonPath: ".status.availableReplicas" },
    { name: "UPDATED", type: "integer", jsonPath: ".status.updatedReplicas" },
    { name: "UPDATED_AVAILABLE", type: "integer", jsonPath: ".status.updatedAvailableReplicas" },
    // A rollout is done when the two revisions agree and UPDATED_AVAILABLE equals DESIRED.
    { name: "CURRENT_REVISION", type: "string", jsonPath: ".status.currentRevision" },
    { name: "UPDATE_REVISION", type: "string", jsonPath: ".status.updateRevision" },
    { name: "AGE", type: "date", jsonPath: ".metadata.creationTimestamp" },
  ],
});

export const sandboxTemplate = crd({
  kind: "SandboxTemplate",
  plural: "sandboxtemplates",
  shortNames: ["sbt"],
  spec: obj(templateFields),
  specRules: [{ rule: "has(self.template)", message: "template is required" }],
  columns: [],
});

export const sandboxClaim = crd({
  kind: "SandboxClaim",
  plural: "sandboxclaims",
  shortNames: ["sbc"],
  spec: obj(
    {
      templateName: str({ minLength: 1 }),
      replicas: int32({ minimum: 1, default: 1, ...immutable("replicas") }),
      shutdownTime: time(),
      claimTimeout: duration({ default: "1m", ...atLeastOneSecond }),
      ttlAfterCompleted: duration({ default: "60m" }, true),
      labels: stringMap({
        "x-kubernetes-validations": [{ rule: "!('agents.kruise.io/sandbox-id' in self)", message: "the agents.kruise.io/sandbox-id label is reserved" }],
      }),
      annotations: stringMap(),
      envVars: stringMap(),
      inplaceUpdate: obj({ image: str(), resources: obj({ requests: stringMap(), limits: stringMap() }) }),
      dynamicVolumesMount: arr(
        obj(
          { mountID: str(), pvName: str({ minLength: 1 }), mountPath: str({ minLength: 1 }), subPath: str(), readOnly: bool(), attributes: stringMap() },
          { required: ["pvName", "mountPath"] },
        ),
      ),
      runtimes,
      reserveFailedSandbox: bool({ default: false }),
      createOnNoStock: bool({ default: true }),
      waitReadyTimeout: duration({ default: "30s", ...atLeastOneSecond }),
      skipInitRuntime: bool({ default: false }),
    },
    { required: ["templateName"] },
  ),
  status: obj({
    observedGeneration: int64(),
    phase: enumOf(["Claiming", "Completed"]),
    message: str(),
    claimedReplicas: int32(),
    claimStartTime: time(),
    completionTime: time(),
    conditions,
  }),
  columns: [
    { name: "PHASE", type: "string", jsonPath: ".status.phase" },
    { name: "TEMPLATE", type: "string", jsonPath: ".spec.templateName" },
    { name: "DESIRED", type: "integer", jsonPath: ".spec.replicas" },
    { name: "CLAIMED", type: "integer", jsonPath: ".status.claimedReplicas" },
    { name: "AGE", type: "date", jsonPath: ".metadata.creationTimestamp" },
  ],
});

export const checkpoint = crd({
  kind: "Checkpoint",
  plural: "checkpoints",
  shortNames: ["cp"],
  spec: obj({
    sandboxName: str(),
    podName: str(),
    keepRunning: bool({ default: true }),
    persistentContents: arr(enumOf(["podInfo", "memory", "filesystem"])),
    ttlAfterFinished: str({ pattern: "^[0-9]+(s|m|h|d)$" }),
  }),
  specRules: [{ rule: "has(self.sandboxName) || has(self.podName)", message: "sandboxName or podName is required" }],
  status: obj({
    observedGeneration: int64(),
    phase: enumOf(["Pending", "Creating", "Succeeded", "Failed", "Terminating"]),
    message: str(),
    checkpointId: str(),
    podTemplateDelta: free(),
    conditions,
  }),
  columns: [
    { name: "PHASE", type: "string", jsonPath: ".status.phase" },
    { name: "SANDBOX", type: "string", jsonPath: ".spec.sandboxName" },
    { name: "CHECKPOINT_ID", type: "string", jsonPath: ".status.checkpointId" },
    { name: "AGE", type: "date", jsonPath: ".metadata.creationTimestamp" },
  ],
});

/**
 * A sandbox container's file system committed to an image and pushed (upstream `commit_types.go`,
 * behind the `Commit` feature gate, default off). The spec is immutable: a Commit is one run.
 */
export const commit = crd({
  kind: "Commit",
  plural: "commits",
  shortNames: ["cmt"],
  spec: obj(
    {
      podName: str({ minLength: 1, maxLength: 253 }),
      /** The container to commit; the pod's first container when absent. */
      containerName: str({ maxLength: 63 }),
      /** Where to push, e.g. `registry.example.com/team/app:v2`. */
      image: str({ minLength: 1, maxLength: 512 }),
      /** Squash the newest N layers into one (0: keep them). */
      squashLayer: int32({ minimum: 0, maximum: 127, default: 0 }),
      /** The commit job's deadline (0: the agent's default, one hour). */
      timeoutSeconds: int32({ minimum: 0, default: 0 }),
      /** Delete the Commit (and its job) this long after it finished. */
      ttl: duration(),
      /** Registry credentials: names of `kubernetes.io/dockerconfigjson` Secrets in the namespace. */
      registryAuth: obj({ secrets: arr(str({ pattern: "^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$" }), { maxItems: 16 }) }),
    },
    { required: ["podName", "image"] },
  ),
  specRules: [{ rule: "self == oldSelf", message: "spec is immutable" }],
  status: obj({
    observedGeneration: int64(),
    phase: enumOf(["Pending", "Running", "Succeeded", "Failed"]),
    message: str(),
    /** The pushed image's digest (`sha256:…`). */
    commitID: str(),
    startTime: time(),
    completionTime: time(),
    conditions,
  }),
  columns: [
    { name: "PHASE", type: "string", jsonPath: ".status.phase" },
    { name: "POD", type: "string", jsonPath: ".spec.podName" },
    { name: "IMAGE", type: "string", jsonPath: ".spec.image" },
    { name: "COMMIT_ID", type: "string", jsonPath: ".status.commitID", priority: 1 },
    { name: "AGE", type: "date", jsonPath: ".metadata.creationTimestamp" },
  ],
});

export const sandboxUpdateOps = crd({
  kind: "SandboxUpdateOps",
  plural: "sandboxupdateops",
  shortNames: ["suo"],
  spec: obj(
    {
      selector: { ...labelSelector, ...immutable("selector") },
      updateStrategy: obj(
        { type: enumOf(["Recreate", "CheckpointRestore"], { default: "Recreate" }), maxUnavailable: countOrPercent({ default: 1 }) },
        { default: {} },
      ),
      patch: free(immutable("patch")),
      lifecycle: { ...lifecycle, ...immutable("lifecycle") },
      paused: bool({ default: false }),
      stateFilter: obj({ states: arr(enumOf(["Running", "Paused"]), { default: ["Running"] }) }, { default: {} }),
    },
    { required: ["selector"] },
  ),
  status: obj({
    observedGeneration: int64(),
    phase: enumOf(["Pending", "Updating", "Completed", "Failed"]),
    replicas: int32(),
    updatedReplicas: int32(),
    failedReplicas: int32(),
    updatingReplicas: int32(),
    conditions,
    /** One line per selected sandbox (this platform's addition: upstream shows counts only). */
    sandboxes: arr(
      obj({
        sandboxID: str(),
        status: enumOf(["Pending", "Updating", "Succeeded", "Failed", "Skipped"]),
        fromRevision: str(),
        toRevision: str(),
        paused: bool(),
        attempt: int32(),
        message: str(),
      }),
      { maxItems: 1000 },
    ),
  }),
  columns: [
    { name: "PHASE", type: "string", jsonPath: ".status.phase" },
    { name: "TOTAL", type: "integer", jsonPath: ".status.replicas" },
    { name: "UPDATED", type: "integer", jsonPath: ".status.updatedReplicas" },
    { name: "UPDATING", type: "integer", jsonPath: ".status.updatingReplicas" },
    { name: "FAILED", type: "integer", jsonPath: ".status.failedReplicas" },
    { name: "AGE", type: "date", jsonPath: ".metadata.creationTimestamp" },
  ],
});

export const poolAutoscaler = crd({
  kind: "PoolAutoscaler",
  plural: "poolautoscalers",
  shortNames: ["pa"],
  spec: obj(
    {
      scaleTargetRef: obj({ kind: enumOf(["SandboxSet"], { default: "SandboxSet" }), name: str({ minLength: 1 }), apiVersion: str() }, { required: ["name"] }),
      minReplicas: int32({ minimum: 0, default: 0 }),
      maxReplicas: int32({ minimum: 1 }),
      cronPolicies: arr(
        obj(
          {
            name: str({ minLength: 1 }),
            schedule: str({ pattern: "^\\S+( \\S+){4}$" }),
            timeZone: str(),
            targetReplicas: int32({ minimum: 0 }),
          },
          { required: ["name", "schedule", "targetReplicas"] },
        ),
        { "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"] },
      ),
      capacityPolicy: obj(
        {
          targetAvailable: countOrPercent(),
          tolerance: countOrPercent({ default: "10%" }),
          scaleUp: obj({ stabilizationWindowSeconds: int32({ minimum: 0, maximum: 3600, default: 0 }) }),
          scaleDown: obj({ stabilizationWindowSeconds: int32({ minimum: 0, maximum: 3600, default: 300 }) }),
        },
        { required: ["targetAvailable"] },
      ),
      suspend: bool({ default: false }),
    },
    { required: ["scaleTargetRef", "maxReplicas"] },
  ),
  specRules: [{ rule: "!has(self.minReplicas) || self.minReplicas <= self.maxReplicas", message: "minReplicas must not exceed maxReplicas" }],
  status: obj({
    observedGeneration: int64(),
    lastScaleTime: time(),
    currentReplicas: int32(),
    desiredReplicas: int32(),
    suspended: bool(),
    appliedCronPolicies: arr(obj({ name: str(), lastScheduleTime: time() })),
    currentCapacity: obj({ available: int32() }),
    /** Not upstream: the edge's last evaluation, what it wanted and why. */
    lastDecision: obj({ time: time(), reason: str(), message: str({ maxLength: 32768 }), currentReplicas: int32(), desiredReplicas: int32() }),
    conditions,
  }),
  columns: [
    { name: "TARGET", type: "string", jsonPath: ".spec.scaleTargetRef.name" },
    { name: "MIN", type: "integer", jsonPath: ".spec.minReplicas" },
    { name: "MAX", type: "integer", jsonPath: ".spec.maxReplicas" },
    { name: "CURRENT", type: "integer", jsonPath: ".status.currentReplicas" },
    { name: "DESIRED", type: "integer", jsonPath: ".status.desiredReplicas" },
    { name: "AGE", type: "date", jsonPath: ".metadata.creationTimestamp" },
  ],
});

const peer = obj(
  {
    cidr: str({ maxLength: 43 }),
    fqdn: str({ maxLength: 253 }),
    service: obj({ name: str({ minLength: 1 }), namespace: str() }, { required: ["name"] }),
    workload: obj({ namespace: str(), selector: stringMap({ maxProperties: 10 }) }),
  },
  {
    "x-kubernetes-validations": [
      {
        rule: "(has(self.cidr) ? 1 : 0) + (has(self.fqdn) ? 1 : 0) + (has(self.service) ? 1 : 0) + (has(self.workload) ? 1 : 0) == 1",
        message: "exactly one of cidr, fqdn, service, workload",
      },
    ],
  },
);
const port = obj(
  { protocol: enumOf(["TCP", "UDP", "ICMP", "SCTP"], { default: "TCP" }), port: int32({ minimum: 1, maximum: 65535 }), endPort: int32({ minimum: 1, maximum: 65535 }) },
  { "x-kubernetes-validations": [{ rule: "!has(self.endPort) || (has(self.port) && self.endPort >= self.port)", message: "endPort must be at least port" }] },
);
const trafficRules = obj({
  rules: arr(
    obj(
      { action: enumOf(["allow", "reject"]), from: arr(peer, { maxItems: 20 }), to: arr(peer, { maxItems: 20 }), ports: arr(port, { maxItems: 20 }) },
      { required: ["action"] },
    ),
    { maxItems: 50 },
  ),
});
const trafficSpec = obj({ priority: int32({ minimum: 0, default: 1000 }), selector: labelSelector, ingress: trafficRules, egress: trafficRules });
const trafficRulesCel = [{ rule: "has(self.ingress) || has(self.egress)", message: "ingress or egress is required" }];
const acceptedColumns = (extra: { name: string; type: "string"; jsonPath: string }[] = []) => [
  { name: "PRIORITY", type: "integer" as const, jsonPath: ".spec.priority" },
  { name: "ACCEPTED", type: "string" as const, jsonPath: '.status.conditions[?(@.type=="Accepted")].status' },
  ...extra,
  { name: "AGE", type: "date" as const, jsonPath: ".metadata.creationTimestamp" },
];
const policyStatus = obj({ observedGeneration: int64(), conditions });
/** A traffic policy's status also lists the live sandboxes it selects (the edge's answer). */
const trafficStatus = obj({ observedGeneration: int64(), selectedSandboxes: arr(str(), { maxItems: 1000 }), conditions });

export const trafficPolicy = crd({ kind: "TrafficPolicy", plural: "trafficpolicies", shortNames: ["tp"], spec: trafficSpec, specRules: trafficRulesCel, status: trafficStatus, columns: acceptedColumns() });
export const globalTrafficPolicy = crd({
  kind: "GlobalTrafficPolicy",
  plural: "globaltrafficpolicies",
  shortNames: ["gtp"],
  scope: "Cluster",
  spec: trafficSpec,
  specRules: trafficRulesCel,
  status: trafficStatus,
  columns: acceptedColumns(),
});

const securitySpec = obj({
  selector: labelSelector,
  priority: int32({ minimum: 0, default: 1000 }),
  inputs: arr(
    obj(
      { name: str({ minLength: 1 }), configMap: obj({ name: str({ minLength: 1 }), namespace: str() }, { required: ["name"] }), inline: stringMap() },
      { required: ["name"], "x-kubernetes-validations": [{ rule: "has(self.configMap) != has(self.inline)", message: "exactly one of configMap and inline" }] },
    ),
  ),
  rules: arr(obj({ name: str({ minLength: 1 }), match: arr(free()), actions: free() }, { required: ["name"] })),
  audit: arr(free()),
});
const programmed = [{ name: "PROGRAMMED", type: "string" as const, jsonPath: '.status.conditions[?(@.type=="Programmed")].status' }];
export const securityProfile = crd({ kind: "SecurityProfile", plural: "securityprofiles", shortNames: ["sp"], spec: securitySpec, status: policyStatus, columns: acceptedColumns(programmed) });
export const globalSecurityProfile = crd({
  kind: "GlobalSecurityProfile",
  plural: "globalsecurityprofiles",
  shortNames: ["gsp"],
  scope: "Cluster",
  spec: securitySpec,
  status: policyStatus,
  columns: acceptedColumns(programmed),
});

/** Every CRD, in install order. */
export const CRDS = [
  sandbox,
  sandboxSet,
  sandboxTemplate,
  sandboxClaim,
  checkpoint,
  commit,
  sandboxUpdateOps,
  poolAutoscaler,
  trafficPolicy,
  globalTrafficPolicy,
  securityProfile,
  globalSecurityProfile,
];
