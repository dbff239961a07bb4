// Admin HTTP API for SecurityProfile (a team's) and GlobalSecurityProfile (every team's), for
// deployments without Kubernetes (OpenKruise §1.8/§6.2 within the subset schema/api/security-profile.ts
// takes; controllers/traffic/l7/profile.ts enforces them).
//   GET    /admin/security-profiles                              every profile, with status
//   GET    /admin/teams/{team}/security-profiles[/{name}]        a team's
//   PUT    /admin/teams/{team}/security-profiles/{name}          {priority?, selector?, rules, rateLimit?}
//   DELETE /admin/teams/{team}/security-profiles/{name}
//   GET|PUT|DELETE /admin/global-security-profiles/{name}
import { getSecurityProfileView, listSecurityProfileViews, removeSecurityProfile, securityProfileKeys, setSecurityProfile } from "../../durable-objects/operations/security-profiles.ts";
import { globalProfileRefusal, MAX_SECURITY_PROFILES, SecurityProfileName, SecurityProfileSpec } from "../../schema/api/security-profile.ts";
import { policyRoutes } from "./admin-policy-routes.ts";

export const adminSecurityProfiles = policyRoutes({
  plural: "security-profiles",
  kind: "SecurityProfile",
  auditAs: "security-profile",
  max: MAX_SECURITY_PROFILES,
  name: SecurityProfileName,
  nameLabel: "profile name",
  spec: SecurityProfileSpec,
  list: listSecurityProfileViews,
  keys: securityProfileKeys,
  get: getSecurityProfileView,
  set: setSecurityProfile,
  remove: removeSecurityProfile,
  globalRefusal: globalProfileRefusal,
});
