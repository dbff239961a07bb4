// Egress rules of local sandboxes: which network a sandbox gets, and the one in-process
// traffic-proxy that every sandbox with rules reaches through the port relay (README.md).
import { mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { z } from "zod";
import { MAX_TRAFFIC_POLICIES, selectorLabels, TrafficPolicyEntry } from "../../../schema/api/traffic-policy.ts";
import { MAX_SECURITY_PROFILES, SecurityProfileEntry } from "../../../schema/api/security-profile.ts";
import { randomBytes } from "node:crypto";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { EgressPolicy } from "../../../schema/protocol/egress.ts";
import { refuseHost } from "../../traffic/host-reach.ts";
import { compilePolicy, type CompiledPolicy } from "../../traffic/policy.ts";
import { TrafficProxy } from "../../traffic/proxy.ts";
import type { FastPath } from "../../traffic/redirected.ts";
import { TrafficPolicySet, type Governance } from "../../traffic/governed.ts";
import type { DesiredSandbox } from "../driver.ts";
import { LocalL7 } from "./egress-l7.ts";

/** Where a sandbox with egress rules finds the proxy on its own loopback (HTTP_PROXY). A sandbox
 * process cannot listen on this port itself. Knob: LocalDriverOptions.egressProxyPort. */
export const EGRESS_PROXY_PORT = 3128;

/** Open connections through that port per sandbox at most, unless its pids limit is lower. Knob:
 * LocalDriverOptions.egressMaxConnections. */
export const EGRESS_MAX_CONNECTIONS = 256;

/** `host`: shares the host's network (no rules); `none`: no network at all; `proxy`: its own
 * network namespace whose only way out is the traffic-proxy. */
export type NetworkMode = "host" | "none" | "proxy";

/** The rules to enforce, or null. `allowInternetAccess: false` is E2B's `denyOut: [ALL_TRAFFIC]`,
 * so with allowOut entries it becomes an allow list rather than no network. */
export function egressRules(d: Pick<DesiredSandbox, "allowInternetAccess" | "egress" | "networkRules">, l7 = LocalL7.wants(d)): EgressPolicy | null {
  const e = d.egress ?? null;
  // L7 rules (`network.rules`, SecurityProfiles: `l7`) need the proxy: with internet access and
  // no lists, it allows every address.
  if (d.allowInternetAccess) return e ?? (l7 ? { allowOut: [], denyOut: [] } : null);
  if (!e?.allowOut.length) return null;
  return { allowOut: e.allowOut, denyOut: [...e.denyOut, "0.0.0.0/0"] };
}

/** `governed`: some TrafficPolicy selects the sandbox, which puts it behind the proxy too
 * (without internet access and allowOut it still gets no network: a policy does not open one). */
export function networkMode(d: Pick<DesiredSandbox, "allowInternetAccess" | "egress" | "networkRules">, governed = false, l7 = LocalL7.wants(d)): NetworkMode {
  if (egressRules(d, l7)) return "proxy";
  if (!d.allowInternetAccess) return "none";
  return governed ? "proxy" : "host";
}

/** What of a desired sandbox its egress decisions depend on, as one string to compare. */
export function networkOf(d: Pick<DesiredSandbox, "allowInternetAccess" | "egress" | "networkRules" | "namespace" | "labels">): string {
  return JSON.stringify([d.allowInternetAccess, d.egress ?? null, d.networkRules ?? {}, d.namespace ?? null, d.labels ?? {}]);
}

/** What every process of a sandbox behind the proxy gets, so curl, pip, npm, requests and Node
 * send their traffic there (lower- and upper-case: tools disagree on which they read). */
export function proxyEnv(port: number): Record<string, string> {
  const url = `http://127.0.0.1:${port}`;
  const noProxy = "localhost,127.0.0.1,::1";
  return { HTTP_PROXY: url, HTTPS_PROXY: url, http_proxy: url, https_proxy: url, NO_PROXY: noProxy, no_proxy: noProxy };
}

/** The driver's traffic-proxy, listening on a Unix socket in a private 0700 directory; started on
 * first use. Rules are read per request from `rulesOf`, so a change applies to the next request. */
export class LocalEgress {
  readonly socket: string;
  readonly #dir: string;
  #dirMade = false;
  readonly #desiredOf: (id: string) => DesiredSandbox | undefined;
  /** TrafficPolicies / GlobalTrafficPolicies in force (the edge sends them, agent link). */
  readonly traffic = new TrafficPolicySet();
  /** `network.rules` (credential injection) on the redirected path. */
  readonly l7: LocalL7;
  readonly #subnets: () => { sandboxes: string[]; host: string[] };
  /** Compiled rules per rules object (records are replaced, not mutated, when they change). */
  readonly #compiled = new WeakMap<EgressPolicy, CompiledPolicy | string>();
  #proxy: TrafficProxy | undefined;
  /** Name resolution for the proxy (its checks and the sandboxes' DNS); set before `start`. */
  resolve: ((host: string) => Promise<string[]>) | undefined;
  /** The kernel's fast path (the driver's relay programs each sandbox's set); set before `start`. */
  fastPath: FastPath | undefined;
  /** Whether the relay takes decided HTTP_PROXY connections back (TrafficProxyOptions.handoff);
   * set before `start`. */
  handoff = true;
  #listening: Promise<void> | undefined;

  /** `subnets`: the address ranges of sandboxes with a network of their own and of the host's
   * other bridges (read when the proxy starts), which the proxy never connects to, as it never
   * does to the host's own addresses, loopback or link-local: the proxy connects from the host, so
   * these would be reached through it although nftables keeps veth sandboxes from them. */
  constructor(desiredOf: (id: string) => DesiredSandbox | undefined, subnets: () => { sandboxes: string[]; host: string[] } = () => ({ sandboxes: [], host: [] })) {
    this.#desiredOf = desiredOf;
    this.l7 = new LocalL7(desiredOf);
    this.#subnets = subnets;
    // Named now (the port relay is told the socket's path when the driver is made), made when the
    // proxy starts: an agent that never starts it leaves no directory behind.
    this.#dir = join(tmpdir(), `kruise-egress-${randomBytes(8).toString("hex")}`);
    this.socket = join(this.#dir, "proxy.sock");
  }

  /** The TrafficPolicies deciding for a sandbox wanting `d`, when some select it. */
  governing(d: Pick<DesiredSandbox, "allowInternetAccess" | "egress" | "networkRules" | "namespace" | "labels" | "pool">): Governance | undefined {
    // E2B's own lists only: the allow-all that puts an L7 sandbox behind the proxy is no policy.
    return this.traffic.governing(d.namespace ?? null, selectorLabels(d.labels ?? {}, d.pool, d.namespace), egressRules(d, false));
  }

  #policyFor(id: string): CompiledPolicy | string {
    const d = this.#desiredOf(id);
    const rules = d && egressRules(d, this.l7.wants(d));
    if (!rules) return `sandbox ${id} has no egress rules here`;
    let c = this.#compiled.get(rules);
    if (c === undefined) {
      try {
        c = compilePolicy(rules);
      } catch (err) {
        // Fail closed: rules that cannot be read allow nothing, and say why.
        c = (err as Error).message;
      }
      this.#compiled.set(rules, c);
    }
    return c;
  }

  #trafficFile: string | undefined;
  #profilesFile: string | undefined;

  /** Keeps the TrafficPolicies and SecurityProfiles the edge sent in `dir` and loads the last ones
   * now, so an agent restart does not leave the sandboxes they govern ungoverned (or moved out
   * from behind the proxy) until the edge sends them again. */
  persistIn(dir: string): void {
    this.#trafficFile = join(dir, "traffic-policies.json");
    this.#profilesFile = join(dir, "security-profiles.json");
    const traffic = loadJson(this.#trafficFile, "traffic policies", z.array(TrafficPolicyEntry).max(MAX_TRAFFIC_POLICIES));
    if (traffic) this.traffic.replace(traffic);
    const profiles = loadJson(this.#profilesFile, "security profiles", z.array(SecurityProfileEntry).max(MAX_SECURITY_PROFILES));
    if (profiles) this.l7.setProfiles(profiles);
  }

  /** Replaces the TrafficPolicies in force (and keeps them, see persistIn). */
  setTraffic(entries: TrafficPolicyEntry[]): void {
    this.traffic.replace(entries);
    saveJson(this.#trafficFile, entries);
  }

  /** Replaces the SecurityProfiles in force (and keeps them, see persistIn). */
  setProfiles(entries: SecurityProfileEntry[]): void {
    this.l7.setProfiles(entries);
    saveJson(this.#profilesFile, entries);
  }

  /** Starts the proxy if it is not running. */
  start(): Promise<void> {
    if (!this.#listening) {
      // Private to this process's user, and refused if anything is there already (as mkdtemp).
      if (!this.#dirMade) mkdirSync(this.#dir, { mode: 0o700 });
      this.#dirMade = true;
      this.#proxy = new TrafficProxy({
        policyFor: (id) => this.#policyFor(id),
        governed: (id) => {
          const d = this.#desiredOf(id);
          return d && this.governing(d);
        },
        refuse: refuseHost({ subnets: this.#subnets().sandboxes, hostNets: this.#subnets().host }),
        ...(this.resolve ? { resolve: this.resolve } : {}),
        l7: this.l7.handler,
        ...(this.fastPath ? { fastPath: this.fastPath } : {}),
        handoff: this.handoff,
        log: (line) => console.error(line),
      });
      this.#listening = this.#proxy.listenTagged(this.socket);
      this.#listening.catch(() => (this.#listening = undefined));
    }
    return this.#listening;
  }

  /** The sandbox is gone: what was kept for it goes (its L7 state; the proxy's fast-path list and
   * epoch). */
  forget(id: string): void {
    this.l7.forget(id);
    this.#proxy?.forget(id);
  }

  /** A rule change for the sandbox begins (before its fast path is emptied): connections decided
   * until now do not put their destination on the fast path (TrafficProxy.policyChanging). */
  policyChanging(id: string): void {
    this.#proxy?.policyChanging(id);
  }

  /** Ends the sandbox's open connections that its rules, as they are now, deny. */
  revalidate(id: string): void {
    this.#proxy?.revalidate(id);
  }

  dispose(): void {
    void this.#proxy?.close();
    rmSync(this.#dir, { recursive: true, force: true });
  }
}

function loadJson<T>(file: string, what: string, schema: z.ZodType<T>): T | undefined {
  let json: unknown;
  try {
    json = JSON.parse(readFileSync(file, "utf8"));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "ENOENT") console.error(`local: ${file}: unreadable ${what}, none loaded until the edge sends them: ${(err as Error).message}`);
    return undefined;
  }
  const parsed = schema.safeParse(json);
  if (!parsed.success) console.error(`local: ${file}: unreadable ${what}, none loaded until the edge sends them: ${parsed.error.message}`);
  return parsed.data;
}

function saveJson(file: string | undefined, value: unknown): void {
  if (!file) return;
  writeFileSync(`${file}.tmp`, JSON.stringify(value));
  renameSync(`${file}.tmp`, file);
}
