// The Worker's bindings, and who is calling: what the routes, the operations and the Durable
// Objects all see. Lives beneath functions/ so nothing here imports a route.
import type { ClusterDO } from "./cluster/cluster-do.ts";
import type { EdgeMetricsDO } from "./metrics/metrics-do.ts";
import type { PoolDO } from "./pool/pool-do.ts";
import type { ProbeDO } from "./probes/probe-do.ts";
import type { SandboxIndexDO } from "./sandbox/sandbox-index-do.ts";
import type { SandboxGroupDO } from "./sandbox/sandbox-group-do.ts";
import type { TeamQuotaDO } from "./quota/team-quota-do.ts";
import type { UpdateOpsDO } from "./ops/update-ops-do.ts";

export interface Env {
  /** Sandboxes live in groups (SandboxGroupDO): reach one with `sandboxHandle(env, id)`. */
  SANDBOX_GROUP: DurableObjectNamespace<SandboxGroupDO>;
  POOL: DurableObjectNamespace<PoolDO>;
  CLUSTER: DurableObjectNamespace<ClusterDO>;
  /** The one writer of the libSQL sandbox index (group commit). */
  SANDBOX_INDEX: DurableObjectNamespace<SandboxIndexDO>;
  /** One per team (`idFromName(teamId)`): its quota and reservations. */
  TEAM_QUOTA: DurableObjectNamespace<TeamQuotaDO>;
  /** One object (`idFromName("edge")`): the edge's metric counts summed over isolates. */
  EDGE_METRICS: DurableObjectNamespace<EdgeMetricsDO>;
  /** One per update ops run (`idFromName(teamId/name)`, ops/stub.ts). */
  UPDATE_OPS: DurableObjectNamespace<UpdateOpsDO>;
  /** One per sandbox with an auto-pause policy (`idFromName(sandboxId)`): its probe and wake. */
  PROBE: DurableObjectNamespace<ProbeDO>;
  /** libSQL (sqld locally, Turso in production). */
  LIBSQL_URL: string;
  LIBSQL_AUTH_TOKEN?: string;
  /** Secret pepper of the API-key HMAC. */
  KEY_PEPPER: string;
  /** Encrypts team secrets at rest (at least 32 characters; functions/api/secrets.ts). Unset: /secrets answers 501. */
  SECRETS_KEY?: string;
  /** The seeded admin key (`e2b_<hex>`): sees every team, may create keys for any team. */
  ADMIN_API_KEY: string;
  /** Shared secret the agent presents on its WebSocket. */
  CLUSTER_TOKEN: string;
  /** The name of an install's only cluster: it acts for every team without a team↔cluster binding
   * (operations/team-clusters.ts). Unset: only bindings count (the safe default of several clusters). */
  SINGLE_CLUSTER?: string;
  /** Comma-separated ids of the clusters whose GlobalTrafficPolicy and GlobalSecurityProfile
   * objects the edge applies (operations/team-clusters.ts `globalWriterRefusal`); the
   * `SINGLE_CLUSTER` one always may. Unset: no other cluster may (the admin API still can). */
  GLOBAL_POLICY_CLUSTERS?: string;
  /** Domain returned to SDKs as `domain` (null when unset: the SDK falls back to E2B_DOMAIN). */
  SANDBOX_DOMAIN?: string;
  /** OTLP/HTTP collector base URL for traces; unset: tracing off. */
  OTEL_EXPORTER_OTLP_ENDPOINT?: string;
  /** Default team quotas (schema/api/quota.ts); unset is no limit. The admin API overrides them per team. */
  QUOTA_RUNNING_SANDBOXES?: string;
  QUOTA_VCPUS?: string;
  QUOTA_MEMORY_MB?: string;
  QUOTA_CREATES_PER_MINUTE?: string;
  QUOTA_PAUSED_SANDBOXES?: string;
  /** Milliseconds a freed built image is kept for creates under way (operations/image-gc.ts);
   * unset: 5 minutes. */
  IMAGE_FREE_GRACE_MS?: string;
}

/** Who is calling, as the auth middleware resolved the X-API-KEY. */
export interface Caller {
  keyId: string;
  teamId: string;
  teamName: string;
  admin: boolean;
}

