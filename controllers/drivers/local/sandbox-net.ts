// A network namespace of its own for every sandbox with internet access (see README.md, "A
// network of its own"): a veth pair per sandbox, the host ends on one bridge whose ports cannot
// talk to each other, IPv4 forwarding, and one nftables table owned by the agent that
// masquerades sandbox traffic leaving by any other interface and drops what a sandbox sends to
// the host itself (also to its services published by DNAT: docker -p, NodePort, ClusterIP), to
// other local bridges' networks, to link-local addresses (cloud metadata), into another sandbox,
// or to private ranges (10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7: the host's LAN and VPC
// neighbours), except DNS to the resolvers the sandbox's resolv.conf names.
//
// Addresses are leased host-wide (address-leases.ts), because several drivers (agents, test
// suites) may share the bridge; the sandbox's record keeps its address, so an agent restart keeps
// it. A veth is named after the sandbox's pid 1 (`kr<pid>`): the pair disappears
// with the namespace, a restarted holder gets a new name, and a name never points to a namespace
// it was not made for.
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { PRIVATE_RANGES } from "../../../schema/egress/address.ts";
import { AddressLeases, toIp } from "./address-leases.ts";
import { sandboxResolvers } from "./layout.ts";
import type { ProcRef, SandboxAddress } from "./records.ts";
import type { PortRelay } from "./port-relay.ts";

export interface SandboxNetOptions {
  /** Bridge the host ends join. Default `kruise0`. */
  bridge?: string;
  /** IPv4 range of sandbox addresses, /8 to /28; the bridge takes the first address. Default
   * 10.88.0.0/16. */
  subnet?: string;
}

export const DEFAULT_BRIDGE = "kruise0";
export const DEFAULT_SUBNET = "10.88.0.0/16";
const LEASE_ROOT = "/run/kruise-net";
const IFNAME = /^[A-Za-z0-9_.-]{1,15}$/;

const toInt = (ip: string) => ip.split(".").reduce((n, o) => n * 256 + Number(o), 0);

function parseSubnet(cidr: string): { base: number; prefix: number } {
  const m = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})\/(\d{1,2})$/.exec(cidr);
  const prefix = Number(m?.[5]);
  if (!m || m.slice(1, 5).some((o) => Number(o) > 255) || prefix < 8 || prefix > 28) throw new Error(`sandbox subnet ${JSON.stringify(cidr)}: want an IPv4 range a.b.c.d/8 to /28`);
  const size = 2 ** (32 - prefix);
  const base = Math.floor(toInt(m.slice(1, 5).join(".")) / size) * size;
  return { base, prefix };
}

/** The host's IPv4 routes as /proc/net/route rows (Iface, Destination, Gateway, ..., Mask), or
 * none when it cannot be read. */
function routes(): string[][] {
  try {
    return readFileSync("/proc/net/route", "utf8").split("\n").slice(1).map((l) => l.trim().split(/\s+/));
  } catch {
    return [];
  }
}

/** The MTU of the interface of the host's default route: a veth at 1500 behind a smaller uplink
 * would depend on fragmentation-needed messages getting through the NAT. */
function uplinkMtu(): number {
  const dev = routes().find((r) => r[1] === "00000000")?.[0];
  try {
    if (dev) return Number(readFileSync(`/sys/class/net/${dev}/mtu`, "utf8")) || 1500;
  } catch {
    // the interface went away: the default below
  }
  return 1500;
}

function run(file: string, args: string[], input?: string): string | undefined {
  const r = spawnSync(file, args, { input, encoding: "utf8", timeout: 10_000 });
  if (r.error) return `${file}: ${r.error.message}`;
  if (r.status !== 0) return `${file} ${args.join(" ")}: ${r.stderr.trim() || `exit ${r.status}`}`;
  return undefined;
}

/** The IPv4 networks directly behind the host's other bridges (docker0, br-*, cni0, virbr0...):
 * containers and VMs on the host, which are host services as much as its loopback is. A bridge
 * that carries a default route is the host's uplink, whose network stays reachable. */
function otherBridgeNets(bridge: string): string[] {
  const ip = (hex: string) => [6, 4, 2, 0].map((i) => parseInt(hex.slice(i, i + 2), 16)).join(".");
  const bits = (hex: string) => ip(hex).split(".").reduce((n, o) => n + Number(o).toString(2).replace(/0/g, "").length, 0);
  const table = routes();
  const uplinks = new Set(table.filter((r) => r[1] === "00000000").map((r) => r[0]));
  const nets = table
    .filter(([dev, dest, gw]) => dev && dev !== bridge && !uplinks.has(dev) && gw === "00000000" && dest !== "00000000" && existsSync(`/sys/class/net/${dev}/bridge`))
    .map(([, dest, , , , , , mask]) => `${ip(dest!)}/${bits(mask!)}`);
  return [...new Set(nets)];
}

