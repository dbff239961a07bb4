// A network namespace of its own for every sandbox with internet access (see README.md, "A
// network of its own"): a veth pair per sandbox, the host ends on one bridge whose ports cannot
// talk to each other, IPv4 forwarding, and one nftables table owned by the agent that
// masquerades sandbox traffic leaving by any other interface and drops what a sandbox sends to
// the host itself, to link-local addresses (cloud metadata) or into another sandbox.
//
// Addresses are leased host-wide (one file per address under /run), because several drivers
// (agents, test suites) may share the bridge; the sandbox's record keeps its address, so an agent
// restart keeps it. A veth is named after the sandbox's pid 1 (`kr<pid>`): the pair disappears
// with the namespace, a restarted holder gets a new name, and a name never points to a namespace
// it was not made for.
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, readdirSync, statSync, unlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { readRecord, type ProcRef, type SandboxAddress } from "./records.ts";
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
/** A lease younger than this is never taken over: its record may not be written yet. */
const LEASE_GRACE_MS = 60_000;
const IFNAME = /^[A-Za-z0-9_.-]{1,15}$/;

const toInt = (ip: string) => ip.split(".").reduce((n, o) => n * 256 + Number(o), 0);
const toIp = (n: number) => [24, 16, 8, 0].map((s) => Math.floor(n / 2 ** s) % 256).join(".");

function parseSubnet(cidr: string): { base: number; prefix: number } {
  const m = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})\/(\d{1,2})$/.exec(cidr);
  const prefix = Number(m?.[5]);
  if (!m || m.slice(1, 5).some((o) => Number(o) > 255) || prefix < 8 || prefix > 28) throw new Error(`sandbox subnet ${JSON.stringify(cidr)}: want an IPv4 range a.b.c.d/8 to /28`);
  const size = 2 ** (32 - prefix);
  const base = Math.floor(toInt(m.slice(1, 5).join(".")) / size) * size;
  return { base, prefix };
}

/** The MTU of the interface of the host's default route: a veth at 1500 behind a smaller uplink
 * would depend on fragmentation-needed messages getting through the NAT. */
function uplinkMtu(): number {
  try {
    for (const line of readFileSync("/proc/net/route", "utf8").split("\n").slice(1)) {
      const [dev, dest] = line.split("\t");
      if (dest === "00000000" && dev) return Number(readFileSync(`/sys/class/net/${dev}/mtu`, "utf8")) || 1500;
    }
  } catch {
    // no IPv4 routes: the default below
  }
  return 1500;
}

function run(file: string, args: string[], input?: string): string | undefined {
  const r = spawnSync(file, args, { input, encoding: "utf8", timeout: 10_000 });
  if (r.error) return `${file}: ${r.error.message}`;
  if (r.status !== 0) return `${file} ${args.join(" ")}: ${r.stderr.trim() || `exit ${r.status}`}`;
  return undefined;
}

