// A sandbox pod's egress objects (traffic-pod.ts): the ConfigMap its traffic-proxy reads and the
// NetworkPolicy backstop, kept equal to what the sandbox's rules and the TrafficPolicies in force
// say. Written before the pod is created (no window without them) and again whenever the rules,
// the sandbox's labels or the policies change; unchanged content costs no request (the last
// written is remembered; after an agent restart the first write finds the object and compares).
// A changed ConfigMap of a running pod also changes the pod's `agents.kruise.io/traffic-policy`
// annotation (a hash of the file): a pod update makes the kubelet sync that pod now, and every pod
// sync re-projects its ConfigMap and Secret volumes (volume manager WaitForAttachAndMount → ReprocessPod), so
// the sidecar sees the change within seconds instead of the kubelet's periodic sync (~1 min).
// All three (and the pod's Secret) sit in the tenant's namespace, where a namespace admin may edit
// or delete them: `resync` (every 30 s, the driver option `trafficResyncMs`) reads the ConfigMap
// and NetworkPolicy back and puts back what the agent wrote; the Secret, which the agent may not
// read, it checks by a patch that carries only the resourceVersion it wrote (a precondition: 409
// when anyone changed it since, 404 when deleted) and writes again whole from its memory (CA key
// included) when it was. Between an edit and the next resync the edit is in force (README.md,
// "Egress on Kubernetes": the admission policy in k8s/ closes that window).
import { createHash, randomBytes } from "node:crypto";
import type { NetworkingV1Api, V1ConfigMap, V1NetworkPolicy, V1Pod, V1Secret } from "@kubernetes/client-node";
import { LABEL } from "../../../schema/crd/labels.ts";
import type { PodTrafficPolicy } from "../../../schema/protocol/pod-traffic.ts";
import type { SecurityProfileEntry } from "../../../schema/api/security-profile.ts";
import type { TrafficPolicySet } from "../../traffic/governed.ts";
import { ownerRef, type DriverContext } from "./context.ts";
import { mergePatch, stableJson, statusCode, tolerate } from "./kube-api.ts";
import type { NamespaceScope } from "./namespace-scope.ts";
import { idLabel, type KubeDesiredSandbox, type SandboxObject } from "./objects.ts";
import { checkSize, egressNetworkPolicy, egressPolicyName, HEALTH_PORT, podPolicy, podSecretNames, POLICY_FILE, splitPodPolicy, TRAFFIC_CONTAINER, trafficConfigMap, trafficConfigMapName, trafficSecret, type Backstop } from "./traffic-pod.ts";
import { AUDIT_TOKEN_FILE } from "../../../schema/protocol/pod-audit.ts";
import type { PodAuditTarget } from "./pod-audit.ts";
import { L7_FILE, SECRETS_FILE } from "../../traffic/pod-l7.ts";
import { SandboxCa } from "../../traffic/l7/ca.ts";

/** On a running governed pod: the hash of the policy file it should have (see the top). */
export const POLICY_ANNOTATION = "agents.kruise.io/traffic-policy";

/** Whether a pod carries the traffic-proxy; `governed`: one that a policy governed from its start.
 * Read from its label: the informer's copies keep no containers. */
export function hasTrafficProxy(pod: V1Pod | undefined, governed = false): boolean {
  const v = pod?.metadata?.labels?.[LABEL.trafficProxy];
  return governed ? v === "governed" : v === "governed" || v === "open";
}

/** Where a pod's sidecar answers for its audit records: only while the pod is Running and its
 * traffic-proxy container is ready. A Failed or Succeeded pod keeps `status.podIP` in its object,
 * but the CNI has freed that address and may have given it to another tenant's pod; pulling there
 * would send this sandbox's pull token to it and file its made-up records under this sandbox.
 * (Ready implies the container runs; the informer's slim copy keeps phase and this `ready`.) */
