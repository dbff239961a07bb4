// The edge's TrafficPolicy set, kept in ConfigMap `sandbox-traffic-policies` of the agent's home
// namespace (as the local driver keeps it on disk, egress.ts `persistIn`). After an agent restart
// the driver starts from the last set it was sent: without it a new pod of a sandbox that only a
// TrafficPolicy governs would be built without its proxy until the edge sends the set again (or
// never, when the edge cannot read libSQL at the hello). The agent is the only writer. The
// SecurityProfile set is kept the same way, but in Secret `sandbox-security-profiles`: rewritten
// without it, a running pod's file would lose what its profiles enforce, and a profile's literal
// header values (a GlobalSecurityProfile's `set` is how the platform injects a credential) are for
// the agent and the pods' sidecars only. Reading it back needs `get` on that one Secret
// (k8s/rbac.yaml, in the agent's own namespace); the agent reads no other Secret. The values of
// named secrets are in neither (they stay in the agent's memory).
import { gunzipSync, gzipSync } from "node:zlib";
import { z } from "zod";
import type { CoreV1Api, V1ConfigMap, V1Secret } from "@kubernetes/client-node";
import { MAX_SECURITY_PROFILES, SecurityProfileEntry } from "../../../schema/api/security-profile.ts";
import { MAX_TRAFFIC_POLICIES, TrafficPolicyEntry } from "../../../schema/api/traffic-policy.ts";
import { LABEL } from "../../../schema/crd/labels.ts";
import { statusCode, tolerate } from "./kube-api.ts";
import { MAX_POD_OBJECT_BYTES } from "./traffic-pod.ts";

/** The most a stored set may inflate to on load (a set is a few MB at most in practice). */
export const MAX_SET_BYTES = 32 * 1024 * 1024;

export const POLICY_SET_CONFIGMAP = "sandbox-traffic-policies";
export const PROFILE_SET_SECRET = "sandbox-security-profiles";
const POLICIES = { name: POLICY_SET_CONFIGMAP, key: "traffic-policies.json", schema: z.array(TrafficPolicyEntry).max(MAX_TRAFFIC_POLICIES) };
export const PROFILES = { name: PROFILE_SET_SECRET, key: "security-profiles.json", schema: z.array(SecurityProfileEntry).max(MAX_SECURITY_PROFILES), secret: true };

interface Kind<T> {
  name: string;
  key: string;
  schema: z.ZodType<T[]>;
  /** Kept in a Secret (data base64) rather than a ConfigMap. */
  secret?: boolean;
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
    const { name, key, schema: Stored, secret } = this.#kind;
    this.#count();
    const saves = this.#saves;
    let text: string | undefined;
    try {
      const o = secret ? await this.#core.readNamespacedSecret({ namespace: this.#namespace, name }) : await this.#core.readNamespacedConfigMap({ namespace: this.#namespace, name });
      text = storedText(o, key, !!secret);
    } catch (err) {
      if (statusCode(err) === 404) return undefined;
      throw err;
    }
    if (text === undefined) return undefined;
    const parsed = Stored.safeParse(JSON.parse(text));
    if (!parsed.success) throw new Error(`${name}: ${parsed.error.issues[0]?.message ?? "invalid"}`);
    if (this.#saves === saves) this.#last = text;
    return parsed.data;
  }

  /** Stores `entries` (no request when unchanged). */
  async save(entries: T[]): Promise<void> {
    const { name, key, secret } = this.#kind;
    this.#saves++;
    const text = JSON.stringify(entries);
    if (text === this.#last) return;
    const namespace = this.#namespace;
    const metadata = { name, namespace, labels: { [LABEL.createdBy]: "sandbox-agent" } };
    const gz = Buffer.byteLength(text) <= MAX_SET_BYTES ? gzipSync(text).toString("base64") : undefined;
    if (gz === undefined || gz.length > MAX_POD_OBJECT_BYTES) {
      // Not storable: no stored set at all rather than an older one (see the top).
      this.#count();
      await tolerate(secret ? this.#core.deleteNamespacedSecret({ namespace, name }) : this.#core.deleteNamespacedConfigMap({ namespace, name }), [404]);
      this.#last = undefined;
      throw new Error(`the set of ${entries.length} takes ${Buffer.byteLength(text)} bytes of JSON${gz ? `, ${gz.length} gzipped` : ""}, over what ${secret ? "a Secret" : "a ConfigMap"} holds: not stored, and the stored one deleted (a restarted agent waits for the edge's set)`);
    }
    const secretBody = { apiVersion: "v1", kind: "Secret", type: "Opaque", metadata, data: { [`${key}.gz`]: gz } };
    const configMapBody = { apiVersion: "v1", kind: "ConfigMap", metadata, binaryData: { [`${key}.gz`]: gz } };
    this.#count();
    try {
      await (secret ? this.#core.createNamespacedSecret({ namespace, body: secretBody }) : this.#core.createNamespacedConfigMap({ namespace, body: configMapBody }));
    } catch (err) {
      if (statusCode(err) !== 409) throw err;
      this.#count(); // replace without a resourceVersion: the agent is the only writer
      await (secret ? this.#core.replaceNamespacedSecret({ namespace, name, body: secretBody }) : this.#core.replaceNamespacedConfigMap({ namespace, name, body: configMapBody }));
    }
    this.#last = text;
  }
}

/** The stored set's JSON: gzipped (`<key>.gz`, inflated up to MAX_SET_BYTES), else as an older
 * agent stored it (`<key>`, plain). */
function storedText(o: V1Secret | V1ConfigMap, key: string, secret: boolean): string | undefined {
  const gz = secret ? (o as V1Secret).data?.[`${key}.gz`] : (o as V1ConfigMap).binaryData?.[`${key}.gz`];
  if (gz !== undefined) {
    try {
      return gunzipSync(Buffer.from(gz, "base64"), { maxOutputLength: MAX_SET_BYTES }).toString();
    } catch (err) {
      throw new Error(`${key}.gz: ${(err as NodeJS.ErrnoException).code === "ERR_BUFFER_TOO_LARGE" ? `inflates past ${MAX_SET_BYTES} bytes` : (err as Error).message}`);
    }
  }
  const plain = o.data?.[key];
  return plain === undefined ? undefined : secret ? Buffer.from(plain, "base64").toString() : plain;
}
