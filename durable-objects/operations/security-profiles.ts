// SecurityProfile / GlobalSecurityProfile operations (the admin API and the CRD sync;
// schema/api/security-profile.ts): one configuration of policy-objects.ts. After every change each
// cluster's agent gets the global profiles and those of the teams it serves
// (ClusterDO.sendSecurityProfiles; an agent connecting later gets them with its welcome). Status:
// the live sandboxes each profile selects.
import { tokenSecretNames, type SecurityProfileEntry, type SecurityProfileSpec } from "../../schema/api/security-profile.ts";
import { ApiError } from "../../schema/errors.ts";
import { getDb } from "../store/db.ts";
import { deleteSecurityProfile, listSecurityProfiles, putSecurityProfile, securityProfileOwner, type ProfileOwner } from "../store/security-profiles.ts";
import type { Env } from "../env.ts";
import { policyObjects, toEveryAgent, type PolicyObjectView } from "./policy-objects.ts";

export type SecurityProfileView = PolicyObjectView<SecurityProfileEntry, "SecurityProfile" | "GlobalSecurityProfile">;

/** A write of `writer` to a profile the other owner holds: refused, so a cluster's CRD and the
 * admin API never silently replace each other's object of the same name. */
function heldBy(team: string | null, name: string, holder: ProfileOwner): ApiError {
  const what = `${team === null ? "GlobalSecurityProfile" : `SecurityProfile ${team}/`}${team === null ? ` "${name}"` : name}`;
  return new ApiError(
    "conflict",
    holder === "admin"
      ? `${what} was made through the admin API, so a cluster's object may not change or delete it (rename the object, or delete the profile through the admin API first)`
      : `${what} comes from a cluster's object; change it there (the admin API may only delete it)`,
  );
}

const profiles = policyObjects({
  kinds: { team: "SecurityProfile", global: "GlobalSecurityProfile" },
  list: listSecurityProfiles,
  async put(db, team, name, spec: SecurityProfileSpec, writer?: ProfileOwner) {
    const held = await putSecurityProfile(db, team, name, spec, writer ?? "admin");
    if (held) throw heldBy(team, name, held);
  },
  async remove(db, team, name, writer?: ProfileOwner) {
    const r = await deleteSecurityProfile(db, team, name, writer);
    if (typeof r === "string") throw heldBy(team, name, r);
    return r;
  },
  push: (env) => pushSecurityProfiles(env),
});

/** A profile's status for a cluster's object of that name: refused (409) when the admin API holds it. */
export async function clusterProfileView(env: Env, team: string | null, name: string): Promise<SecurityProfileView | undefined> {
  if ((await securityProfileOwner(getDb(env), team, name)) === "admin") throw heldBy(team, name, "admin");
  return profiles.get(env, team, name);
}

/** Sends each cluster's agent its set again, after a profile changes; how many had an agent
 * connected. */
export function pushSecurityProfiles(env: Env): Promise<number> {
  return toEveryAgent(env, (c) => c.sendSecurityProfiles());
}

/** After a team's secret `name` was created, changed or deleted: only when one of the team's own
 * profiles names it (a global one may not) does its set go again, and only to the agents that
 * have the team's profiles (ClusterDO.resendForTeam); how many did. */
export async function secretChanged(env: Env, team: string, name: string): Promise<number> {
  const named = (await listSecurityProfiles(getDb(env), [team])).some((p) => tokenSecretNames(p.spec).includes(name.toLowerCase()));
  return named ? toEveryAgent(env, (c) => c.resendForTeam(team)) : 0;
}

export const listSecurityProfileViews = profiles.list;
export const securityProfileKeys = profiles.keys;
export const getSecurityProfileView = profiles.get;
/** `writer` "cluster" for a cluster's object; the admin API's by default. 409 when the other holds it. */
export const setSecurityProfile = (env: Env, team: string | null, name: string, spec: SecurityProfileSpec, writer: ProfileOwner = "admin") => profiles.set(env, team, name, spec, writer);
/** Whether there was one. A cluster (`writer` "cluster") may not delete the admin API's (409);
 * the admin API may delete any (the way out for an object a gone cluster left behind). */
export const removeSecurityProfile = (env: Env, team: string | null, name: string, writer?: ProfileOwner) => profiles.remove(env, team, name, writer);
