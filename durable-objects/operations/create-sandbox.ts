// Creating a sandbox for a team: resolve the template, claim a member from its PoolDO through the
// team's quota (TeamQuotaDO reserves, claims, and keeps the reservation under the sandbox's id),
// hand it to its SandboxGroupDO. No store round trip for a cached key and template; the group
// writes the index row beside its intent. The E2B create routes and the CRD sync's claims
// (ClusterDO) both come here with typed input and get a `Result`: a refusal carries its code, so
// nobody guesses it back from an HTTP status.
import type { SandboxInfo } from "../sandbox/info.ts";
import type { Result } from "../sandbox/state.ts";
import { claimedSpec, type SpecDraft } from "../sandbox/claimed-spec.ts";
import type { ClaimCreate, ClaimCreateResult } from "../quota/claim-create.ts";
import { DEFAULT_WAIT_MS } from "../sandbox/sandbox-group-do.ts";
import { DEFAULT_TIMEOUT_S, V1_DEFAULT_TIMEOUT_S } from "../../schema/api/limits.ts";
import type { CreateExtensions } from "../../schema/api/extensions.ts";
import type { NewSandbox } from "../../schema/api/sandbox.ts";
import type { TemplateRecord } from "../../schema/api/template.ts";
import { ApiError } from "../../schema/errors.ts";
import type { z } from "zod";
import type { Caller, Env } from "../env.ts";
import type { Claimed, ClaimResult } from "../pool/rpc.ts";
import { poolName, poolStub } from "../pool/stub.ts";
import type { Resources } from "../quota/ledger.ts";
import { quotaStub } from "../quota/stub.ts";
import { leafSpan } from "../tracing/edge-tracing.ts";
import { sandboxHandle } from "../sandbox/stub.ts";
import { getDb } from "../store/db.ts";
import { resolveTemplateCached } from "../store/template-cache.ts";
import { resolveSnapshotRef, type SnapshotRow } from "../store/snapshots.ts";
import { refusalsAsResult } from "./result.ts";
import { inplaceCpuCharge } from "./inplace-charge.ts";
import { countEvent, flushDue, observeMs, timedMs } from "../metrics/edge-metrics.ts";
import { EDGE } from "../metrics/families.ts";

export type CreateBody = z.infer<typeof NewSandbox>;

export interface CreateSandboxInput {
  /** v1 defaults differ (timeout, `secure`). */
  version: "v1" | "v2";
  body: CreateBody;
  /** The OpenKruise extensions, already parsed (from metadata at the route, typed from a claim). */
  ext: CreateExtensions;
}

/** Creates a sandbox for `caller`'s team. Anything but a refusal (a bug, a broken binding) throws. */
export async function createSandbox(env: Env, caller: Caller, input: CreateSandboxInput): Promise<Result<{ sandbox: SandboxInfo }>> {
  const res = await refusalsAsResult(async () => ({ sandbox: await create(env, caller, input) }));
  countEvent(EDGE.creates, { result: res.ok ? "ok" : res.error.code });
  // The route's request flushes too; a CRD claim runs in ClusterDO, which has no request to.
  void flushDue(env);
  return res;
}

async function create(env: Env, caller: Caller, { version, body, ext }: CreateSandboxInput): Promise<SandboxInfo> {
  if (body.autoResume?.enabled && !body.autoPause) throw new ApiError("bad_request", "autoResume needs autoPause (lifecycle onTimeout: pause)");
  if (body.autoResume?.enabled && body.autoPauseMemory === false) throw new ApiError("bad_request", "autoResume cannot be combined with autoPauseMemory: false");
  const { template, snapshot } = await timedMs(EDGE.createStage, { stage: "template" }, () => templateOrSnapshot(env, caller, body.templateID));
  if (Object.keys(body.network?.rules ?? {}).length) {
    // Rules a cluster would take and not enforce would make the client believe a credential is
    // added (and a destination restricted) when it is not.
    const refusal = await env.CLUSTER.get(env.CLUSTER.idFromName(template.spec.cluster)).networkRulesRefusal(template.spec.cluster);
    if (refusal) throw new ApiError(refusal.code, refusal.message);
  }

  const resources: Resources = {
    // Whole cores, rounded up: the quota counts what the pod may use (its limit is resized to the
    // exact value), so 1.999 is 2, never 1 (OpenKruise floors it for display; E2B shows this too),
    // with the pod's other containers, which the resize leaves as they are.
    cpu: ext.inplaceUpdate?.cpuCount ? inplaceCpuCharge(template.spec, ext.inplaceUpdate.cpuCount) : template.spec.cpuCount,
    memoryMB: template.spec.memoryMB,
  };
  const timeoutS = body.timeout === undefined ? (version === "v1" ? V1_DEFAULT_TIMEOUT_S : DEFAULT_TIMEOUT_S) : body.timeout || DEFAULT_TIMEOUT_S;
  const draft = specDraft(caller, template, body, ext, resources, version);
  const waitMs = ext.waitReadyMs ?? DEFAULT_WAIT_MS;
  const sandbox = snapshot
    ? await fromSnapshot(env, caller, template, resources, snapshot, { draft, timeoutS, waitMs, createOnNoStock: true })
    : await claimAndCreate(env, caller, template, resources, { draft, timeoutS, waitMs, createOnNoStock: ext.createOnNoStock ?? false });
  if (ext.autoPausePolicy) await env.PROBE.get(env.PROBE.idFromName(sandbox.sandboxId)).start(sandbox.sandboxId, caller.teamId, ext.autoPausePolicy);
  return sandbox;
}