/** The nftables table, replaced whole in one transaction (add + delete + define). */
function ruleset(table: string, bridge: string, subnet: string): string {
  const br = JSON.stringify(bridge);
  return `add table inet ${table}
delete table inet ${table}
table inet ${table} {
  chain postrouting {
    type nat hook postrouting priority srcnat; policy accept;
    ip saddr ${subnet} oifname != ${br} masquerade
  }
  chain forward {
    type filter hook forward priority filter; policy accept;
    iifname ${br} ip daddr 169.254.0.0/16 drop
    iifname ${br} oifname ${br} drop
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

let warned = false;

export class SandboxNet {
  readonly bridge: string;
  readonly subnet: string;
  readonly gateway: string;
  readonly #base: number;
  readonly #prefix: number;
  readonly #mtu: number;
  readonly #leases: string;
  #hint = 2;

  private constructor(bridge: string, cidr: string) {
    const { base, prefix } = parseSubnet(cidr);
    this.bridge = bridge;
    this.#base = base;
    this.#prefix = prefix;
    this.subnet = `${toIp(base)}/${prefix}`;
    this.gateway = toIp(base + 1);
    this.#mtu = uplinkMtu();
    this.#leases = join(LEASE_ROOT, bridge);
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

  #setup(): string | undefined {
    if (process.getuid?.() !== 0) return "the agent is not root";
    const bridgeUp = [
      ...(existsSync(`/sys/class/net/${this.bridge}`) ? [] : [`link add ${this.bridge} type bridge`]),
      `addr replace ${this.gateway}/${this.#prefix} dev ${this.bridge}`,
      `link set ${this.bridge} up`,
    ];
    const ipError = run("ip", ["-b", "-"], bridgeUp.join("\n") + "\n");
    if (ipError) return `${ipError} (install iproute2)`;
    try {
      writeFileSync("/proc/sys/net/ipv4/ip_forward", "1");
    } catch (err) {
      return `cannot turn on IPv4 forwarding: ${(err as Error).message}`;
    }
    const nftError = run("nft", ["-f", "-"], ruleset(`kruise_${this.bridge.replace(/[^A-Za-z0-9_]/g, "_")}`, this.bridge, this.subnet));
    if (nftError) return `${nftError} (install nftables)`;
    mkdirSync(this.#leases, { recursive: true, mode: 0o700 });
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

  /** A free address, leased host-wide to the sandbox whose record is `recordFile`. A lease whose
   * record is gone or names another address (a driver that stopped without destroying) is taken
   * over once it is older than a minute. */
  lease(recordFile: string): string {
    const size = 2 ** (32 - this.#prefix);
    for (let tried = 0; tried < size - 3; tried++) {
      const offset = this.#hint;
      this.#hint = this.#hint + 1 >= size - 1 ? 2 : this.#hint + 1;
      const ip = toIp(this.#base + offset);
      const file = join(this.#leases, ip);
      try {
        writeFileSync(file, recordFile, { flag: "wx", mode: 0o600 });
        return ip;
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
      }
      if (this.#stale(file, ip)) {
        try {
          unlinkSync(file);
          writeFileSync(file, recordFile, { flag: "wx", mode: 0o600 });
          return ip;
        } catch {
          // someone else took it meanwhile
        }
      }
    }
    throw new Error(`no free sandbox address left in ${this.subnet}`);
  }

  #stale(file: string, ip: string): boolean {
    try {
      if (Date.now() - statSync(file).mtimeMs < LEASE_GRACE_MS) return false;
      return readRecord(readFileSync(file, "utf8"))?.net?.address !== ip;
    } catch {
      return false;
    }
  }

  release(address: string | undefined): void {
    if (!address) return;
    try {
      unlinkSync(join(this.#leases, address));
    } catch {
      // never leased, or already released
    }
  }

  /** Gives the namespace of `nsInit` a veth with `address` and a default route through the host
   * end, which joins the bridge as an isolated port (by the port relay, over netlink). Returns
   * the veth's name. */
  async attach(nsInit: ProcRef, address: string, relay: PortRelay): Promise<string> {
    const name = this.vethFor(nsInit);
    // The address's own MAC: the host's neighbour entry for an address outlives a restarted
    // holder's veth, and a new random MAC went unanswered for seconds until the entry expired.
    const mac = `02:6b:${address.split(".").map((o) => Number(o).toString(16).padStart(2, "0")).join(":")}`;
    const bridgeIndex = Number(readFileSync(`/sys/class/net/${this.bridge}/ifindex`, "utf8"));
    await relay.addVeth(nsInit, { name, mac, mtu: this.#mtu, bridgeIndex, address, prefix: this.#prefix, gateway: this.gateway });
    return name;
  }

  /** Takes the sandbox off the network (the pair goes with its host end). */
  detach(veth: string, relay: PortRelay): Promise<void> {
    return relay.deleteVeth(veth);
  }
}

