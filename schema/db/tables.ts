// The libSQL state store: what must be queried across Durable Objects. The DOs own sandbox and
// pool truth; these tables are written through from them and can be rebuilt from them.
// Times are integer milliseconds since the epoch; JSON columns hold zod-validated shapes from
// schema/api.
import type { SecurityProfileSpec } from "../api/security-profile.ts";
import type { TrafficPolicySpec } from "../api/traffic-policy.ts";
import { sql } from "drizzle-orm";
import { blob, index, integer, primaryKey, sqliteTable, text, uniqueIndex } from "drizzle-orm/sqlite-core";

/** A team; its name is the Kubernetes namespace its sandboxes live in. */
export const teams = sqliteTable("teams", {
  id: text("id").primaryKey(),
  name: text("name").notNull().unique(),
  createdAt: integer("created_at").notNull(),
});

/** API keys, stored only as hex HMAC-SHA256(pepper, key); the plaintext is returned once. */
export const apiKeys = sqliteTable(
  "api_keys",
  {
    id: text("id").primaryKey(),
    teamId: text("team_id").notNull(),
    name: text("name").notNull(),
    keyHash: text("key_hash").notNull().unique(),
    /** The visible ends of the key for masked listings (`e2b_ab…cdef`). */
    maskPrefix: text("mask_prefix").notNull(),
    maskSuffix: text("mask_suffix").notNull(),
    valueLength: integer("value_length").notNull(),
    createdBy: text("created_by"),
    createdAt: integer("created_at").notNull(),
    lastUsed: integer("last_used"),
  },
  (t) => [index("api_keys_team").on(t.teamId)],
);

/** Templates: a SandboxSet spec per team (schema/api/template.ts `TemplateSpec`). */
export const templates = sqliteTable(
  "templates",
  {
    teamId: text("team_id").notNull(),
    templateId: text("template_id").notNull(),
    /** Public templates can be claimed by every team (the seeded `base`). */
    public: integer("public", { mode: "boolean" }).notNull().default(false),
    spec: text("spec", { mode: "json" }).notNull(),
    /** Hash of the spec minus replicas: members of an older revision are replaced. */
    revision: text("revision").notNull(),
    createdAt: integer("created_at").notNull(),
    updatedAt: integer("updated_at").notNull(),
  },
  (t) => [
    primaryKey({ columns: [t.teamId, t.templateId] }),
    index("templates_id").on(t.templateId),
    // Image collection asks "does any template name this image" for every candidate
    // (store/template-builds.ts); the query compares with `= +x` so SQLite can use it.
    index("templates_image").on(sql`(${t.spec} ->> '$.image')`),
  ],
);

/** The sandbox index `list` pages through; the sandboxes' SandboxGroupDOs write it (through SandboxIndexDO) on visible changes. */
export const sandboxes = sqliteTable(
  "sandboxes",
  {
    id: text("id").primaryKey(),
    /** The owner: every key of the team lists it. */
    teamId: text("team_id").notNull(),
    /** The key that created it (an attribute; access is by team). */
    keyId: text("key_id").notNull(),
    templateId: text("template_id").notNull(),
    alias: text("alias"),
    /** E2B state: running | paused | killed (killed rows are tombstones, never listed). */
    state: text("state").notNull(),
    /** The sandbox's phase (SandboxGroupDO) at the last visible change (Pending, Running, Paused, ...), for operators. */
    phase: text("phase").notNull(),
    metadata: text("metadata", { mode: "json" }).$type<Record<string, string>>().notNull(),
    startedAt: integer("started_at").notNull(),
    endAt: integer("end_at").notNull(),
    cpuCount: integer("cpu_count").notNull(),
    memoryMB: integer("memory_mb").notNull(),
    diskSizeMB: integer("disk_size_mb").notNull(),
    envdVersion: text("envd_version").notNull(),
    /** Monotonic per sandbox: a write only lands if it is newer than the row. */
    rev: integer("rev").notNull(),
  },
  (t) => [
    // Lists and the running count are scoped by team (every key of a team sees its sandboxes).
    index("sandboxes_team_started").on(t.teamId, t.startedAt, t.id),
  ],
);

/**
 * Snapshots of sandboxes' private state (E2B `createSnapshot`), owned by the team and outliving
 * the source sandbox. The files are on the agent of `cluster`; a row is written once the agent
 * has taken the snapshot, and deleted before the agent is asked to free it.
 */