export function auditUrl(pod: V1Pod | undefined): string | undefined {
  const ip = pod?.status?.podIP;
  if (!ip || pod.metadata?.deletionTimestamp || !hasTrafficProxy(pod) || pod.status?.phase !== "Running") return undefined;
  const statuses = [...(pod.status.initContainerStatuses ?? []), ...(pod.status.containerStatuses ?? [])];
  if (!statuses.some((c) => c.name === TRAFFIC_CONTAINER && c.ready)) return undefined;
  return `http://${ip.includes(":") ? `[${ip}]` : ip}:${HEALTH_PORT}`;
}

interface ObjectApi<T> {
  create(): Promise<T>;
  read(): Promise<T>;
  replace(rv: string): Promise<T>;
  /** Whether the server's copy holds what the agent wrote: compared by content (stableJson), as
   * the client hands back its own model objects, whose keys come in the model's order (a
   * NetworkPolicy's spec as egress, podSelector, policyTypes), not in the order sent. */
  same(o: T): boolean;
}

/** A pod's audit pull token (pod-audit.ts): 32 random bytes, base64url. */
function newAuditToken(): string {
  return randomBytes(32).toString("base64url");
}

export class TrafficObjects {
  readonly #ctx: DriverContext;
  readonly #net: NetworkingV1Api;
  readonly #set: TrafficPolicySet;
  readonly #backstop: Backstop;
  /** The SecurityProfiles in force (the edge's whole set); each pod's file gets those selecting it. */
  #profiles: readonly SecurityProfileEntry[] = [];
  /** The secret values the agent holds for a sandbox (memory only), by lower-cased name; undefined
   * while they are not known (after a restart, until the edge sends them: a pod's Secret is then
   * left as it is rather than emptied). */
  #values: (d: KubeDesiredSandbox) => ReadonlyMap<string, string> | undefined = () => new Map();
  /** A hash of each pod Secret's secrets.json as last written (namespace/name). */
  readonly #secretsWritten = new Map<string, string>();
  /** What was last written per object name (namespace/name), so unchanged content sends nothing. */
  readonly #written = new Map<string, string>();
  /** Each pod Secret as last written, whole (the CA key too: memory only, as the secret values),
   * with the resourceVersion the API server gave that write (namespace/name). After an agent
   * restart only the Secrets it writes again are known: the others are not checked. */
  readonly #secrets = new Map<string, { body: V1Secret; rv: string }>();
  /** How to read back and rewrite each object written (key as #written), for `resync`. */
  readonly #objects = new Map<string, ObjectApi<{ metadata?: { resourceVersion?: string } }>>();
  /** The audit pull token in each pod Secret (key as #secrets), as last written: memory only.
   * After an agent restart a Secret's token is not known until the agent writes it a new one. */
  readonly #tokens = new Map<string, string>();
  /** The sandboxes whose sidecar enforces L7 rules (so keeps audit records), with their Secret's
   * key (namespace/name) and namespace. */
  readonly #inspected = new Map<string, string>();
  /** The resync's put-back in flight, by its key (#objects' or `secret/` + #secrets'). */
  readonly #restoring = new Map<string, Promise<unknown>>();

  constructor(ctx: DriverContext, net: NetworkingV1Api, set: TrafficPolicySet, backstop: Backstop) {
    this.#ctx = ctx;
    this.#net = net;
    this.#set = set;
    this.#backstop = backstop;
  }

  /** What the sandbox's proxy must enforce now; null when nothing governs it. */
  policy(sc: NamespaceScope, d: KubeDesiredSandbox): PodTrafficPolicy | null {
    return podPolicy(this.#set, d, sc.namespace, this.#profiles);
  }

  setProfiles(profiles: readonly SecurityProfileEntry[]): void {
    this.#profiles = profiles;
  }

  setSecretSource(values: (d: KubeDesiredSandbox) => ReadonlyMap<string, string> | undefined): void {
    this.#values = values;
  }

  /** The values of just the secrets the pod's file names. */
  #secretsFor(sc: NamespaceScope, d: KubeDesiredSandbox): Record<string, string> | undefined {
    const values = this.#values(d);
    if (!values) return undefined;
    return Object.fromEntries(podSecretNames(this.policy(sc, d)).flatMap((n) => (values.has(n) ? [[n, values.get(n)!]] : [])));
  }