/**
 * A create from a template: one call to the team's quota object, which reserves, claims from the
 * pool and hands the member to its group (TeamQuotaDO.create). Fails closed when the quota cannot
 * be reached (503).
 */
async function claimAndCreate(env: Env, caller: Caller, template: TemplateRecord, resources: Resources, create: ClaimCreate): Promise<SandboxInfo> {
  const started = Date.now();
  const res = await throughQuota<ClaimCreateResult>(env, caller, template, "create", (quota, req) => quota.create({ ...req, ...resources, ...create }));
  // The stages as before: the claim inside the quota object, the rest the group's start.
  if (res.claimMs !== undefined) observeMs(EDGE.createStage, { stage: "claim" }, res.claimMs);
  if (res.warm !== undefined) countEvent(EDGE.claims, { stock: res.warm ? "warm" : "cold" });
  if (!res.ok) throw ApiError.from(res.error);
  observeMs(EDGE.createStage, { stage: "start" }, Math.max(0, Date.now() - started - res.claimMs));
  return res.sandbox;
}

/** A sandbox whose files start as a snapshot's: a fresh member of its template, its own id, tokens and hostname. */
async function fromSnapshot(env: Env, caller: Caller, template: TemplateRecord, resources: Resources, snapshot: SnapshotRow, create: ClaimCreate): Promise<SandboxInfo> {
  const claimed = await timedMs(EDGE.createStage, { stage: "claim" }, () => claim(env, caller, template, resources));
  countEvent(EDGE.claims, { stock: claimed.warm ? "warm" : "cold" });
  if (claimed.cluster !== snapshot.cluster) {
    await quotaStub(env, caller.teamId).release(claimed.sandboxId, claimed.generation + 1).catch(() => undefined);
    throw new ApiError("conflict", `Snapshot "${create.draft.templateId}" is on cluster "${snapshot.cluster}", its template's sandboxes now run on "${claimed.cluster}"`);
  }
  const spec = { ...claimedSpec(create.draft, claimed), templateId: template.templateId, restoreFrom: { id: snapshot.id } };
  const input = { spec, timeoutS: create.timeoutS, claimedGeneration: claimed.generation, endpoint: claimed.endpoint, waitMs: create.waitMs };
  const res = await timedMs(EDGE.createStage, { stage: "start" }, () => timedMs(EDGE.doCall, { object: "sandbox_group", method: "create" }, () => sandboxHandle(env, claimed.sandboxId).create(input)));
  if (!res.ok) throw ApiError.from(res.error);
  return res.sandbox;
}

/** A pool learns its spec from the admin API; one never configured (e.g. seeded straight into the
 * store) is configured on its first claim. */
async function configurePool(env: Env, template: TemplateRecord): Promise<void> {
  const pool = poolStub(env, template.teamId, template.templateId);
  const conf = await pool.configure({ teamId: template.teamId, templateId: template.templateId, revision: template.revision, spec: template.spec, cluster: template.spec.cluster });
  if (!conf.ok) throw ApiError.from(conf.error);
}

/**
 * The template a create names, or the team's snapshot it names (E2B `Sandbox.create(snapshotId)`)
 * with the template of the snapshot's source sandbox.
 */