export const snapshots = sqliteTable(
  "snapshots",
  {
    id: text("id").primaryKey(),
    teamId: text("team_id").notNull(),
    keyId: text("key_id").notNull(),
    sandboxId: text("sandbox_id").notNull(),
    /** E2B full names (`team/name:default`); empty for an unnamed snapshot. */
    names: text("names", { mode: "json" }).$type<string[]>().notNull(),
    createdAt: integer("created_at").notNull(),
    /** The name given at create (unique per team: a new snapshot of that name replaces the old). */
    name: text("name"),
    /** The source sandbox's template: sandboxes from the snapshot take its resources and pool. */
    templateId: text("template_id").notNull().default(""),
    cluster: text("cluster").notNull().default("local"),
    /** A slot held while the agent copies the disk (store/snapshots.ts `reserveSnapshot`): counted
     * against the team's bound, never listed nor resolved. */
    pending: integer("pending", { mode: "boolean" }).notNull().default(false),
  },
  (t) => [index("snapshots_team").on(t.teamId, t.createdAt), index("snapshots_team_name").on(t.teamId, t.name)],
);

/** Audit trail of control-plane actions (key created/deleted, template changed, ...). */
export const auditEvents = sqliteTable(
  "audit_events",
  {
    id: integer("id").primaryKey({ autoIncrement: true }),
    at: integer("at").notNull(),
    teamId: text("team_id"),
    keyId: text("key_id"),
    action: text("action").notNull(),
    target: text("target"),
    detail: text("detail", { mode: "json" }).$type<Record<string, unknown>>(),
  },
  (t) => [index("audit_team_at").on(t.teamId, t.at)],
);

/** Built root filesystems (`b-<buildID>`) claimed for freeing (operations/image-gc.ts): claimed in
 * the same statement that finds nothing in libSQL referencing them, and a template write naming one
 * is refused by a trigger (migration 0011), so a concurrent PUT cannot take an image being freed.
 * Build ids are never reused, so a row stays (a PUT naming it later would name a freed image). */
export const freedImages = sqliteTable(
  "freed_images",
  {
    image: text("image").primaryKey(),
    /** When it was claimed: the agent is told only a grace period later (creates in flight). */
    freedAt: integer("freed_at").notNull(),
    /** The cluster whose agent holds it. */
    cluster: text("cluster").notNull().default("local"),
    /** When its agent was told (null: not yet; sent with every welcome until then). */
    sentAt: integer("sent_at"),
  },
  // A collection pass reads its cluster's unsent (and recently sent) claims.
  (t) => [index("freed_images_cluster_sent").on(t.cluster, t.sentAt)],
);

/** Template builds (E2B `Template.build`): one row per build, its state and what it asked for. */
export const templateBuilds = sqliteTable(
  "template_builds",
  {
    id: text("id").primaryKey(),
    teamId: text("team_id").notNull(),
    teamName: text("team_name").notNull(),
    templateId: text("template_id").notNull(),
    /** The cluster whose agent runs the build. */
    cluster: text("cluster").notNull(),
    /** waiting | building | ready | error */
    status: text("status").notNull(),
    cpuCount: integer("cpu_count").notNull(),
    memoryMB: integer("memory_mb").notNull(),
    tags: text("tags", { mode: "json" }).$type<string[]>().notNull(),
    /** TemplateBuildStart's startCmd/readyCmd (or the `fromTemplate` base's), kept for the template. */
    startCmd: text("start_cmd"),
    readyCmd: text("ready_cmd"),
    reason: text("reason", { mode: "json" }).$type<{ message: string; step?: string }>(),
    /** The RootfsStore template the agent publishes (the template's spec.image once ready). */
    image: text("image").notNull(),
    /** What the built template takes from its `fromTemplate` base's spec (`InheritedSpec`). */
    inherit: text("inherit", { mode: "json" }).$type<{ codeInterpreter?: boolean }>(),
    /** The image a `fromTemplate` build stands on (its parent's, at the start): not freed while
     * the build runs. */
    baseImage: text("base_image"),
    createdAt: integer("created_at").notNull(),
    updatedAt: integer("updated_at").notNull(),
    finishedAt: integer("finished_at"),
  },
  (t) => [
    index("template_builds_team").on(t.teamId, t.templateId, t.createdAt),
    // The team's bounds on waiting and running builds count by it (not through its whole history).
    index("template_builds_team_status").on(t.teamId, t.status),
    // Image collection: "does a waiting or running build stand on this image".
    index("template_builds_base_image").on(t.baseImage),
  ],
);

