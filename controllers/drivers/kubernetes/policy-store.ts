// The edge's TrafficPolicy set, kept in ConfigMap `sandbox-traffic-policies` of the agent's home
// namespace (as the local driver keeps it on disk, egress.ts `persistIn`). After an agent restart
// the driver starts from the last set it was sent: without it a new pod of a sandbox that only a
// TrafficPolicy governs would be built without its proxy until the edge sends the set again (or
// never, when the edge cannot read libSQL at the hello). The agent is the only writer. The
// SecurityProfile set is kept the same way (ConfigMap `sandbox-security-profiles`): rewritten
// without it, a running pod's file would lose what its profiles enforce. Neither holds a secret
// value (profiles name secrets; the values stay in the agent's memory).
import { z } from "zod";
import type { CoreV1Api, V1ConfigMap } from "@kubernetes/client-node";
import { MAX_SECURITY_PROFILES, SecurityProfileEntry } from "../../../schema/api/security-profile.ts";
import { MAX_TRAFFIC_POLICIES, TrafficPolicyEntry } from "../../../schema/api/traffic-policy.ts";
import { LABEL } from "../../../schema/crd/labels.ts";
import { statusCode } from "./kube-api.ts";

export const POLICY_SET_CONFIGMAP = "sandbox-traffic-policies";
export const PROFILE_SET_CONFIGMAP = "sandbox-security-profiles";
const POLICIES = { name: POLICY_SET_CONFIGMAP, key: "traffic-policies.json", schema: z.array(TrafficPolicyEntry).max(MAX_TRAFFIC_POLICIES) };
export const PROFILES = { name: PROFILE_SET_CONFIGMAP, key: "security-profiles.json", schema: z.array(SecurityProfileEntry).max(MAX_SECURITY_PROFILES) };

interface Kind<T> {
  name: string;
  key: string;
  schema: z.ZodType<T[]>;
}

export class PolicySetStore<T = TrafficPolicyEntry> {
  readonly #core: CoreV1Api;
  readonly #namespace: string;
  readonly #count: () => void;
  /** The text on the server as far as this agent knows (a save of the same text is skipped). */
  #last: string | undefined;
  /** Saves begun: a load that overlapped one read what may be older than the server's now. */
  #saves = 0;
  readonly #kind: Kind<T>;

  constructor(core: CoreV1Api, namespace: string, count: () => void, kind: Kind<T> = POLICIES as unknown as Kind<T>) {
    this.#kind = kind;
    this.#core = core;
    this.#namespace = namespace;
    this.#count = count;
  }

  /** The stored set; undefined when none was ever stored. Throws when it cannot be read or does
   * not parse (the caller then waits for the edge's, as without a store). */
  async load(): Promise<T[] | undefined> {
    const { name: POLICY_SET_CONFIGMAP, key: KEY, schema: Stored } = this.#kind;
    this.#count();
    const saves = this.#saves;
    let cm: V1ConfigMap;
    try {
      cm = await this.#core.readNamespacedConfigMap({ namespace: this.#namespace, name: POLICY_SET_CONFIGMAP });
    } catch (err) {
      if (statusCode(err) === 404) return undefined;
      throw err;
    }
    const text = cm.data?.[KEY];
    if (text === undefined) return undefined;
    const parsed = Stored.safeParse(JSON.parse(text));
    if (!parsed.success) throw new Error(`${POLICY_SET_CONFIGMAP}: ${parsed.error.issues[0]?.message ?? "invalid"}`);
    if (this.#saves === saves) this.#last = text;
    return parsed.data;
  }

  /** Stores `entries` (no request when unchanged). */
  async save(entries: T[]): Promise<void> {
    const { name: POLICY_SET_CONFIGMAP, key: KEY } = this.#kind;
    this.#saves++;
    const text = JSON.stringify(entries);
    if (text === this.#last) return;
    const body: V1ConfigMap = { apiVersion: "v1", kind: "ConfigMap", metadata: { name: POLICY_SET_CONFIGMAP, namespace: this.#namespace, labels: { [LABEL.createdBy]: "sandbox-agent" } }, data: { [KEY]: text } };
    this.#count();
    try {
      await this.#core.createNamespacedConfigMap({ namespace: this.#namespace, body });
    } catch (err) {
      if (statusCode(err) !== 409) throw err;
      this.#count(); // replace without a resourceVersion: the agent is the only writer
      await this.#core.replaceNamespacedConfigMap({ namespace: this.#namespace, name: POLICY_SET_CONFIGMAP, body });
    }
    this.#last = text;
  }
}
