// The L7 side of local sandboxes' egress: E2B `network.rules` (header transforms with secrets)
// enforced by the traffic-proxy's L7 handler on the redirected path (controllers/traffic/l7).
// Secret values live only here, in the agent's memory, per sandbox; the CA is made per sandbox
// and kept in memory too, and its certificate goes into the sandbox from inside (caInstallScript).
import type tls from "node:tls";
import { L7Handler, type AuditRecord } from "../../traffic/l7/handler.ts";
import { SandboxCa } from "../../traffic/l7/ca.ts";
import { e2bRules, type L7Policy } from "../../traffic/l7/policy.ts";
import type { DesiredSandbox } from "../driver.ts";

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

export class LocalL7 {
  readonly handler: L7Handler;
  readonly #desiredOf: (id: string) => DesiredSandbox | undefined;
  readonly #secrets = new Map<string, ReadonlyMap<string, string>>();
  readonly #cas = new Map<string, Promise<SandboxCa>>();
  readonly #policies = new WeakMap<Rules, L7Policy>();

  constructor(desiredOf: (id: string) => DesiredSandbox | undefined, opts: { upstreamTls?: tls.ConnectionOptions; audit?: (r: AuditRecord) => void } = {}) {
    this.#desiredOf = desiredOf;
    this.handler = new L7Handler({
      policyFor: (id) => this.policyFor(id),
      secretsFor: (id) => this.#secrets.get(id) ?? new Map(),
      caFor: (id) => this.ca(id),
      audit: opts.audit ?? (() => {}),
      ...(opts.upstreamTls ? { upstreamTls: opts.upstreamTls } : {}),
      log: (line) => console.error(line),
    });
  }

  /** Whether a sandbox wanting `d` has rules for the L7 handler (and so needs the proxy and a CA). */
  static wants(d: Pick<DesiredSandbox, "networkRules">): boolean {
    return Object.keys(d.networkRules ?? {}).length > 0;
  }

  policyFor(id: string): L7Policy | undefined {
    const rules = this.#desiredOf(id)?.networkRules;
    if (!rules || !Object.keys(rules).length) return undefined;
    let p = this.#policies.get(rules);
    if (!p) this.#policies.set(rules, (p = { http: e2bRules(rules), mcp: [] }));
    return p;
  }

  /** Replaces the sandbox's secret values (names lower-cased, as the edge stores them). */
  setSecrets(id: string, values: Record<string, string>): void {
    if (Object.keys(values).length) this.#secrets.set(id, new Map(Object.entries(values).map(([k, v]) => [k.toLowerCase(), v])));
    else this.#secrets.delete(id);
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
    this.#secrets.delete(id);
    this.#cas.delete(id);
  }
}
