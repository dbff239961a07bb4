// The pod sidecar's L7 side (kubernetes driver): the same L7 handler as the local driver's proxy
// (l7/handler.ts), for the pod's one sandbox (""), with what the pod's mounts hold:
//   policy.json (ConfigMap)  the SecurityProfiles that select the sandbox and its `network.rules`
//   <secret dir> (Secret)    ca.crt / ca.key: the pod's own CA (made by the agent for this pod,
//                            never another's), secrets.json: the values the rules name
// Both mounts are the sidecar's only: no sandbox container has the key or a secret value. Audit
// records go to stdout as one JSON line each (`audit <json>`): never headers, bodies or secrets.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { PodTrafficSecretsSchema, type PodTrafficPolicy } from "../../schema/protocol/pod-traffic.ts";
import { SandboxCa } from "./l7/ca.ts";
import { L7Handler, type AuditRecord } from "./l7/handler.ts";
import type { L7Policy } from "./l7/policy.ts";
import { profilesFor } from "./l7/profile-crd.ts";
import { profileObject, sandboxL7Policy } from "./l7/sandbox-policy.ts";

export const SECRETS_FILE = "secrets.json";

export class PodL7 {
  readonly handler: L7Handler;
  readonly #dir: string | undefined;
  readonly #log: (line: string) => void;
  #policy: L7Policy | undefined;
  #secrets: ReadonlyMap<string, string> = new Map();
  #ca: Promise<SandboxCa> | undefined;

  constructor(opts: { secretDir?: string; log: (line: string) => void; audit: (r: AuditRecord) => void }) {
    this.#dir = opts.secretDir;
    this.#log = opts.log;
    this.handler = new L7Handler({ policyFor: () => this.#policy, secretsFor: () => this.#secrets, caFor: () => this.#caOnce(), audit: opts.audit, log: opts.log });
  }

  /** The policy of a newly read pod file (the caller parsed it); the secrets are re-read too. */
  update(file: PodTrafficPolicy): void {
    const selected = profilesFor((file.securityProfiles ?? []).map(profileObject), { namespace: file.team ?? "", labels: file.labels });
    for (const r of selected.refused) this.#log(`traffic-proxy: SecurityProfile ${r.profile} blocks every inspected request: ${r.reason}`);
    this.#policy = sandboxL7Policy(file.networkRules ?? {}, selected);
    this.reloadSecrets();
  }

  /** Re-reads secrets.json; a missing or refused file keeps none (a credential is then refused
   * by the rule that needs it, never sent empty). */
  reloadSecrets(): void {
    if (!this.#dir) return;
    try {
      const parsed = PodTrafficSecretsSchema.parse(JSON.parse(readFileSync(join(this.#dir, SECRETS_FILE), "utf8")));
      this.#secrets = new Map(Object.entries(parsed).map(([k, v]) => [k.toLowerCase(), v]));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "ENOENT") this.#log(`traffic-proxy: ${SECRETS_FILE}: ${(err as Error).message.split("\n")[0]}`);
      this.#secrets = new Map();
    }
  }

  #caOnce(): Promise<SandboxCa> {
    if (!this.#dir) return Promise.reject(new Error("no CA mounted (--secret-dir): HTTPS is not inspected"));
    if (!this.#ca) {
      this.#ca = SandboxCa.load(this.#dir);
      this.#ca.catch(() => (this.#ca = undefined));
    }
    return this.#ca;
  }
}
