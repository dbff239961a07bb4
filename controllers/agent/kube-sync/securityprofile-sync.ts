// CRD sync for SecurityProfiles (OpenKruise Agents §1.8, §6.2): each SecurityProfile of the
// namespace becomes the team's profile on the edge (`securityprofileobjects`), which sends every
// agent the whole set like the admin API's (durable-objects/operations/security-profiles.ts);
// status says whether it was accepted and lists nothing more (the edge's selectedSandboxes are
// not a field of this CRD's status). A spec beyond what the traffic-proxy enforces
// (schema/api/security-profile.ts: Regex paths, header/port/scheme/query matches, `inputs`, audit
// webhooks, AliyunSTS) is never sent: Accepted False, reason Unsupported, naming the field. The
// push, status polling and deletes: edge-object-sync.ts. GlobalSecurityProfiles (cluster-scoped)
// sync the same way with `namespace` null: one sync for the cluster (crd-link.ts); on the agents
// they run in one order with the team's profiles (controllers/traffic/l7/profile-crd.ts).
import type { KubernetesObject } from "@kubernetes/client-node";
import { SecurityProfileSpec } from "../../../schema/api/security-profile.ts";
import { setCondition, type Condition } from "../../../schema/crd/conditions.ts";
import { EdgeObjectSync, type EdgeObjectKind, type EdgeObjectSyncOptions } from "./edge-object-sync.ts";

export interface SecurityProfileObject extends KubernetesObject {
  spec?: unknown;
  status?: SecurityProfileStatus;
}

export interface SecurityProfileStatus {
  observedGeneration?: number;
  conditions?: Condition[];
}

const accepted = (prev: SecurityProfileStatus | undefined, generation: number, ok: boolean, reason: string, message: string, now: string): SecurityProfileStatus => {
  let conditions = setCondition(prev?.conditions, { type: "Accepted", status: ok ? "True" : "False", reason, message, observedGeneration: generation }, now);
  conditions = setCondition(conditions, { type: "Programmed", status: ok ? "True" : "False", reason: ok ? "Programmed" : reason, message: ok ? "sent to every cluster's traffic-proxy" : message, observedGeneration: generation }, now);
  return { observedGeneration: generation, conditions };
};

/** A SecurityProfile (a namespace's: the team's) or a GlobalSecurityProfile (cluster-scoped,
 * `namespace` null on the edge: every team's sandboxes its selector matches). The global kind
 * takes no inventory, as GlobalTrafficPolicies. */
function securityKind(kind: "SecurityProfile" | "GlobalSecurityProfile"): EdgeObjectKind<SecurityProfileObject, SecurityProfileStatus> {
  return {
    kind,
    plural: kind === "SecurityProfile" ? "securityprofiles" : "globalsecurityprofiles",
    call: "securityprofileobjects",
    ...(kind === "GlobalSecurityProfile" ? { inventory: false } : {}),
    upsert(o) {
      const spec = SecurityProfileSpec.safeParse(o.spec ?? {});
      if (spec.success) return { spec: spec.data };
      return { problem: spec.error.issues.map((i) => `spec.${i.path.join(".")}: ${i.message}`).join("; ") };
    },
    status: (prev, generation, _reply, now) => accepted(prev, generation, true, "Accepted", "", now),
    refused: (prev, generation, reply, now) => accepted(prev, generation, false, reply.code === "bad_request" ? "Unsupported" : "Rejected", reply.message ?? reply.code ?? "", now),
    events: () => [],
  };
}

export const securityProfileKind = securityKind("SecurityProfile");
export const globalSecurityProfileKind = securityKind("GlobalSecurityProfile");

/** A namespace's SecurityProfiles, or (`namespace: null`) the cluster's GlobalSecurityProfiles. */
export class SecurityProfileSync extends EdgeObjectSync<SecurityProfileObject, SecurityProfileStatus> {
  constructor(opts: EdgeObjectSyncOptions) {
    super(opts.namespace === null ? globalSecurityProfileKind : securityProfileKind, opts);
  }
}
