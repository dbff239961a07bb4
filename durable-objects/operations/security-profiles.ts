// SecurityProfile / GlobalSecurityProfile operations (the admin API and the CRD sync;
// schema/api/security-profile.ts): one configuration of policy-objects.ts. After every change each
// cluster's agent gets the global profiles and those of the teams it serves
// (ClusterDO.sendSecurityProfiles; an agent connecting later gets them with its welcome). Status:
// the live sandboxes each profile selects.
import { tokenSecretNames, type SecurityProfileEntry } from "../../schema/api/security-profile.ts";
import { getDb } from "../store/db.ts";
import { deleteSecurityProfile, listSecurityProfiles, putSecurityProfile } from "../store/security-profiles.ts";
import type { Env } from "../env.ts";
import { policyObjects, toEveryAgent, type PolicyObjectView } from "./policy-objects.ts";

export type SecurityProfileView = PolicyObjectView<SecurityProfileEntry, "SecurityProfile" | "GlobalSecurityProfile">;

const profiles = policyObjects({
  kinds: { team: "SecurityProfile", global: "GlobalSecurityProfile" },
  list: listSecurityProfiles,
  put: putSecurityProfile,
  remove: deleteSecurityProfile,
  push: (env) => pushSecurityProfiles(env),
});

/** Sends each cluster's agent its set again, after a profile changes; how many had an agent
 * connected. */
export function pushSecurityProfiles(env: Env): Promise<number> {
  return toEveryAgent(env, (c) => c.sendSecurityProfiles());
}

/** After a team's secret `name` was created, changed or deleted: only when one of the team's own
 * profiles names it (a global one may not) does its set go again, and only to the agents that
 * have the team's profiles (ClusterDO.resendForTeam); how many did. */
export async function secretChanged(env: Env, team: string, name: string): Promise<number> {
  const named = (await listSecurityProfiles(getDb(env))).some((p) => p.team === team && tokenSecretNames(p.spec).includes(name.toLowerCase()));
  return named ? toEveryAgent(env, (c) => c.resendForTeam(team)) : 0;
}

export const listSecurityProfileViews = profiles.list;
export const securityProfileKeys = profiles.keys;
export const getSecurityProfileView = profiles.get;
export const setSecurityProfile = profiles.set;
/** Whether there was one. */
export const removeSecurityProfile = profiles.remove;