/** The nftables table, replaced whole in one transaction (add + delete + define). `resolvers`
 * are let through on port 53 before the private ranges are dropped: a host's resolver is often in
 * one (a VPC's, a LAN router). */
export function ruleset(table: string, bridge: string, subnet: string, bridgeNets: string[], resolvers: string[] = []): string {
  const br = JSON.stringify(bridge);
  const v4 = PRIVATE_RANGES.filter((r) => !r.includes(":"));
  const v6 = PRIVATE_RANGES.filter((r) => r.includes(":"));
  return `add table inet ${table}
delete table inet ${table}
table inet ${table} {
  chain postrouting {
    type nat hook postrouting priority srcnat; policy accept;
    ip saddr ${subnet} oifname != ${br} masquerade
  }
  chain forward {
    type filter hook forward priority filter; policy accept;
    iifname ${br} ct status dnat drop
    iifname ${br} ip daddr 169.254.0.0/16 drop
${bridgeNets.length ? `    iifname ${br} ip daddr { ${bridgeNets.join(", ")} } drop\n` : ""}    iifname ${br} oifname ${br} drop
${resolvers.length ? `    iifname ${br} ip daddr { ${resolvers.join(", ")} } meta l4proto { tcp, udp } th dport 53 accept\n` : ""}    iifname ${br} ip daddr { ${v4.join(", ")} } drop
    iifname ${br} ip6 daddr { ${v6.join(", ")} } drop
    oifname ${br} ct state established,related accept
    oifname ${br} drop
    iifname ${br} meta nfproto ipv6 drop
  }
  chain input {
    type filter hook input priority filter; policy accept;
    iifname ${br} ct state established,related accept
    iifname ${br} drop
  }
}
`;
}

/** The address's own MAC: the host's neighbour entry for an address outlives a restarted
 * holder's veth, and a new random MAC went unanswered for seconds until the entry expired. */
const macOf = (address: string) => `02:6b:${address.split(".").map((o) => Number(o).toString(16).padStart(2, "0")).join(":")}`;

let warned = false;

export class SandboxNet {
  readonly bridge: string;
  readonly subnet: string;
  readonly gateway: string;
  readonly #prefix: number;
  readonly #mtu: number;
  readonly #leases: AddressLeases;
  /** The host's other bridges' networks, as the table drops them (read at setup). */
  #otherNets: string[] = [];

  private constructor(bridge: string, cidr: string) {
    const { base, prefix } = parseSubnet(cidr);
    this.bridge = bridge;
    this.#prefix = prefix;
    this.subnet = `${toIp(base)}/${prefix}`;
    this.gateway = toIp(base + 1);
    this.#mtu = uplinkMtu();
    this.#leases = new AddressLeases(join(LEASE_ROOT, bridge), base, prefix);
  }

