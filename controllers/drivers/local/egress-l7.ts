// The L7 side of local sandboxes' egress: E2B `network.rules` (header transforms with secrets) and
// the SecurityProfiles that select a sandbox (block/bypass, headers, tokens, MCP tool ACLs, rate
// limits), enforced by the traffic-proxy's L7 handler on the redirected path (controllers/traffic/l7).
// Secret values live only here, in the agent's memory, per sandbox; the CA is made per sandbox
// and kept in memory too, and its certificate goes into the sandbox from inside (caInstallScript).
import type tls from "node:tls";
import type { SecurityProfileEntry } from "../../../schema/api/security-profile.ts";
import { L7Handler, type AuditRecord } from "../../traffic/l7/handler.ts";
import { SandboxCa } from "../../traffic/l7/ca.ts";
import type { L7Policy } from "../../traffic/l7/policy.ts";
import { profileObject, sandboxL7Policy } from "../../traffic/l7/sandbox-policy.ts";
import { profilesFor, type ProfileObject } from "../../traffic/l7/profile-crd.ts";
import type { DesiredSandbox } from "../driver.ts";
import { selectorLabels } from "../../../schema/api/traffic-policy.ts";

type Rules = NonNullable<DesiredSandbox["networkRules"]>;

/** Where the sandbox's CA certificate and a bundle (its system roots plus that CA) are put
 * inside the sandbox: /run is a fresh tmpfs of the sandbox's own, so no tenant file is there. */
export const SANDBOX_CA_DIR = "/run/kruise";

/** The environment that points TLS clients at the bundle (curl, OpenSSL, Python requests, Node). */
export function caEnv(): Record<string, string> {
  const bundle = `${SANDBOX_CA_DIR}/ca-bundle.crt`;
  return { SSL_CERT_FILE: bundle, CURL_CA_BUNDLE: bundle, REQUESTS_CA_BUNDLE: bundle, NODE_EXTRA_CA_CERTS: `${SANDBOX_CA_DIR}/ca.crt` };
}

/** Run as the sandbox's root inside its namespaces, with the CA certificate on stdin: the paths
 * resolve in the sandbox's own mount namespace, so a symlink there leads nowhere outside it. The
 * system bundle is appended to where it is writable (an overlay root) and copied with the CA
 * into /run otherwise. */
export const caInstallScript = [
  "umask 022",
  `mkdir -p ${SANDBOX_CA_DIR}`,
  `cat > ${SANDBOX_CA_DIR}/ca.crt`,
  `{ cat /etc/ssl/certs/ca-certificates.crt 2>/dev/null; cat ${SANDBOX_CA_DIR}/ca.crt; } > ${SANDBOX_CA_DIR}/ca-bundle.crt`,
  `if [ -w /etc/ssl/certs/ca-certificates.crt ]; then cat ${SANDBOX_CA_DIR}/ca.crt >> /etc/ssl/certs/ca-certificates.crt; fi`,
  "true",
].join("\n");

type Selectable = Pick<DesiredSandbox, "networkRules" | "namespace" | "labels" | "pool">;

export class LocalL7 {
  readonly handler: L7Handler;
  readonly #desiredOf: (id: string) => DesiredSandbox | undefined;
  readonly #secrets = new Map<string, ReadonlyMap<string, string>>();
  /** Per team (namespace): what its profiles' tokenTransformations name. */
  #teamSecrets = new Map<string, ReadonlyMap<string, string>>();
  readonly #cas = new Map<string, Promise<SandboxCa>>();
  /** The SecurityProfiles in force (the edge's whole set). */
  #profiles: ProfileObject[] = [];
  /** Each desired sandbox's policy for the profile set it was made with (records are replaced,
   * not mutated, when they change; a new profile set makes a new generation). */
  readonly #policies = new WeakMap<DesiredSandbox, { gen: number; policy: L7Policy | undefined }>();
  #gen = 0;
  #audit: (r: AuditRecord) => void;