/** Log entries of a build, in the agent's order (seq); a repeated entry is ignored. */
export const templateBuildLogs = sqliteTable(
  "template_build_logs",
  {
    buildId: text("build_id").notNull(),
    seq: integer("seq").notNull(),
    at: integer("at").notNull(),
    level: text("level").notNull(),
    step: text("step"),
    message: text("message").notNull(),
  },
  (t) => [primaryKey({ columns: [t.buildId, t.seq] })],
);

/** Uploaded `copy` archives, content-addressed per team by the SDK's files hash. */
export const templateFiles = sqliteTable(
  "template_files",
  {
    teamId: text("team_id").notNull(),
    hash: text("hash").notNull(),
    size: integer("size").notNull(),
    data: blob("data", { mode: "buffer" }).notNull(),
    createdAt: integer("created_at").notNull(),
  },
  (t) => [primaryKey({ columns: [t.teamId, t.hash] })],
);

/**
 * What each stored archive costs its team and when it was last used (uploaded, found present by
 * the SDK, or started with by a build): the team's bound and the expiry of unused archives read
 * and write only these small rows. (A column of `template_files` would sit after the blob: an
 * update rewrites the whole row, and reading it walks the blob's overflow pages.)
 */
export const templateFileUses = sqliteTable(
  "template_file_uses",
  {
    teamId: text("team_id").notNull(),
    hash: text("hash").notNull(),
    /** What it counts against MAX_TEAM_FILE_BYTES: its size, at least 4 KiB (a row costs too). */
    bytes: integer("bytes").notNull(),
    usedAt: integer("used_at").notNull(),
  },
  (t) => [primaryKey({ columns: [t.teamId, t.hash] })],
);

/** Tags of a team's template: each names one build. */
export const templateTags = sqliteTable(
  "template_tags",
  {
    teamId: text("team_id").notNull(),
    templateId: text("template_id").notNull(),
    tag: text("tag").notNull(),
    buildId: text("build_id").notNull(),
    createdAt: integer("created_at").notNull(),
  },
  // Image collection: "does a tag name this build".
  (t) => [primaryKey({ columns: [t.teamId, t.templateId, t.tag] }), index("template_tags_build").on(t.buildId)],
);

/** E2B secrets: metadata per team; the values are in `secret_versions`, encrypted. */
export const secrets = sqliteTable(
  "secrets",
  {
    id: text("id").primaryKey(),
    teamId: text("team_id").notNull(),
    /** Lower-case, unique within the team. */
    name: text("name").notNull(),
    currentVersion: integer("current_version").notNull(),
    metadata: text("metadata", { mode: "json" }).$type<Record<string, string>>().notNull(),
    createdAt: integer("created_at").notNull(),
    updatedAt: integer("updated_at").notNull(),
  },
  (t) => [uniqueIndex("secrets_team_name").on(t.teamId, t.name)],
);

/** Each value a secret has had: AES-256-GCM under the Worker's SECRETS_KEY (durable-objects/store/secret-box.ts). */
export const secretVersions = sqliteTable(
  "secret_versions",
  {
    secretId: text("secret_id").notNull(),
    version: integer("version").notNull(),
    /** `v1.` + base64 of the 12-byte IV and the ciphertext; bound to team, secret and version. */
    sealed: text("sealed").notNull(),
    createdAt: integer("created_at").notNull(),
  },
  (t) => [primaryKey({ columns: [t.secretId, t.version] })],
);

/** TrafficPolicies (team) and GlobalTrafficPolicies (`team` ""), from the admin API and the CRD
 * sync; a cluster's agent gets the global ones and those of the teams it serves
 * (durable-objects/cluster/cluster-do.ts `sendTrafficPolicies`). */
export const trafficPolicies = sqliteTable(
  "traffic_policies",
  {
    /** The team's name (its Kubernetes namespace), "" for a GlobalTrafficPolicy. */
    team: text("team").notNull(),
    name: text("name").notNull(),
    spec: text("spec", { mode: "json" }).$type<TrafficPolicySpec>().notNull(),
    updatedAt: integer("updated_at").notNull(),
  },
  (t) => [primaryKey({ columns: [t.team, t.name] })],
);

