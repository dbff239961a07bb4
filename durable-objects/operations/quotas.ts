// Setting a team's quota (TeamQuotaDO): the admin API (`PUT /admin/teams/{team}/quota`) and the
// CRD sync (the quota annotations of a cluster's team Namespace, applied by ClusterDO) both come here.
import type { TeamQuotaUpdate } from "../../schema/api/quota.ts";
import type { Env } from "../env.ts";
import { quotaStub } from "../quota/stub.ts";

/** Replaces the team's own limits (a limit left out takes the deployment's default); answers the
 * limits now in force and the team's usage. */
export function setTeamQuota(env: Env, teamId: string, limits: TeamQuotaUpdate) {
  return quotaStub(env, teamId).setLimits(limits);
}
