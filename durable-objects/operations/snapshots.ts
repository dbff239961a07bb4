// Snapshots of a team's sandboxes (E2B createSnapshot, listSnapshots, deleteSnapshot) and fork.
// The sandbox's SandboxGroupDO orders the snapshot with its machine (an intent the agent answers
// once the copy is taken); the record goes to libSQL, owned by the sandbox's team and kept after
// the sandbox is gone. Its slot is stored first, within the team's `snapshots` quota, so a team
// cannot fill the agent's disk with copies. Sandboxes are made from a snapshot by the create operation
// (create-sandbox.ts), which resolves a template id it does not know here.
import { parseCreateExtensions } from "../../schema/api/extensions.ts";
import { NewSandbox } from "../../schema/api/sandbox.ts";
import { MEMORY_SNAPSHOT_UNSUPPORTED, parseSnapshotRef, snapshotNames } from "../../schema/api/snapshot.ts";
import { ApiError, ErrorCode, sandboxNotFoundMessage } from "../../schema/errors.ts";
import { newSandboxId } from "../../schema/protocol/ids.ts";
import type { Caller, Env } from "../env.ts";
import type { SandboxInfo } from "../sandbox/info.ts";
import type { Result } from "../sandbox/state.ts";
import { sandboxHandle } from "../sandbox/stub.ts";
import { getDb } from "../store/db.ts";
import { deleteSnapshotRows, fillSnapshot, listSnapshotRows, reserveSnapshot, resolveSnapshotRef, snapshotsNamed, type SnapshotCursor, type SnapshotRow, type SnapshotSlot } from "../store/snapshots.ts";
import { overMessage } from "../quota/ledger.ts";
import { quotaStub } from "../quota/stub.ts";
import { createSandbox, type CreateSandboxInput } from "./create-sandbox.ts";
import { refusalsAsResult } from "./result.ts";

/** How long the agent may take to copy a sandbox's disk (ClusterDO bounds an ack wait at 30 s). */
const SNAPSHOT_WAIT_MS = 30_000;

export interface SnapshotRequest {
  name?: string;
  keepMemory?: boolean;
}

/** Takes a snapshot of `sandboxId` for its team. A name already used by the team moves to it. */
export async function createSnapshot(env: Env, caller: Caller, sandboxId: string, req: SnapshotRequest): Promise<Result<{ snapshot: SnapshotRow }>> {
  return refusalsAsResult(() => takeSnapshot(env, caller, sandboxId, req));
}

async function takeSnapshot(env: Env, caller: Caller, sandboxId: string, req: SnapshotRequest): Promise<{ snapshot: SnapshotRow }> {
  if (req.keepMemory) throw new ApiError(ErrorCode.notImplemented, MEMORY_SNAPSHOT_UNSUPPORTED);
  const id = newSandboxId() as string;
  const db = getDb(env);
  const slot = await holdSlot(env, caller, sandboxId, id);
  const res = await sandboxHandle(env, sandboxId).snapshot({ teamId: caller.teamId, admin: caller.admin }, id, SNAPSHOT_WAIT_MS);
  if (!res.ok) {
    await deleteSnapshotRows(db, slot.teamId, [id]);
    // The agent may have copied it after all (an answer lost on the way): freed on the sandbox's
    // own cluster, not leaked.
    if (res.error.code !== ErrorCode.sandboxNotFound && res.error.code !== ErrorCode.conflict) await freeOnAgent(env, slot.cluster, [id]);
    throw ApiError.from(res.error);
  }
  const { source } = res;
  const teamName = source.teamName ?? caller.teamName;
  const replaced = req.name ? await snapshotsNamed(db, source.teamId, req.name) : [];
  const row: SnapshotRow = {
    id,
    teamId: source.teamId,
    keyId: caller.keyId,
    sandboxId,
    names: snapshotNames({ id, name: req.name ?? null }, teamName).names,
    createdAt: Date.now(),
    name: req.name ?? null,
    templateId: source.templateId,
    cluster: source.cluster,
    pending: false,
  };
  if (!(await fillSnapshot(db, row))) {
    // Its slot was taken for abandoned (it waited past PENDING_SNAPSHOT_TTL_MS): nothing names the copy.
    await freeOnAgent(env, source.cluster, [id]);
    throw new ApiError(ErrorCode.internal, `The snapshot of sandbox "${sandboxId}" took too long to be kept; retry it`);
  }
  if (replaced.length) await removeRows(env, source.teamId, replaced);
  return { snapshot: row };
}

/**
 * A slot for the snapshot, stored before the agent is asked to copy anything, within the team's
 * `snapshots` quota (429 naming it). The sandbox's team and cluster come from its group (the
 * snapshot itself checks the caller's access again); the limit from the team's quota object, which
 * refuses (503) when it cannot answer.
 */
