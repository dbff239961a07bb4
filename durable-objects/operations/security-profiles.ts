// SecurityProfile / GlobalSecurityProfile operations (the admin API and the CRD sync;
// schema/api/security-profile.ts): one configuration of policy-objects.ts. After every change the
// whole set goes to every cluster's agent (ClusterDO.sendSecurityProfiles; an agent connecting
// later gets it with its welcome). Status: the live sandboxes each profile selects.
import type { SecurityProfileEntry } from "../../schema/api/security-profile.ts";
import { deleteSecurityProfile, listSecurityProfiles, putSecurityProfile } from "../store/security-profiles.ts";
import { policyObjects, toEveryAgent, type PolicyObjectView } from "./policy-objects.ts";

export type SecurityProfileView = PolicyObjectView<SecurityProfileEntry, "SecurityProfile" | "GlobalSecurityProfile">;

const profiles = policyObjects({
  kinds: { team: "SecurityProfile", global: "GlobalSecurityProfile" },
  list: listSecurityProfiles,
  put: putSecurityProfile,
  remove: deleteSecurityProfile,
  push: (env) => toEveryAgent(env, (c) => c.sendSecurityProfiles()),
});

export const listSecurityProfileViews = profiles.list;
export const securityProfileKeys = profiles.keys;
export const getSecurityProfileView = profiles.get;
export const setSecurityProfile = profiles.set;
/** Whether there was one. */
export const removeSecurityProfile = profiles.remove;
