// TrafficPolicies and GlobalTrafficPolicies from a cluster (schema/protocol/crd-sync.ts
// `trafficpolicyobjects`), applied through the admin API's operations: stored, sent to the agents
// of the clusters that serve the policy's team (a global one to every agent:
// ClusterDO.sendTrafficPolicies), and answered with the live sandboxes each selects (its status).
//
// Which cluster may set a team's TrafficPolicy: one bound to the team (operations/team-clusters.ts),
// as for quotas (crd-quota.ts): a policy can open a team's egress, so a cluster that merely has a
// namespace of that name must not. A GlobalTrafficPolicy (its write, delete or status, which lists
// every team's sandboxes) only from a cluster the operator trusts with every team
// (`GLOBAL_POLICY_CLUSTERS`, team-clusters.ts `globalWriterRefusal`): it can open egress or lift
// a restriction on every cluster. Two sources of one policy (two clusters, or a cluster and the
// admin API): the last write wins.
import type { ReplyItem, SandboxId, TrafficPolicyItem } from "../../schema/protocol/index.ts";
import type { Env } from "../env.ts";
import { getTrafficPolicyView, removeTrafficPolicy, setTrafficPolicy } from "../operations/traffic-policies.ts";
import { clusterTeamOrRefusal, globalWriterRefusal } from "../operations/team-clusters.ts";
import { globalSelectorRefusal } from "../../schema/api/traffic-policy.ts";

export async function applyTrafficPolicy(env: Env, cluster: string, item: TrafficPolicyItem): Promise<Omit<ReplyItem, "id">> {
  const team = item.namespace;
  const may = team === null ? globalWriterRefusal(env, cluster, "GlobalTrafficPolicy", "/admin/global-traffic-policies") : await clusterTeamOrRefusal(env, cluster, team, "the team's traffic policies");
  if (may && "result" in may) return may;
  if (may && "code" in may) return { result: "rejected", ...may };
  if ("deleted" in item) {
    await removeTrafficPolicy(env, team, item.name);
    return { result: "applied" };
  }
  // The agent refuses such a global before it sends it; an older or rogue agent may not, and the
  // admin API refuses the same (review 26 H2).
  const refused = team === null && "spec" in item ? globalSelectorRefusal(item.spec.selector) : null;
  if (refused) return { result: "rejected", code: "bad_request", message: refused };
  const view = "status" in item ? await getTrafficPolicyView(env, team, item.name) : await setTrafficPolicy(env, team, item.name, item.spec);
  if (!view) return { result: "rejected", code: "not_found", message: `no policy ${team ?? ""}/${item.name} on the edge` };
  return { result: "applied", selectedSandboxes: view.status.selectedSandboxes.slice(0, 1000) as SandboxId[] };
}