  /** The pod Secret's l7.json: the L7 half of its policy (splitPodPolicy). */
  #l7Text(sc: NamespaceScope, d: KubeDesiredSandbox): string {
    const policy = this.policy(sc, d);
    return JSON.stringify(policy ? splitPodPolicy(policy).l7 : {});
  }

  /** Patches the pod Secret's secrets.json and l7.json, each when what it should hold changed (the
   * kubelet then re-projects it and the sidecar re-reads it). Returns whether l7.json was written.
   * A pod without a Secret (made before, or not yet) is skipped: its next one is written whole by
   * newPodSecret. */
  async #syncSecret(sc: NamespaceScope, name: string, d: KubeDesiredSandbox): Promise<boolean> {
    const key = `${sc.namespace}/${name}`;
    const data: Record<string, string> = {};
    const secrets = this.#secretsFor(sc, d);
    const hashes = new Map<string, string>();
    for (const [file, text] of [[SECRETS_FILE, secrets && JSON.stringify(secrets)], [L7_FILE, this.#l7Text(sc, d)]] as const) {
      if (text === undefined) continue;
      const hash = createHash("sha256").update(text).digest("hex");
      if (this.#secretsWritten.get(`${key}/${file}`) === hash) continue;
      data[file] = Buffer.from(text).toString("base64");
      hashes.set(file, hash);
    }
    // The Secret of an inspected pod this agent has not written since it started: its pull token
    // is unknown here, so it gets a new one (the sidecar reads the file at each pull).
    const token = this.#inspected.has(d.id) && !this.#tokens.has(key) ? newAuditToken() : undefined;
    if (token) data[AUDIT_TOKEN_FILE] = Buffer.from(token).toString("base64");
    if (!hashes.size && !token) return false;
    checkSize(d.id, "Secret", data);
    this.#ctx.count();
    const done = await tolerate(this.#ctx.core.patchNamespacedSecret({ namespace: sc.namespace, name, body: { data } }, mergePatch), [404]);
    if (done) for (const [file, hash] of hashes) this.#secretsWritten.set(`${key}/${file}`, hash);
    if (done && token) this.#tokens.set(key, token);
    const known = this.#secrets.get(key);
    if (done && known) this.#secrets.set(key, { body: { ...known.body, data: { ...known.body.data, ...data } }, rv: done.metadata?.resourceVersion ?? "" });
    return !!done && hashes.has(L7_FILE);
  }

  /** Writes the pod's ConfigMap (an open policy when nothing governs it but the pod has a proxy:
   * a template that lists traffic-proxy, ready for rules at claim) and the NetworkPolicy (only
   * while governed). Returns the ConfigMap's name. */
  #owned(sc: NamespaceScope, sbx: SandboxObject, d: KubeDesiredSandbox) {
    return { pod: sbx.metadata!.name!, namespace: sc.namespace, labels: { [LABEL.sandboxId]: idLabel(d.id) }, owner: ownerRef(sbx) };
  }

  /** A new pod's Secret: a CA made now for that pod alone (a recreated pod gets another, never its
   * predecessor's) and the secret values in force. The agent can write it but not read it back
   * (k8s/rbac.yaml); it keeps what it wrote in memory only (the key too, as it keeps the secret
   * values), to put the Secret back as it was after an edit or a delete (#resyncSecret). */
  async newPodSecret(sc: NamespaceScope, sbx: SandboxObject, d: KubeDesiredSandbox): Promise<void> {
    const ca = await SandboxCa.create(d.id);
    const secrets = this.#secretsFor(sc, d) ?? {};
    const l7 = this.#l7Text(sc, d);
    const token = newAuditToken();
    const body = trafficSecret(this.#owned(sc, sbx, d), await ca.pem(), secrets, JSON.parse(l7) as object, token);
    checkSize(d.id, "Secret", body.data!);
    const name = body.metadata!.name!;
    const key = `${sc.namespace}/${name}`;
    this.#secrets.set(key, { body, rv: await this.#writeSecret(sc.namespace, body) });
    this.#tokens.set(key, token);
    this.#secretsWritten.set(`${key}/${SECRETS_FILE}`, createHash("sha256").update(JSON.stringify(secrets)).digest("hex"));
    this.#secretsWritten.set(`${key}/${L7_FILE}`, createHash("sha256").update(l7).digest("hex"));
  }

  /** Creates the Secret, or replaces it whole (unconditional: the agent is its only writer and may
   * not read it); returns the resourceVersion written. */
  async #writeSecret(namespace: string, body: V1Secret): Promise<string> {
    this.#ctx.count();
    try {
      return (await this.#ctx.core.createNamespacedSecret({ namespace, body })).metadata?.resourceVersion ?? "";
    } catch (err) {
      if (statusCode(err) !== 409) throw err;
      this.#ctx.count();
      return (await this.#ctx.core.replaceNamespacedSecret({ namespace, name: body.metadata!.name!, body })).metadata?.resourceVersion ?? "";
    }
  }

  /** Whether the pod Secret `key` is as the agent last wrote it: a merge patch carrying only that
   * resourceVersion changes nothing and is refused (409) if anything changed it since, 404 if it
   * was deleted. Put back whole when not. */
  async #resyncSecret(key: string, log?: (line: string) => void): Promise<boolean> {
    const known = this.#secrets.get(key)!;
    const { namespace, name } = known.body.metadata as { namespace: string; name: string };
    this.#ctx.count();
    const same = await this.#ctx.core
      .patchNamespacedSecret({ namespace, name, body: { metadata: { resourceVersion: known.rv } } }, mergePatch)
      .then(() => true, (err: unknown) => ([404, 409].includes(statusCode(err) ?? 0) ? false : Promise.reject(err)));
    // Unchanged, or rewritten (new content) or deleted with its sandbox meanwhile: nothing to do.
    if (same || this.#secrets.get(key) !== known) return false;
    const rv = await this.#writeSecret(namespace, known.body);
    if (this.#secrets.get(key) === known) this.#secrets.set(key, { body: known.body, rv });
    log?.(`secret/${key}: changed outside the agent; put back`);
    return true;
  }

  async sync(sc: NamespaceScope, sbx: SandboxObject, d: KubeDesiredSandbox): Promise<string> {
    const pod = sbx.metadata!.name!;
    const owned = this.#owned(sc, sbx, d);
    const policy = this.policy(sc, d);
    const cm = trafficConfigMap(owned, policy ?? { team: sc.namespace, labels: d.labels ?? {}, egress: null, trafficPolicies: [] });
    checkSize(d.id, "ConfigMap", cm.data!);
    const changed = await this.#put(`cm/${sc.namespace}/${cm.metadata!.name}`, cm, {
      create: () => this.#ctx.core.createNamespacedConfigMap({ namespace: sc.namespace, body: cm }),
      read: () => this.#ctx.core.readNamespacedConfigMap({ namespace: sc.namespace, name: cm.metadata!.name! }),
      replace: (rv) => this.#ctx.core.replaceNamespacedConfigMap({ namespace: sc.namespace, name: cm.metadata!.name!, body: { ...cm, metadata: { ...cm.metadata, resourceVersion: rv } } }),
      same: (o: V1ConfigMap) => stableJson(o.data) === stableJson(cm.data),
    });
    const l7 = policy ? splitPodPolicy(policy).l7 : {};
    if (l7.securityProfiles?.length || Object.keys(l7.networkRules ?? {}).length) this.#inspected.set(d.id, `${sc.namespace}/${cm.metadata!.name!}`);
    else this.#inspected.delete(d.id);
    const l7Changed = await this.#syncSecret(sc, cm.metadata!.name!, d);
    if (changed || l7Changed) await this.#nudge(sc, d.id, cm.data![POLICY_FILE]! + this.#l7Text(sc, d));
    const npName = egressPolicyName(pod);
    const npKey = `np/${sc.namespace}/${npName}`;
    if (!policy) {
      this.#objects.delete(npKey);
      if (this.#written.get(npKey) !== "") {
        this.#ctx.count();
        await tolerate(this.#net.deleteNamespacedNetworkPolicy({ namespace: sc.namespace, name: npName }), [404]);
        this.#written.set(npKey, "");
      }
      return cm.metadata!.name!;
    }
    const np = egressNetworkPolicy({ ...owned, selector: owned.labels }, policy, this.#backstop);
    await this.#put(npKey, np, {
      create: () => this.#net.createNamespacedNetworkPolicy({ namespace: sc.namespace, body: np }),
      read: () => this.#net.readNamespacedNetworkPolicy({ namespace: sc.namespace, name: npName }),
      replace: (rv) => this.#net.replaceNamespacedNetworkPolicy({ namespace: sc.namespace, name: npName, body: { ...np, metadata: { ...np.metadata, resourceVersion: rv } } }),
      same: (o: V1NetworkPolicy) => stableJson(o.spec) === stableJson(np.spec),
    });
    return cm.metadata!.name!;
  }

  /** The pod's annotation, when it runs with the proxy (a pod not made yet mounts the new files). */
  async #nudge(sc: NamespaceScope, id: string, file: string): Promise<void> {
    const pod = this.#ctx.pod(id);
    const hash = createHash("sha256").update(file).digest("hex").slice(0, 16);
    if (!pod || pod.metadata?.deletionTimestamp || !hasTrafficProxy(pod) || pod.metadata?.annotations?.[POLICY_ANNOTATION] === hash) return;
    this.#ctx.count();
    const updated = await tolerate(this.#ctx.core.patchNamespacedPod({ namespace: sc.namespace, name: pod.metadata!.name!, body: { metadata: { annotations: { [POLICY_ANNOTATION]: hash } } } }, mergePatch), [404]);
    if (updated) sc.pods.remember(updated);
  }

  /** Creates or replaces the object; true when it was written (its content changed). */
  async #put<T extends { metadata?: { resourceVersion?: string } }>(key: string, body: object, api: ObjectApi<T>): Promise<boolean> {
    const text = JSON.stringify(body);
    if (this.#written.get(key) === text) return false;
    // Known as this content before it is written: a resync round reading the object once this write
    // has landed, but before it was recorded, took the new content for a tenant's edit and put the
    // old one back (CI run 15-3: a policy change missing from the ConfigMap just after it was made).
    this.#objects.set(key, api as ObjectApi<{ metadata?: { resourceVersion?: string } }>);
    this.#ctx.count();
    let wrote = true;
    try {
      await api.create();
    } catch (err) {
      if (statusCode(err) !== 409) throw err;
      this.#ctx.count();
      const old = await api.read();
      wrote = !api.same(old);
      if (wrote) {
        this.#ctx.count();
        await api.replace(old.metadata!.resourceVersion!);
      }
    }
    this.#written.set(key, text);
    return wrote;
  }

  /** The sandboxes whose sidecar keeps audit records (pod-audit.ts). */
  inspected(): Iterable<string> {
    return this.#inspected.keys();
  }

  /** Where and with what token the agent pulls a sandbox's audit records: its running pod with the
   * proxy, at the address its status gives (the kubelet's; never an annotation a namespace user
   * could point elsewhere), with the token last written into its Secret. */
  auditTarget(id: string): PodAuditTarget | undefined {
    const key = this.#inspected.get(id);
    const token = key && this.#tokens.get(key);
    const url = auditUrl(this.#ctx.pod(id));
    return token && url ? { url, token } : undefined;
  }

  /** Reads every object written back (the Secrets: checks them, #resyncSecret) and rewrites those
   * that differ from what the agent wrote or are gone. Returns how many it put back; one failing object does not stop the others. */
  async resync(log?: (line: string) => void): Promise<number> {
    let restored = 0;
    for (const [key, api] of [...this.#objects]) {
      // Gone with its sandbox since this round began: `delete` forgot it before deleting it.
      if (this.#objects.get(key) !== api) continue;
      try {
        if (await this.#track(key, this.#restore(key, api, log))) restored++;
      } catch (err) {
        log?.(`${key}: resync: ${(err as Error).message}`);
      }
    }
    for (const key of [...this.#secrets.keys()]) {
      if (!this.#secrets.has(key)) continue;
      try {
        if (await this.#track(`secret/${key}`, this.#resyncSecret(key, log))) restored++;
      } catch (err) {
        log?.(`secret/${key}: resync: ${(err as Error).message}`);
      }
    }
    return restored;
  }

  /** Puts one object back if it differs or is gone; true when it did. */
  async #restore(key: string, api: ObjectApi<{ metadata?: { resourceVersion?: string } }>, log?: (line: string) => void): Promise<boolean> {
    this.#ctx.count();
    const old = await api.read().catch((err: unknown) => (statusCode(err) === 404 ? undefined : Promise.reject(err)));
    // Rewritten (new content) or deleted with its sandbox while we read: not ours to judge.
    if (this.#objects.get(key) !== api || (old && api.same(old))) return false;
    this.#ctx.count();
    await (old ? api.replace(old.metadata!.resourceVersion!) : api.create());
    log?.(`${key}: changed outside the agent; put back`);
    return true;
  }

  /** `work` as the resync's write in flight for `key`, which `delete` waits for (see there). */
  async #track<T>(key: string, work: Promise<T>): Promise<T> {
    this.#restoring.set(key, work);
    try {
      return await work;
    } finally {
      this.#restoring.delete(key);
    }
  }

  /** Removes a destroyed sandbox's objects (the owner reference would too, where a garbage
   * collector runs). */
  async delete(sc: NamespaceScope, podName: string): Promise<void> {
    const cm = trafficConfigMapName(podName);
    const np = egressPolicyName(podName);
    const secret = `${sc.namespace}/${cm}`;
    const keys = [`cm/${sc.namespace}/${cm}`, `np/${sc.namespace}/${np}`];
    // Forgotten before anything is deleted: a resync round that reads an object after its delete
    // (404) would otherwise take it for one a tenant removed and create it again. A put-back
    // already sent is waited for, so the deletes below land after it.
    for (const file of [SECRETS_FILE, L7_FILE]) this.#secretsWritten.delete(`${secret}/${file}`);
    this.#secrets.delete(secret);
    this.#tokens.delete(secret);
    for (const [id, key] of this.#inspected) if (key === secret) this.#inspected.delete(id);
    for (const key of keys) {
      this.#written.delete(key);
      this.#objects.delete(key);
    }
    await Promise.allSettled([...keys, `secret/${secret}`].map((key) => this.#restoring.get(key)));
    this.#ctx.count(3);
    await tolerate(this.#ctx.core.deleteNamespacedConfigMap({ namespace: sc.namespace, name: cm }), [404]);
    await tolerate(this.#ctx.core.deleteNamespacedSecret({ namespace: sc.namespace, name: cm }), [404]);
    await tolerate(this.#net.deleteNamespacedNetworkPolicy({ namespace: sc.namespace, name: np }), [404]);
  }
}