async function holdSlot(env: Env, caller: Caller, sandboxId: string, id: string): Promise<SnapshotSlot> {
  const routed = await sandboxHandle(env, sandboxId).route();
  if (!routed.ok || (!caller.admin && routed.route.teamId !== caller.teamId)) throw new ApiError(ErrorCode.sandboxNotFound, sandboxNotFoundMessage(sandboxId));
  const { teamId, cluster } = routed.route;
  const quota = await quotaStub(env, teamId).status();
  if (!quota.ok) throw ApiError.from(quota.error);
  const slot: SnapshotSlot = { id, teamId, keyId: caller.keyId, sandboxId, cluster, createdAt: Date.now() };
  const limit = quota.status.limits.snapshots;
  const held = await reserveSnapshot(getDb(env), slot, limit);
  await freeByCluster(env, held.abandoned);
  if (!held.reserved) {
    const team = teamId === caller.teamId ? caller.teamName : teamId;
    throw new ApiError(ErrorCode.quotaExceeded, overMessage(team, { name: "snapshots", used: limit!, limit: limit! }));
  }
  return slot;
}

export interface ListSnapshotsInput {
  sandboxId?: string;
  name?: string;
  limit: number;
  after?: SnapshotCursor;
}

/** A page of the caller's team's snapshots (every team's for the admin), newest first. */
export async function listSnapshots(env: Env, caller: Caller, q: ListSnapshotsInput): Promise<{ rows: SnapshotRow[]; next?: SnapshotCursor }> {
  const idOrName = q.name === undefined ? undefined : parseSnapshotRef(q.name, caller.teamName);
  if (q.name !== undefined && idOrName === undefined) return { rows: [] };
  const rows = await listSnapshotRows(getDb(env), caller.admin ? null : caller.teamId, { sandboxId: q.sandboxId, idOrName, limit: q.limit, after: q.after });
  const more = rows.length > q.limit;
  const page = rows.slice(0, q.limit);
  const last = page.at(-1);
  return more && last ? { rows: page, next: { createdAt: last.createdAt, id: last.id } } : { rows: page };
}

/** Deletes the caller's team's snapshot; `found` is false when it has none by that reference. */
export async function deleteSnapshot(env: Env, caller: Caller, ref: string): Promise<Result<{ found: boolean }>> {
  return refusalsAsResult(async () => {
    const row = await resolveSnapshotRef(getDb(env), { id: caller.teamId, name: caller.teamName }, ref);
    if (!row) return { found: false };
    return { found: (await removeRows(env, row.teamId, [row])).length > 0 };
  });
}

/** Rows first (nobody can make a sandbox of it after), then the agent frees the files. */
async function removeRows(env: Env, teamId: string, rows: SnapshotRow[]): Promise<string[]> {
  const gone = await deleteSnapshotRows(getDb(env), teamId, rows.map((r) => r.id));
  await freeByCluster(env, rows.filter((r) => gone.includes(r.id)));
  return gone;
}

/** Tells each cluster's agent to free its snapshots' files. */
async function freeByCluster(env: Env, rows: { id: string; cluster: string }[]): Promise<void> {
  const byCluster = new Map<string, string[]>();
  for (const r of rows) byCluster.set(r.cluster, [...(byCluster.get(r.cluster) ?? []), r.id]);
  for (const [cluster, ids] of byCluster) await freeOnAgent(env, cluster, ids);
}

async function freeOnAgent(env: Env, cluster: string, ids: string[]): Promise<void> {
  try {
    await env.CLUSTER.get(env.CLUSTER.idFromName(cluster)).deleteSnapshots(ids);
  } catch (err) {
    console.warn(`snapshots ${ids.join(",")}: cluster ${cluster} not told to free them: ${String(err)}`);
  }
}

export interface ForkInput {
  timeoutS: number;
  count: number;
}

/** One fork's outcome: exactly one of sandbox or error. */
export type ForkOutcome = { sandbox: SandboxInfo } | { error: { code: ErrorCode; message: string } };

/**
 * E2B fork: one snapshot of the sandbox (left as it was), `count` new sandboxes from it, each
 * succeeding or failing on its own; the snapshot is then freed (each fork has its own copy).
 */
export async function forkSandbox(env: Env, caller: Caller, sandboxId: string, input: ForkInput): Promise<Result<{ forks: ForkOutcome[] }>> {
  return refusalsAsResult(async () => {
    const { snapshot } = await takeSnapshot(env, caller, sandboxId, {});
    try {
      const body: CreateSandboxInput["body"] = NewSandbox.parse({ templateID: snapshot.id, timeout: input.timeoutS });
      const forks = await Promise.all(
        Array.from({ length: input.count }, async (): Promise<ForkOutcome> => {
          const res = await createSandbox(env, caller, { version: "v2", body, ext: parseCreateExtensions() });
          return res.ok ? { sandbox: res.sandbox } : { error: res.error };
        }),
      );
      return { forks };
    } finally {
      await removeRows(env, snapshot.teamId, [snapshot]);
    }
  });
}