/** SecurityProfiles (team) and GlobalSecurityProfiles (`team` ""), from the admin API and the CRD
 * sync; a cluster's agent gets the global ones and those of the teams it serves
 * (durable-objects/cluster/cluster-do.ts `sendSecurityProfiles`). */
export const securityProfiles = sqliteTable(
  "security_profiles",
  {
    /** The team's name (its Kubernetes namespace), "" for a GlobalSecurityProfile. */
    team: text("team").notNull(),
    name: text("name").notNull(),
    spec: text("spec", { mode: "json" }).$type<SecurityProfileSpec>().notNull(),
    createdAt: integer("created_at").notNull(),
    updatedAt: integer("updated_at").notNull(),
    /** Who writes it: "admin" (the admin API) or "cluster" (a trusted cluster's CRD); null for a
     * row from before owners were kept, which the next writer claims. */
    owner: text("owner").$type<"admin" | "cluster">(),
  },
  (t) => [primaryKey({ columns: [t.team, t.name] })],
);

/**
 * Update ops runs by team, for listing (the console): each run's truth is its UpdateOpsDO; a row is
 * written when a run starts and removed with it (operations/update-ops.ts), and its summary (phase,
 * counts) rewritten by the run whenever that changes, so a list needs no call on each run.
 */
export const updateOpsRuns = sqliteTable(
  "update_ops_runs",
  {
    teamId: text("team_id").notNull(),
    name: text("name").notNull(),
    createdAt: integer("created_at").notNull(),
    /** Null until the run first writes its summary. */
    phase: text("phase"),
    replicas: integer("replicas").notNull().default(0),
    updatedReplicas: integer("updated_replicas").notNull().default(0),
    failedReplicas: integer("failed_replicas").notNull().default(0),
  },
  (t) => [primaryKey({ columns: [t.teamId, t.name] }), index("update_ops_runs_created").on(t.createdAt)],
);

/** Clusters whose agent has linked to this edge (functions/agent-link.ts), for listing (the console). */
export const clusters = sqliteTable("clusters", {
  name: text("name").primaryKey(),
  firstLinkedAt: integer("first_linked_at").notNull(),
  lastLinkedAt: integer("last_linked_at").notNull(),
});

/**
 * The console's signed-in sessions (functions/console/session.ts): the cookie names a row by its
 * random id, so signing out deletes the row and a copied cookie stops working at once. A row ends
 * at `expires_at`; logins delete expired rows and keep at most a few per key.
 */
export const consoleSessions = sqliteTable(
  "console_sessions",
  {
    id: text("id").primaryKey(),
    /** The API key's HMAC (as in api_keys); the browser never holds it. */
    keyHash: text("key_hash").notNull(),
    createdAt: integer("created_at").notNull(),
    expiresAt: integer("expires_at").notNull(),
  },
  (t) => [index("console_sessions_expires").on(t.expiresAt), index("console_sessions_key").on(t.keyHash, t.createdAt)],
);

/**
 * Which clusters may act for a team (durable-objects/operations/team-clusters.ts): a cluster's
 * SandboxSets, SandboxClaims, quota annotations, TrafficPolicies and SecurityProfiles in the team's
 * namespace are applied only if the team is bound to it, and only a bound cluster gets the team's
 * profiles and secret values for the templates it runs. Written by the admin API (its PUT, and a
 * template the admin places on a cluster binds its team there) and by a build's finalize
 * (operations/template-builds.ts), which registers the template on the cluster the edge built it
 * on: the template's own cluster, bound already, or the default `local` for a new one. That is the
 * edge's placement, not a cluster's or a tenant's choice, and it keeps "every template's cluster
 * is bound to its team" true. A cluster's own writes (crd-sync) never bind. Migration 0017 bound
 * every team to the clusters of its templates.
 */
export const teamClusters = sqliteTable(
  "team_clusters",
  {
    teamId: text("team_id").notNull(),
    cluster: text("cluster").notNull(),
    createdAt: integer("created_at").notNull(),
  },
  (t) => [primaryKey({ columns: [t.teamId, t.cluster] }), index("team_clusters_cluster").on(t.cluster)],
);