async function templateOrSnapshot(env: Env, caller: Caller, ref: string): Promise<{ template: TemplateRecord; snapshot?: SnapshotRow }> {
  const db = getDb(env);
  const template = await resolveTemplateCached(db, caller.teamId, ref);
  if (template) return { template };
  const snapshot = await resolveSnapshotRef(db, { id: caller.teamId, name: caller.teamName }, ref);
  const source = snapshot && (await resolveTemplateCached(db, caller.teamId, snapshot.templateId));
  if (!snapshot) throw new ApiError("template_not_found", `Template "${ref}" not found`);
  if (!source) throw new ApiError("template_not_found", `Template "${snapshot.templateId}" of snapshot "${ref}" not found`);
  return { template: source, snapshot };
}

/** A fresh member (never a warm one: a sandbox made from a snapshot) claimed through the caller's
 * team quota. */
async function claim(env: Env, caller: Caller, template: TemplateRecord, resources: Resources): Promise<Claimed> {
  const res = await throughQuota<ClaimResult>(env, caller, template, "claim", (quota, req) => quota.claim({ ...req, ...resources, fresh: true }));
  if (!res.ok) throw ApiError.from(res.error);
  return res;
}

/**
 * One call to the team's quota object (`TeamQuotaDO.create` or `.claim`), timed and traced as a
 * Durable Object call. Fails closed: a quota object that does not answer refuses the create (503).
 * A pool never configured (seeded straight into the store) is configured and asked once more.
 */
async function throughQuota<R extends ClaimCreateResult | ClaimResult>(
  env: Env,
  caller: Caller,
  template: TemplateRecord,
  method: "create" | "claim",
  send: (quota: ReturnType<typeof quotaStub>, req: { teamId: string; teamName: string; pool: string; traceparent: string | undefined }) => Promise<R>,
): Promise<R> {
  const quota = quotaStub(env, caller.teamId);
  const pool = poolName(template.teamId, template.templateId);
  const call = async (): Promise<R> => {
    try {
      return await timedMs<R>(EDGE.doCall, { object: "team_quota", method }, () =>
        leafSpan<R>(env, `TeamQuotaDO.${method}`, { "team.id": caller.teamId, "pool.name": pool }, (traceparent) =>
          send(quota, { teamId: caller.teamId, teamName: caller.teamName, pool, traceparent: traceparent() }),
        ),
      );
    } catch (err) {
      throw new ApiError("quota_unavailable", `The quota of team "${caller.teamName}" is unavailable (${String(err)}); the create is refused`);
    }
  };
  const res = await call();
  if (res.ok || res.error.code !== "template_not_found") return res;
  await configurePool(env, template);
  return call();
}

/** The spec of the sandbox to be, but for what the claim decides (sandbox/claimed-spec.ts). */
function specDraft(caller: Caller, template: TemplateRecord, body: CreateBody, ext: CreateExtensions, resources: Resources, version: "v1" | "v2"): SpecDraft {
  const insecure = (version === "v1" && body.secure === false) || ext.skipInitRuntime;
  return {
    teamId: caller.teamId,
    teamName: caller.teamName,
    keyId: caller.keyId,
    templateId: body.templateID,
    envdVersion: template.spec.envdVersion,
    cpuCount: resources.cpu,
    memoryMB: resources.memoryMB,
    diskSizeMB: template.spec.diskSizeMB,
    envVars: { ...body.envVars },
    metadata: ext.metadata,
    labels: ext.labels,
    annotations: ext.annotations,
    allowInternetAccess: body.allow_internet_access ?? null,
    network: body.network ?? null,
    volumeMounts: body.volumeMounts ?? [],
    lifecycle: {
      onTimeout: body.autoPause ? "pause" : "kill",
      autoResume: body.autoResume?.enabled ?? false,
      timeoutPauseStrategy: body.autoPauseMemory === false ? "Stop" : "Freeze",
    },
    pausedRetentionMs: ext.pausedRetentionMs,
    neverTimeout: ext.neverTimeout,
    ...(ext.returnSandboxIp ? { returnSandboxIp: true } : {}),
    envdAccessToken: insecure ? null : token(),
    trafficAccessToken: body.network?.allowPublicTraffic === false ? token() : null,
    ...(ext.inplaceUpdate ? { inplaceUpdate: ext.inplaceUpdate } : {}),
  };
}

const HEX = Array.from({ length: 256 }, (_, b) => b.toString(16).padStart(2, "0"));

function token(): string {
  let s = "";
  for (const b of crypto.getRandomValues(new Uint8Array(24))) s += HEX[b];
  return s;
}
