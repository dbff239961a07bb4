// The pod sidecar's L7 side (kubernetes driver): the same L7 handler as the local driver's proxy
// (l7/handler.ts), for the pod's one sandbox (""), with what the pod's mounts hold:
//   policy.json (ConfigMap)  the sandbox's team and labels (how profiles select it); its L7 fields,
//                            if any, are ignored: the agent never writes them there
//   <secret dir> (Secret)    l7.json: the SecurityProfiles that select the sandbox and its
//                            `network.rules` (a profile's literal header value is a credential),
//                            ca.crt / ca.key: the pod's own CA (made by the agent for this pod,
//                            never another's), secrets.json: the values the rules name
// Both mounts are the sidecar's only: no sandbox container has the key, a secret value or a profile. Audit
// records (never headers, bodies or secrets) go where main.ts sends them: kept for the agent's pull
// (audit-buffer.ts) and printed to stdout (`audit <json>`).
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { PodTrafficL7Schema, PodTrafficSecretsSchema, type PodTrafficL7, type PodTrafficPolicy } from "../../schema/protocol/pod-traffic.ts";
import { SandboxCa } from "./l7/ca.ts";
import { L7Handler, type AuditRecord } from "./l7/handler.ts";
import type { L7Policy } from "./l7/policy.ts";
import { profilesFor } from "./l7/profile-crd.ts";
import { profileObject, sandboxL7Policy } from "./l7/sandbox-policy.ts";

export const SECRETS_FILE = "secrets.json";
export const L7_FILE = "l7.json";

export class PodL7 {
  readonly handler: L7Handler;
  readonly #dir: string | undefined;
  readonly #log: (line: string) => void;
  #policy: L7Policy | undefined;
  #secrets: ReadonlyMap<string, string> = new Map();
  #ca: Promise<SandboxCa> | undefined;
  /** The ConfigMap file's selection facts and the Secret's L7 half, as last read. */
  #who: Pick<PodTrafficPolicy, "team" | "labels"> = { team: null, labels: {} };
  #l7: PodTrafficL7 = {};

  constructor(opts: { secretDir?: string; log: (line: string) => void; audit: (r: AuditRecord) => void }) {
    this.#dir = opts.secretDir;
    this.#log = opts.log;
    this.handler = new L7Handler({ policyFor: () => this.#policy, secretsFor: () => this.#secrets, caFor: () => this.#caOnce(), audit: opts.audit, log: opts.log });
  }

  /** The team and labels of a newly read pod file (the caller parsed it); the Secret's files are
   * re-read too. */
  update(file: PodTrafficPolicy): void {
    this.#who = { team: file.team, labels: file.labels };
    this.reloadSecrets();
  }

  #compile(): void {
    // The agent selected these with the same labels (traffic-pod.ts podPolicy); selected again so
    // a file from an older agent cannot put a tenant's labels before a global profile.
    const selected = profilesFor((this.#l7.securityProfiles ?? []).map(profileObject), { namespace: this.#who.team ?? "", labels: this.#who.labels });
    for (const r of selected.refused) this.#log(`traffic-proxy: SecurityProfile ${r.profile} blocks every inspected request: ${r.reason}`);
    this.#policy = sandboxL7Policy(this.#l7.networkRules ?? {}, selected);
  }

  /** Re-reads the Secret's l7.json and secrets.json. A refused l7.json keeps the L7 rules in force;
   * a missing one means none (a pod without L7). A missing or refused secrets.json keeps no
   * secrets (a credential is then refused by the rule that needs it, never sent empty). */
  reloadSecrets(): void {
    if (this.#dir) {
      try {
        this.#l7 = PodTrafficL7Schema.parse(JSON.parse(readFileSync(join(this.#dir, L7_FILE), "utf8")));
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === "ENOENT") this.#l7 = {};
        else this.#log(`traffic-proxy: ${L7_FILE} not reloaded, the previous L7 rules stay: ${(err as Error).message.split("\n")[0]}`);
      }
    }
    this.#compile();
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
