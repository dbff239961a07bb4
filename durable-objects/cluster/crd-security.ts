// SecurityProfiles and GlobalSecurityProfiles from a cluster (schema/protocol/crd-sync.ts
// `securityprofileobjects`), applied through the admin API's operations: stored, sent to the agents
// (ClusterDO.sendSecurityProfiles), and answered with the live sandboxes each selects (the object's
// status). Only a cluster bound to the team (operations/team-clusters.ts) may set the team's
// profiles, as for traffic policies (crd-traffic.ts); a global one only a cluster the operator
// trusts with every team (`GLOBAL_POLICY_CLUSTERS`, as for GlobalTrafficPolicies), and never one
// naming a secret (globalProfileRefusal: it would apply to every team's secrets). The edge
// keeps each profile's owner (store: "admin" or "cluster"): a cluster's write, delete or status
// of a profile the admin API made is rejected (`conflict`, which the agent writes as the object's
// refused condition), and the admin API may not overwrite a cluster's. The inventory prunes
// nothing (an object deleted while the agent was down stays until deleted through the admin API,
// as for TrafficPolicies).
import { globalProfileRefusal } from "../../schema/api/security-profile.ts";
import type { ReplyItem, SandboxId, SecurityProfileItem } from "../../schema/protocol/index.ts";
import type { Env } from "../env.ts";
import { ApiError } from "../../schema/errors.ts";
import { clusterProfileView, removeSecurityProfile, setSecurityProfile } from "../operations/security-profiles.ts";
import { clusterTeamOrRefusal, globalWriterRefusal } from "../operations/team-clusters.ts";

export async function applySecurityProfile(env: Env, cluster: string, item: SecurityProfileItem): Promise<Omit<ReplyItem, "id">> {
  if ("present" in item) return { result: "applied" };
  // A GlobalSecurityProfile (namespace null) can drop a restriction of every team's sandboxes.
  const may = item.namespace === null ? globalWriterRefusal(env, cluster, "GlobalSecurityProfile", "/admin/global-security-profiles") : await clusterTeamOrRefusal(env, cluster, item.namespace, "the team's security profiles");
  if (may && "result" in may) return may;
  if (may && "code" in may) return { result: "rejected", ...may };
  const refused = item.namespace === null && "spec" in item ? globalProfileRefusal(item.spec) : null;
  if (refused) return { result: "rejected", code: "bad_request", message: refused };
  try {
    if ("deleted" in item) {
      await removeSecurityProfile(env, item.namespace, item.name, "cluster");
      return { result: "applied" };
    }
    return await applied(env, item);
  } catch (e) {
    // The admin API holds a profile of that name: the object gets a refused condition (its status).
    if (e instanceof ApiError && e.code === "conflict") return { result: "rejected", code: e.code, message: e.message };
    throw e;
  }
}

async function applied(env: Env, item: Exclude<SecurityProfileItem, { present: unknown } | { deleted: unknown }>): Promise<Omit<ReplyItem, "id">> {
  const view = "status" in item ? await clusterProfileView(env, item.namespace, item.name) : await setSecurityProfile(env, item.namespace, item.name, item.spec, "cluster");
  if (!view) return { result: "rejected", code: "not_found", message: `no profile ${item.namespace}/${item.name} on the edge` };
  return { result: "applied", selectedSandboxes: view.status.selectedSandboxes.slice(0, 1000) as SandboxId[] };
}
