// Destinations the proxy refuses whatever a sandbox's rules say, because the proxy connects from
// where it runs, not from the sandbox: an allowed `127.0.0.1` would otherwise be the host's
// loopback (sqld without auth, the agent, the edge), not the sandbox's own (which NO_PROXY keeps
// local, so a proxied request to loopback is never a legitimate one).
// - Always (every form of the proxy): loopback (127/8, ::1) and link-local (169.254/16, where
//   cloud metadata answers, and fe80::/10).
// - In the agent (local driver), also what the nftables rules keep veth sandboxes from
//   (drivers/local/sandbox-net.ts): every address of the host's own interfaces, and the sandbox
//   bridge's range (other sandboxes).
import { readFileSync } from "node:fs";
import { networkInterfaces } from "node:os";
import { cidrContains, parseCidr, type Cidr, type Ip } from "../../schema/egress/address.ts";

/** Why `ip` may never be connected to, as the end of a sentence about it, or undefined. */
export type Refuse = (ip: Ip) => string | undefined;

const LOOPBACK = [parseCidr("127.0.0.0/8")!, parseCidr("::1")!];
const LINK_LOCAL = [parseCidr("169.254.0.0/16")!, parseCidr("fe80::/10")!];
/** How long the host's addresses are reused before they are read again (reading them costs
 * ~0.1 ms with few interfaces, more with a veth per sandbox). */
const INTERFACES_CACHE_MS = 1000;

/** Loopback and link-local: refused by every form of the proxy. */
export function refuseLocal(ip: Ip): string | undefined {
  if (LOOPBACK.some((c) => cidrContains(c, ip))) return "is loopback, never reached through the proxy (a sandbox's own loopback is not proxied; the proxy's would be the host's)";
  if (LINK_LOCAL.some((c) => cidrContains(c, ip))) return "is link-local (169.254/16, fe80::/10: cloud metadata and the host's links), never reached through the proxy";
  return undefined;
}

/** The addresses this host takes as its own, as CIDR blocks or addresses: the kernel's local
 * routes (/proc/net/fib_trie; AnyIP ranges included) and IPv6 addresses (/proc/net/if_inet6),
 * whatever the state of their interface (os.networkInterfaces() leaves out interfaces without
 * carrier, such as a bridge without ports, whose address still answers), plus what Node lists. */
function readHostAddresses(): string[] {
  const out = Object.values(networkInterfaces()).flatMap((list) => (list ?? []).map((a) => a.address));
  try {
    let node = "";
    for (const line of readFileSync("/proc/net/fib_trie", "utf8").split("\n")) {
      const entry = /\|-- ([\d.]+)$/.exec(line);
      if (entry) node = entry[1]!;
      const local = /^\s+\/(\d+) host LOCAL$/.exec(line);
      if (local && node) out.push(`${node}/${local[1]}`);
    }
    for (const line of readFileSync("/proc/net/if_inet6", "utf8").split("\n")) {
      const hex = /^([0-9a-f]{32}) /.exec(line)?.[1];
      if (hex) out.push(hex.match(/.{4}/g)!.join(":"));
    }
  } catch {
    // Not Linux: Node's list alone.
  }
  return out;
}

export interface HostReachOptions {
  /** Address ranges of other sandboxes (the sandbox bridge's subnet), e.g. "10.88.0.0/16". */
  subnets?: string[];
  /** Networks behind the host's other bridges (containers, VMs: docker0, cni0...). */
  hostNets?: string[];
  /** The host's own addresses (or blocks, such as 127.0.0.0/8); default: the kernel's local
   * addresses, re-read at most once per second. */
  interfaces?: () => string[];
}

/** What the agent's proxy refuses: loopback, link-local, the host's own addresses and other
 * sandboxes. Throws on a subnet that is not a CIDR block. */
export function refuseHost(opts: HostReachOptions = {}): Refuse {
  const blocks = (list: string[] | undefined, what: string): [string, Cidr][] =>
    (list ?? []).map((s) => {
      const c = parseCidr(s);
      if (!c) throw new Error(`${what} ${JSON.stringify(s)} is not an address block`);
      return [s, c];
    });
  const subnets = blocks(opts.subnets, "sandbox subnet");
  const hostNets = blocks(opts.hostNets, "host network");
  const read = opts.interfaces ?? readHostAddresses;
  let own: Cidr[] = [];
  let readAt = -Infinity;
  const hostAddresses = () => {
    if (Date.now() - readAt >= INTERFACES_CACHE_MS) {
      own = read().flatMap((a) => parseCidr(a) ?? []);
      readAt = Date.now();
    }
    return own;
  };
  return (ip) => {
    const local = refuseLocal(ip);
    if (local) return local;
    if (hostAddresses().some((c) => cidrContains(c, ip))) return "is an address of the agent's host, never reached through the proxy (its services are not a sandbox's to reach)";
    const subnet = subnets.find(([, c]) => cidrContains(c, ip));
    if (subnet) return `is in the sandbox network ${subnet[0]} (other sandboxes), never reached through the proxy`;
    const hostNet = hostNets.find(([, c]) => cidrContains(c, ip));
    if (hostNet) return `is in ${hostNet[0]}, a network of the host's own containers or VMs, never reached through the proxy`;
    return undefined;
  };
}
