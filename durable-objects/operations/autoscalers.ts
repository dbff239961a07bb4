// Setting and removing a pool's PoolAutoscaler: the template must exist (its pool is the target).
// The admin API calls this, and so does ClusterDO for a synced PoolAutoscaler (cluster/crd-autoscalers.ts).
import type { AutoscalerSpec } from "../../schema/api/autoscaler.ts";
import { ApiError } from "../../schema/errors.ts";
import type { Env } from "../env.ts";
import { poolStub } from "../pool/stub.ts";
import type { AutoscalerResult, AutoscalerStatus } from "../pool/rpc.ts";
import type { Result } from "../sandbox/state.ts";
import { getDb } from "../store/db.ts";
import { getTemplate } from "../store/templates.ts";
import { refusalsAsResult } from "./result.ts";
import { currentTraceparent, edgeSpan } from "../tracing/edge-tracing.ts";

/** Sets (spec) or removes (null) the autoscaler of a team's template's pool. */
export async function setAutoscaler(env: Env, teamId: string, templateId: string, spec: AutoscalerSpec | null): Promise<Result<{ status: AutoscalerStatus }>> {
  return refusalsAsResult(async () => {
    if (!(await getTemplate(getDb(env), teamId, templateId))) throw new ApiError("template_not_found", `Template "${templateId}" not found`);
    // Set and evaluated at once: the evaluation (and the creates of its scale) join the caller's trace.
    const res = await edgeSpan<AutoscalerResult>(env, "PoolDO.setAutoscaler", { "pool.name": `${teamId}/${templateId}` }, () => poolStub(env, teamId, templateId).setAutoscaler(spec, currentTraceparent()));
    if (!res.ok) throw ApiError.from(res.error);
    return { status: res.status };
  });
}
