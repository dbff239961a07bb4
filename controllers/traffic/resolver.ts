// The resolver a sandbox with rules gets (its DNS, UDP and TCP port 53, is redirected here): a
// name the rules cannot admit gets NXDOMAIN without being looked up when its addresses cannot
// matter (policy.ts `needsAddresses`), or when none of its addresses passes; an admitted name
// gets A/AAAA records of only the addresses that pass, from the proxy's own lookup (the host's
// resolvers). Other record types get an empty answer: TXT and friends carry nothing out or in.
// What it answered is remembered per sandbox, so a connection by address alone (ssh, a database
// driver) can be matched to the name rule that admitted the name it looked up.
import { decide, needsAddresses, type CompiledPolicy } from "./policy.ts";
import type { Refuse } from "./host-reach.ts";
import { buildAnswer, formErr, parseQuery, RCODE } from "./dns-wire.ts";
import { admitName, type Governance } from "./governed.ts";

/** Names remembered per sandbox at most (the oldest go first), and for how long. */
const MAX_REMEMBERED = 1024;
const REMEMBER_MS = 10 * 60_000;

export interface DnsOutcome {
  answer: Buffer | undefined;
  /** Set when the name was refused: why, for the log and the counters. */
  denied?: string;
  name?: string;
}

export class SandboxResolver {
  /** A lookup on behalf of `sandbox` (the proxy queues each sandbox's in turn, lookup-queue.ts). */
  readonly #resolve: (host: string, sandbox: string) => Promise<string[]>;
  readonly #refuse: Refuse;
  /** Per sandbox: name => the addresses answered and until when. */
  readonly #seen = new Map<string, Map<string, { addresses: string[]; until: number }>>();

  constructor(resolve: (host: string, sandbox: string) => Promise<string[]>, refuse: Refuse) {
    this.#resolve = resolve;
    this.#refuse = refuse;
  }

  /** The answer to one DNS message from `sandbox`, under its rules (a string: refuse all). */
  async answer(sandbox: string, policy: CompiledPolicy | string, msg: Buffer): Promise<DnsOutcome> {
    const q = parseQuery(msg);
    if (!q) return { answer: formErr(msg) };
    if (typeof policy === "string") return { answer: buildAnswer(q, RCODE.refused), denied: policy, name: q.name };
    if (!needsAddresses(policy, q.name)) {
      const v = decide(policy, q.name, []);
      return { answer: buildAnswer(q, RCODE.nxDomain), denied: v.allowed ? "not resolvable" : v.reason, name: q.name };
    }
    const addresses = await this.#lookup(sandbox, q);
    if (!Array.isArray(addresses)) return addresses;
    const v = decide(policy, q.name, addresses, this.#refuse);
    if (!v.allowed) return { answer: buildAnswer(q, RCODE.nxDomain), denied: v.reason, name: q.name };
    this.#remember(sandbox, q.name, v.addresses);
    return { answer: buildAnswer(q, RCODE.noError, v.addresses), name: q.name };
  }

  /** The answer for a sandbox TrafficPolicies govern (governed.ts): the name is looked up and
   * answered with the addresses some rule allows on some port (by the name or the address). */
  async answerGoverned(sandbox: string, g: Governance, msg: Buffer): Promise<DnsOutcome> {
    const q = parseQuery(msg);
    if (!q) return { answer: formErr(msg) };
    const addresses = await this.#lookup(sandbox, q);
    if (!Array.isArray(addresses)) return addresses;
    const v = admitName(g, q.name, addresses, this.#refuse);
    if ("denied" in v) return { answer: buildAnswer(q, RCODE.nxDomain), denied: v.denied, name: q.name };
    this.#remember(sandbox, q.name, v.addresses);
    return { answer: buildAnswer(q, RCODE.noError, v.addresses), name: q.name };
  }

  /** The name's addresses, or the answer for a name that does not resolve. */
  async #lookup(sandbox: string, q: NonNullable<ReturnType<typeof parseQuery>>): Promise<string[] | DnsOutcome> {
    try {
      return await this.#resolve(q.name, sandbox);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      return { answer: buildAnswer(q, code === "ENOTFOUND" || code === "ENODATA" ? RCODE.nxDomain : RCODE.servFail), name: q.name };
    }
  }

  #remember(sandbox: string, name: string, addresses: string[]): void {
    let names = this.#seen.get(sandbox);
    if (!names) this.#seen.set(sandbox, (names = new Map()));
    names.delete(name);
    names.set(name, { addresses, until: Date.now() + REMEMBER_MS });
    if (names.size > MAX_REMEMBERED) names.delete(names.keys().next().value!);
  }

  /** The names this sandbox was answered `ip` for, lately. */
  namesFor(sandbox: string, ip: string): string[] {
    const now = Date.now();
    const out: string[] = [];
    for (const [name, e] of this.#seen.get(sandbox) ?? []) if (e.until > now && e.addresses.includes(ip)) out.push(name);
    return out;
  }

  /** Forgets what a sandbox was answered (it is gone, or its rules changed). */
  forget(sandbox: string): void {
    this.#seen.delete(sandbox);
  }
}
