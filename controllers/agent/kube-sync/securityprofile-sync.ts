// CRD sync for SecurityProfiles (OpenKruise Agents §1.8, §6.2): each SecurityProfile of the
// namespace becomes the team's profile on the edge (`securityprofileobjects`), which sends it to
// the agents of the clusters that serve the team like the admin API's
// (durable-objects/operations/security-profiles.ts);
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
  conditions = setCondition(conditions, { type: "Programmed", status: ok ? "True" : "False", reason: ok ? "Programmed" : reason, message: ok ? "sent to the traffic-proxies of the clusters that serve it" : message, observedGeneration: generation }, now);
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
      // Through JSON: the informer's slim copy carries `template`/`volumeClaimTemplates` keys set to
      // undefined (slimCustom), which the strict schema would refuse as unrecognized.
      const spec = SecurityProfileSpec.safeParse(JSON.parse(JSON.stringify(o.spec ?? {})));
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

export const NOT_ENFORCED = "this cluster's driver (kubernetes) enforces no L7 in pods: the edge accepted the profile, but no traffic-proxy here applies it (its sandboxes' HTTP(S) is governed by TrafficPolicies and E2B rules only)";

/** The kind as a cluster whose driver enforces no SecurityProfile reports it: what the edge
 * accepted stays Accepted, but Programmed is False (NotEnforcedByDriver), with a Warning Event,
 * rather than claiming a proxy applies it. */
export function notEnforcedHere(k: EdgeObjectKind<SecurityProfileObject, SecurityProfileStatus>): EdgeObjectKind<SecurityProfileObject, SecurityProfileStatus> {
  return {
    ...k,
    status(prev, generation, reply, now) {
      const s = k.status(prev, generation, reply, now);
      if (!s) return s;
      return { ...s, conditions: setCondition(s.conditions, { type: "Programmed", status: "False", reason: "NotEnforcedByDriver", message: NOT_ENFORCED, observedGeneration: generation }, now) };
    },
    events: (name, reply) => [...(k.events?.(name, reply) ?? []), { name: `${name.slice(0, 230)}.not-enforced`, time: new Date(), type: "Warning", reason: "NotEnforcedByDriver", message: NOT_ENFORCED }],
  };
}

/** How many running pods a profile selects, and in how many of them its traffic-proxy is ready
 * (the kubernetes driver's `profileEnforcement`). */
export type PodEnforcement = (ref: { namespace: string | null; name: string }) => { selected: number; ready: number };

/** The kind as a cluster whose pods' sidecars enforce profiles reports it, honestly per pod:
 * Programmed True only while the traffic-proxy of every pod the profile selects is ready (none
 * selected yet: True, new pods get it), else False `SidecarNotReady` saying how many are. */
export function programmedInPods(k: EdgeObjectKind<SecurityProfileObject, SecurityProfileStatus>, namespace: string | null, pods: PodEnforcement): EdgeObjectKind<SecurityProfileObject, SecurityProfileStatus> {
  return {
    ...k,
    status(prev, generation, reply, now, name) {
      const s = k.status(prev, generation, reply, now, name);
      if (!s || name === undefined) return s;
      const { selected, ready } = pods({ namespace, name });
      const all = ready === selected;
      const message = selected === 0 ? "no running pod selected: each pod it selects gets it in its traffic-proxy" : `in force in the traffic-proxy of ${ready} of the ${selected} running pods it selects`;
      return { ...s, conditions: setCondition(s.conditions, { type: "Programmed", status: all ? "True" : "False", reason: all ? "Programmed" : "SidecarNotReady", message, observedGeneration: generation }, now) };
    },
  };
}

/** A namespace's SecurityProfiles, or (`namespace: null`) the cluster's GlobalSecurityProfiles;
 * `enforced: false`: the agent's driver applies no SecurityProfile (notEnforcedHere); `pods`: the
 * pods' sidecars apply them (programmedInPods). */
export class SecurityProfileSync extends EdgeObjectSync<SecurityProfileObject, SecurityProfileStatus> {
  constructor(opts: EdgeObjectSyncOptions & { enforced?: boolean; pods?: PodEnforcement }) {
    const kind = opts.namespace === null ? globalSecurityProfileKind : securityProfileKind;
    super(opts.enforced === false ? notEnforcedHere(kind) : opts.pods ? programmedInPods(kind, opts.namespace, opts.pods) : kind, opts);
  }
}