  /** The host's other bridges' networks the table keeps sandboxes from, for the traffic-proxy,
   * whose connections leave from the host and pass no table. */
  get hostNets(): string[] {
    return [...this.#otherNets];
  }

  /** Sets up the bridge, forwarding and the nftables table (idempotent, safe while other drivers
   * use them), or says why this host cannot: then sandboxes with internet access share the host's
   * network, and a warning says so once per process. */
  static open(opts: SandboxNetOptions = {}): SandboxNet | string {
    const bridge = opts.bridge ?? DEFAULT_BRIDGE;
    if (!IFNAME.test(bridge)) return `bridge name ${JSON.stringify(bridge)} is not a valid interface name`;
    let net: SandboxNet;
    try {
      net = new SandboxNet(bridge, opts.subnet ?? DEFAULT_SUBNET);
    } catch (err) {
      return (err as Error).message;
    }
    const reason = net.#setup();
    if (reason && !warned) {
      warned = true;
      console.warn(`local driver: sandboxes with internet access share the host's network (no isolation between them or from host services): ${reason}`);
    }
    return reason ?? net;
  }

  /** The table goes in before forwarding is turned on, so forwarding is never on without it; a
   * failed step undoes what this call set up (a bridge it made, its table). */
  #setup(): string | undefined {
    if (process.getuid?.() !== 0) return "the agent is not root";
    const bridgeUp = (add: boolean) =>
      [...(add ? [`link add ${this.bridge} type bridge`] : []), `addr replace ${this.gateway}/${this.#prefix} dev ${this.bridge}`, `link set ${this.bridge} up`].join("\n") + "\n";
    let made = !existsSync(`/sys/class/net/${this.bridge}`);
    let ipError = run("ip", ["-b", "-"], bridgeUp(made));
    // Another driver starting at the same time made it first (EEXIST): the same bridge will do.
    if (ipError && made && existsSync(`/sys/class/net/${this.bridge}`)) {
      made = false;
      ipError = run("ip", ["-b", "-"], bridgeUp(false));
    }
    const fail = (why: string) => {
      if (made) run("ip", ["link", "del", this.bridge]);
      return why;
    };
    if (ipError) return fail(`${ipError} (install iproute2)`);
    const table = `kruise_${this.bridge.replace(/[^A-Za-z0-9_]/g, "_")}`;
    this.#otherNets = otherBridgeNets(this.bridge);
    const nftError = run("nft", ["-f", "-"], ruleset(table, this.bridge, this.subnet, this.#otherNets, sandboxResolvers()));
    if (nftError) return fail(`${nftError} (install nftables)`);
    try {
      writeFileSync("/proc/sys/net/ipv4/ip_forward", "1");
    } catch (err) {
      run("nft", ["delete", "table", "inet", table]);
      return fail(`cannot turn on IPv4 forwarding: ${(err as Error).message}`);
    }
    this.#leases.open();
    this.#deleteOrphans();
    return undefined;
  }

  /** Host ends left on the bridge whose namespace's process is gone. The kernel removes a pair
   * with its namespace; this catches one whose namespace is still being torn down, or kept alive
   * by something else. Ends of live sandboxes (of any driver sharing the bridge) are left alone. */
  #deleteOrphans(): void {
    let ports: string[];
    try {
      ports = readdirSync(`/sys/class/net/${this.bridge}/brif`);
    } catch {
      return;
    }
    const orphans = ports.filter((p) => /^kr\d+$/.test(p) && !existsSync(`/proc/${p.slice(2)}`));
    if (orphans.length) run("ip", ["-force", "-b", "-"], orphans.map((p) => `link del ${p}`).join("\n") + "\n");
  }

  /** The veth of a sandbox whose pid 1 is `nsInit`. */
  vethFor(nsInit: ProcRef): string {
    return `kr${nsInit.pid}`;
  }

  /** Whether the veth recorded for a sandbox is there (and so still in its namespace). */
  attached(addr: SandboxAddress | undefined, nsInit: ProcRef): boolean {
    return addr?.veth === this.vethFor(nsInit) && existsSync(`/sys/class/net/${addr.veth}`);
  }

  /** A free address, leased host-wide to the sandbox whose record is `recordFile`. */
  lease(recordFile: string): string {
    return this.#leases.lease(recordFile);
  }

  /** The address a sandbox's record keeps, with its lease taken again, or a new one when another
   * sandbox holds it now (see AddressLeases.keep). */
  keep(address: string | undefined, recordFile: string): string {
    return this.#leases.keep(address, recordFile);
  }

  release(address: string | undefined, recordFile: string): void {
    this.#leases.release(address, recordFile);
  }

  /** Gives the namespace of `nsInit` a veth with `address` and a default route through the host
   * end, which joins the bridge as an isolated port (by the port relay, over netlink). Returns
   * the veth's name. */
  async attach(nsInit: ProcRef, address: string, relay: PortRelay): Promise<string> {
    const name = this.vethFor(nsInit);
    const mac = macOf(address);
    // Deleted while the driver runs (by hand, or a network manager): set up again, table and all.
    if (!existsSync(`/sys/class/net/${this.bridge}`)) {
      const why = this.#setup();
      if (why) throw new Error(`sandbox network: bridge ${this.bridge} is gone and cannot be made again: ${why}`);
    }
    const bridgeIndex = Number(readFileSync(`/sys/class/net/${this.bridge}/ifindex`, "utf8"));
    await relay.addVeth(nsInit, { name, mac, mtu: this.#mtu, bridgeIndex, address, prefix: this.#prefix, gateway: this.gateway });
    return name;
  }

  /** Puts the host's table of a veth already there (its own MAC and address only, port-relay.pl
   * `veth_tables`) in place again: one an older agent made may have none. Idempotent. */
  retable(veth: string, address: string, relay: PortRelay): Promise<void> {
    return relay.vethTables(veth, macOf(address), address);
  }

  /** Takes the sandbox off the network (the pair goes with its host end). */
  detach(veth: string, relay: PortRelay): Promise<void> {
    return relay.deleteVeth(veth);
  }
}