  constructor(desiredOf: (id: string) => DesiredSandbox | undefined, opts: { upstreamTls?: tls.ConnectionOptions; audit?: (r: AuditRecord) => void } = {}) {
    this.#desiredOf = desiredOf;
    this.#audit = opts.audit ?? (() => {});
    this.handler = new L7Handler({
      policyFor: (id) => this.policyFor(id),
      secretsFor: (id) => this.secretsFor(id),
      caFor: (id) => this.ca(id),
      audit: (r) => this.#audit(r),
      ...(opts.upstreamTls ? { upstreamTls: opts.upstreamTls } : {}),
      log: (line) => console.error(line),
    });
  }

  /** Where audit records go (the agent keeps them per sandbox). */
  setAudit(sink: (r: AuditRecord) => void): void {
    this.#audit = sink;
  }

  /** Replaces the SecurityProfiles in force. */
  setProfiles(entries: SecurityProfileEntry[]): void {
    this.#profiles = entries.map(profileObject);
    this.#gen++;
  }

  /** Whether a sandbox wanting `d` has E2B rules for the L7 handler (and so needs the proxy and a CA). */
  static wants(d: Pick<DesiredSandbox, "networkRules">): boolean {
    return Object.keys(d.networkRules ?? {}).length > 0;
  }

  /** Whether a sandbox wanting `d` goes through the L7 handler: E2B rules, or a profile selects it. */
  wants(d: Selectable): boolean {
    return LocalL7.wants(d) || this.#select(d).profiles.length > 0;
  }

  #select(d: Selectable) {
    const labels = selectorLabels(d.labels ?? {}, d.pool, d.namespace);
    return profilesFor(this.#profiles, { namespace: d.namespace ?? "", labels });
  }

  policyFor(id: string): L7Policy | undefined {
    const d = this.#desiredOf(id);
    if (!d) return undefined;
    const cached = this.#policies.get(d);
    if (cached?.gen === this.#gen) return cached.policy;
    const rules = d.networkRules ?? {};
    const selected = this.#select(d);
    for (const r of selected.refused) console.error(`traffic-proxy: ${id}: SecurityProfile ${r.profile} blocks every inspected request: ${r.reason}`);
    const policy = sandboxL7Policy(rules, selected);
    this.#policies.set(d, { gen: this.#gen, policy });
    return policy;
  }

  /** Replaces the sandbox's secret values (names lower-cased, as the edge stores them). */
  setSecrets(id: string, values: Record<string, string>): void {
    if (Object.keys(values).length) this.#secrets.set(id, new Map(Object.entries(values).map(([k, v]) => [k.toLowerCase(), v])));
    else this.#secrets.delete(id);
  }

  /** Replaces the profiles' secret values, per team (names lower-cased). */
  setTeamSecrets(byTeam: Record<string, Record<string, string>>): void {
    this.#teamSecrets = new Map(Object.entries(byTeam).map(([team, values]) => [team, new Map(Object.entries(values).map(([k, v]) => [k.toLowerCase(), v]))]));
  }

  /** The secrets a sandbox's requests may use: its team's profile secrets and its own rules'
   * (the same team's secrets by name, so the two never disagree but in timing). */
  secretsFor(id: string): ReadonlyMap<string, string> {
    const own = this.#secrets.get(id);
    const team = this.#teamSecrets.get(this.#desiredOf(id)?.namespace ?? "");
    if (!team) return own ?? new Map();
    return own ? new Map([...team, ...own]) : team;
  }

  ca(id: string): Promise<SandboxCa> {
    let ca = this.#cas.get(id);
    if (!ca) {
      ca = SandboxCa.create(id);
      ca.catch(() => this.#cas.delete(id));
      this.#cas.set(id, ca);
    }
    return ca;
  }

  forget(id: string): void {
    this.handler.forget(id);
    this.#secrets.delete(id);
    this.#cas.delete(id);
  }
}
