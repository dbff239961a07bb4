// Update ops runs (SandboxUpdateOps): the admin API (functions/api/admin-update-ops.ts) and
// ClusterDO's synced CRDs both come here, so a run behaves the same whichever door it came in by.
// Each run also has a row in libSQL (store/update-ops-runs.ts) from its start to its removal, so
// runs can be listed.
import type { Env } from "../env.ts";
import type { UpdateOpsSpec } from "../../schema/api/update-ops.ts";
import type { OpsResult } from "../ops/update-ops-do.ts";
import { opsStub } from "../ops/stub.ts";
import { currentTraceparent, edgeSpan } from "../tracing/edge-tracing.ts";
import { ErrorCode } from "../../schema/errors.ts";
import { getDb } from "../store/db.ts";
import { forgetOpsRun, recordOpsRun } from "../store/update-ops-runs.ts";
import type { Result } from "../sandbox/state.ts";

export interface OpsTeam {
  id: string;
  name: string;
}

/** Starts the run, or applies what may change (`paused`, `maxUnavailable`) to the one of that name. */
export function startUpdateOps(env: Env, team: OpsTeam, name: string, spec: UpdateOpsSpec): Promise<OpsResult> {
  return traced<OpsResult>(env, "start", team, name, async () => {
    const traceparent = currentTraceparent();
    const res = await opsStub(env, team.id, name).start({ name, teamId: team.id, spec, ...(traceparent ? { traceparent } : {}) });
    // After the run exists (a failed write leaves a run without a row; a retried start writes it).
    if (res.ok) await recordOpsRun(getDb(env), team.id, name);
    return res;
  });
}

export function changeUpdateOps(env: Env, team: OpsTeam, name: string, change: { paused?: boolean; maxUnavailable?: number | string }): Promise<OpsResult> {
  return traced<OpsResult>(env, "change", team, name, () => opsStub(env, team.id, name).change(change));
}

/** Retries the failed sandboxes of a run. */
export function resumeUpdateOps(env: Env, team: OpsTeam, name: string): Promise<OpsResult> {
  return traced<OpsResult>(env, "resume", team, name, () => opsStub(env, team.id, name).resume());
}

export function updateOpsStatus(env: Env, team: OpsTeam, name: string): Promise<OpsResult> {
  return traced<OpsResult>(env, "status", team, name, () => opsStub(env, team.id, name).status());
}

export function removeUpdateOps(env: Env, team: OpsTeam, name: string): Promise<Result> {
  return traced<Result>(env, "remove", team, name, async () => {
    const res = await opsStub(env, team.id, name).remove();
    if (res.ok || res.error.code === ErrorCode.notFound) await forgetOpsRun(getDb(env), team.id, name);
    return res;
  });
}

/** Each call on a run is a span of the caller's trace; the run's alarm steps join the trace of its start. */
function traced<T>(env: Env, method: string, team: OpsTeam, name: string, work: () => Promise<T>): Promise<T> {
  return edgeSpan(env, `UpdateOpsDO.${method}`, { "team.id": team.id, "ops.name": name }, work);
}
