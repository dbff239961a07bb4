// Inbound connections to user ports of sandboxes that have their own, empty network namespace
// (allowInternetAccess: false): nothing on the host can reach their loopback over TCP, and Node
// cannot setns(). One small perl process per driver (port-relay.pl, started on first use, ~4 MB)
// accepts on a Unix socket and forks a child per connection that enters the sandbox's network
// namespace only and connects to 127.0.0.1:<port> there. Idle sandboxes cost nothing.
//
// The same process is the way out of sandboxes with egress rules: it keeps a listener inside each
// such sandbox's network namespace and pipes what arrives there to the traffic-proxy's Unix
// socket, tagged with the sandbox (see port-relay.pl and README.md). The driver asks for those
// listeners with listenEgress/closeEgress; they are re-opened when the relay had to restart. Each
// connection through such a listener holds a relay child that joins the sandbox's cgroups, so
// the sandbox's own limits bound them.
//
// It also makes sandboxes' veth pairs (addVeth/deleteVeth, over netlink; see sandbox-net.ts): it
// already enters namespaces, so no process starts per sandbox for its network.
import { spawn, type ChildProcess } from "node:child_process";
import { createInterface } from "node:readline";
import { mkdtempSync, rmSync } from "node:fs";
import { connect, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { helperEnv, PERL, syscallNumbers } from "./host-helpers.ts";
import type { ProcRef } from "./records.ts";

const RELAY_SCRIPT = fileURLToPath(new URL("./port-relay.pl", import.meta.url));
/** The longest error line the relay sends; anything longer is a broken relay. */
const MAX_ANSWER = 256;

export interface PortRelayOptions {
  /** The traffic-proxy's tagged Unix socket (TrafficProxy.listenTagged); without it the relay
   * refuses egress listeners. */
  proxySocket?: string;
  /** The conntrack mark bits the fast path's generations use (port-relay.pl `gen_next`): a
   * contiguous run of at least 4 bits. Default DEFAULT_CT_MARK_MASK. */
  ctMarkMask?: number;
}

/** The conntrack mark bits the fast path takes by default: the top 12, clear of the low 16 that
 * kube-proxy (0x4000, 0x8000), Istio's ambient mode (0xfff) and wg-quick's saved marks use. */
export const DEFAULT_CT_MARK_MASK = 0xfff00000;

/** The mask as the relay takes it ("0x" and 8 hex digits), or an error naming what is wrong: a
 * contiguous run of 4 to 32 bits. */
export function ctMarkMaskArg(mask: number): string {
  if (!Number.isInteger(mask) || mask <= 0 || mask > 0xffffffff) throw new Error(`conntrack mark mask ${mask}: want 32 bits, not 0`);
  const run = mask / ((mask & -mask) >>> 0);
  if (!Number.isInteger(Math.log2(run + 1)) || run < 15) throw new Error(`conntrack mark mask 0x${mask.toString(16)}: want one contiguous run of at least 4 bits`);
  return `0x${mask.toString(16).padStart(8, "0")}`;
}

/** What bounds the relay children of one sandbox's egress connections. */
export interface EgressLimits {
  /** The sandbox's cgroup.procs files, which each child joins (none without cgroups). */
  cgroupProcs: string[];
  /** Open connections at most; more are closed as they arrive. */
  maxConnections: number;
}

/** One sandbox's veth pair: host end `name` on the bridge with index `bridgeIndex`; `eth0` inside
 * with `mac`, `address`/`prefix` and a default route via `gateway`. */
export interface VethSpec {
  name: string;
  mac: string;
  mtu: number;
  bridgeIndex: number;
  address: string;
  prefix: number;
  gateway: string;
}

interface EgressListener extends EgressLimits {
  nsInit: ProcRef;
  port: number;
  /** With the kernel's fast path: the set and gate in the namespace, the guard on the host. */
  fastPath: boolean;
  /** The leased address of the sandbox's veth, when it has one: the host's guard is keyed to it
   * (never to what eth0 says inside, which the sandbox's root could change). */
  address?: string;
  /** The relay refused it; it may still hold the sandbox's previous listener (port-relay.pl keeps
   * what a failed re-listen had), so `closeEgress` must still tell it. */
  failed?: boolean;
}

const listenLine = (tag: string, l: EgressListener, withAddress = true) =>
  ["listen", tag, l.nsInit.pid, l.nsInit.start, l.port, l.maxConnections, ...(l.fastPath ? ["fast"] : []), ...(withAddress && l.address ? ["at", l.address] : []), ...l.cgroupProcs].join(" ");

export class PortRelay {
  readonly #proxySocket: string | undefined;
  readonly #ctMask: string;
  #dir: string | undefined;
  #child: ChildProcess | undefined;
  #ready: Promise<string> | undefined;
  /** Answers the relay owes, in the order the commands were written. */
  #pending: ((answer: string) => void)[] = [];
  /** The egress listeners that should exist, by sandbox. */
  readonly #egress = new Map<string, EgressListener>();

  constructor(opts: PortRelayOptions = {}) {
    this.#proxySocket = opts.proxySocket;
    this.#ctMask = ctMarkMaskArg(opts.ctMarkMask ?? DEFAULT_CT_MARK_MASK);
  }

  /** The relay's socket path, starting the relay when it is not running. */
  #start(): Promise<string> {
    if (this.#ready) return this.#ready;
    // A private directory: only this process's user reaches the socket (the relay runs as it).
    this.#dir ??= mkdtempSync(join(tmpdir(), "kruise-relay-"));
    const path = join(this.#dir, "relay.sock");
    const nr = syscallNumbers();
    const args = [RELAY_SCRIPT, path, String(nr.setns), String(nr.prctl), String(nr.splice), this.#ctMask, ...(this.#proxySocket ? [this.#proxySocket] : [])];
    const child = spawn(PERL, args, { env: helperEnv(), stdio: ["pipe", "pipe", "inherit"] });
    this.#child = child;
    const pending: ((answer: string) => void)[] = [];
    this.#pending = pending;
    const ready = new Promise<string>((resolve, reject) => {
      const lines = createInterface({ input: child.stdout! });
      lines.once("line", (first) => {
        if (first !== "ready") return reject(new Error(`port relay: unexpected ${JSON.stringify(first)}`));
        // Waiting for the relay kept the process alive; a running relay must not.
        for (const pipe of [child.stdin, child.stdout]) (pipe as unknown as { unref(): void }).unref();
        lines.on("line", (answer) => {
          pending.shift()?.(answer);
          if (pending.length === 0) (child.stdout as unknown as { unref(): void }).unref();
        });
        resolve(path);
      });
      child.once("error", reject);
      child.once("exit", (code, signal) => reject(new Error(`port relay exited (${signal ?? code}) before it was ready`)));
    });
    child.stdin!.on("error", () => {});
    child.once("exit", (code, signal) => {
      for (const answer of pending.splice(0)) answer(`port relay exited (${signal ?? code})`);
      if (this.#child !== child) return;
      // The next connection starts a new relay; sandboxes with egress rules need one right away.
      [this.#child, this.#ready] = [undefined, undefined];
      if (this.#egress.size) setTimeout(() => void this.#start().catch(() => {}), 200).unref();
    });
    child.unref();
    this.#ready = ready.then(async (p) => {
      for (const [tag, l] of this.#egress) {
        const answer = await this.#command(child, listenLine(tag, l));
        // Forgotten, so the sandbox's next ensure opens it again (and reports why it cannot).
        if (answer !== "ok" && this.#egress.get(tag) === l) {
          this.#egress.delete(tag);
          console.error(`port relay: egress listener for ${tag} not reopened: ${answer}`);
        }
      }
      return p;
    });
    this.#ready.catch(() => {});
    return this.#ready;
  }

  /** Writes one command to a running relay; resolves with its answer line. */
  #command(child: ChildProcess, line: string): Promise<string> {
    return new Promise((resolve) => {
      if (child !== this.#child || child.exitCode !== null) return resolve("port relay is not running");
      // An awaited answer keeps the process alive (the pipes are unref'd while nothing is asked):
      // an agent stopping with only a relay command left to wait for (a destroy's `unveth`) ran
      // out of work and exited there, leaving its sandboxes mounted (CI run 11-2).
      if (this.#pending.length === 0) (child.stdout as unknown as { ref(): void }).ref();
      this.#pending.push(resolve);
      child.stdin!.write(`${line}\n`);
    });
  }

  /** Starts the relay now rather than with the first sandbox that needs it. */
  warm(): void {
    this.#start().catch(() => {});
  }

  /** Makes 127.0.0.1:`port` inside the network namespace of `nsInit` lead to the traffic-proxy,
   * tagged `tag` (the sandbox id). Idempotent; a new `nsInit` (restarted sandbox) or new limits
   * replace the old listener. With `fastPath`, the namespace gets the fast path's set and gate
   * (port-relay.pl `redirect_all`), and its veth (leased `address`) the host's guard; without,
   * neither. A veth's address arriving is no new listener: it is kept for a relay restart. */
  async listenEgress(tag: string, nsInit: ProcRef, port: number, limits: EgressLimits, fastPath = false, address?: string): Promise<void> {
    const want: EgressListener = { nsInit, port, ...limits, fastPath, address };
    const had = this.#egress.get(tag);
    if (had && !had.failed && this.#child && listenLine(tag, had, false) === listenLine(tag, want, false)) {
      had.address = address;
      return;
    }
    this.#egress.set(tag, want);
    await this.#start();
    const answer = await this.#command(this.#child!, listenLine(tag, want));
    if (answer !== "ok") {
      want.failed = true;
      throw new Error(`egress listener for ${tag}: ${answer}`);
    }
  }

  /** Records the leased address of the sandbox's veth (made after its listener) for reopening the
   * listener after a relay restart: the host's guard of an eth0 already there is keyed to it. */
  egressAddress(tag: string, address: string): void {
    const l = this.#egress.get(tag);
    if (l) l.address = address;
  }

  /** Closes the sandbox's egress listener and ends the connections through it; a listener holds
   * the namespace alive, so this comes before its processes end. */
  async closeEgress(tag: string): Promise<void> {
    if (!this.#egress.delete(tag) || !this.#child) return;
    await this.#command(this.#child, `close ${tag}`);
  }

  /** Lets the sandbox's later TCP connections to ip:port leave by its eth0 for `seconds`,
   * without the proxy (port-relay.pl's `fast`: the kernel's fast path). The answer is not waited
   * for: the connection that earned it is already on its way through the proxy. */
  fastAdmit(tag: string, ip: string, port: number, seconds: number): void {
    if (!this.#egress.has(tag) || !this.#child) return;
    void this.#command(this.#child, `fast ${tag} ${ip} ${port} ${seconds}`).then((answer) => {
      // Refused for the rate (port-relay.pl `fast_budget`): the proxy keeps the destination, as
      // it does every refused one; said once per burst would still be a sandbox-driven log flood.
      if (answer !== "ok" && answer !== "rate limited") console.error(`port relay: fast path for ${tag} to ${ip}:${port}: ${answer}`);
    });
  }

  /** Empties the sandbox's fast-path set (every new connection goes to the proxy again), and with
   * `endOpen` ends the connections that took the fast path; resolves once the kernel has it. */
  async fastFlush(tag: string, endOpen: boolean): Promise<void> {
    if (!this.#egress.has(tag) || !this.#child) return;
    const answer = await this.#command(this.#child, `unfast ${tag} ${endOpen ? 1 : 0}`);
    if (answer !== "ok") console.error(`port relay: flushing the fast path of ${tag}: ${answer}`);
  }

  /** Gives the network namespace of `nsInit` a veth pair (see sandbox-net.ts, port-relay.pl's
   * `veth`): over netlink from the relay, which already enters namespaces, so no process is
   * started. Rejects with the kernel's reason; a half-made pair is deleted. */
  async addVeth(nsInit: ProcRef, v: VethSpec): Promise<void> {
    await this.#start();
    const answer = await this.#command(this.#child!, ["veth", nsInit.pid, nsInit.start, v.name, v.mac, v.mtu, v.bridgeIndex, `${v.address}/${v.prefix}`, v.gateway].join(" "));
    if (answer !== "ok") throw new Error(`sandbox network: ${answer}`);
  }

  /** Puts the bridge table of the host end `name` (its MAC and address only, port-relay.pl
   * `veth_tables`) in place again: a veth an older agent made may have none. */
  async vethTables(name: string, mac: string, address: string): Promise<void> {
    await this.#start();
    const answer = await this.#command(this.#child!, `tables ${name} ${mac} ${address}`);
    if (answer !== "ok") throw new Error(`sandbox network: ${answer}`);
  }

  /** Deletes a veth pair by its host end's name. */
  async deleteVeth(name: string): Promise<void> {
    await this.#start();
    const answer = await this.#command(this.#child!, `unveth ${name}`);
    if (answer !== "ok") throw new Error(`sandbox network: ${answer}`);
  }

  /** A socket connected to `port` on the loopback of the network namespace of `nsInit`, ready for
   * the caller's bytes. Rejects with the relay's reason (e.g. connection refused) otherwise. */
  async connect(nsInit: ProcRef, port: number): Promise<Socket> {
    const path = await this.#start();
    const socket = connect(path);
    socket.write(`${nsInit.pid} ${nsInit.start} ${port}\n`);
    return new Promise<Socket>((resolve, reject) => {
      let answer = Buffer.alloc(0);
      const fail = (err: Error) => {
        socket.destroy();
        reject(err);
      };
      const onReadable = () => {
        let chunk: Buffer | null;
        // Byte by byte up to the newline, so nothing after it is taken from the stream's owner.
        while ((chunk = socket.read(1) as Buffer | null) !== null) {
          if (chunk[0] !== 0x0a) {
            answer = Buffer.concat([answer, chunk]);
            if (answer.length > MAX_ANSWER) return fail(new Error("port relay: answer too long"));
            continue;
          }
          socket.off("readable", onReadable).off("error", fail).off("end", onEnd);
          const text = answer.toString();
          if (text === "ok") return resolve(socket);
          return fail(new Error(text));
        }
      };
      const onEnd = () => fail(new Error("port relay closed the connection without an answer"));
      socket.on("readable", onReadable).once("error", fail).once("end", onEnd);
    });
  }

  dispose(): void {
    this.#egress.clear();
    this.#child?.kill("SIGKILL");
    [this.#child, this.#ready] = [undefined, undefined];
    if (this.#dir) rmSync(this.#dir, { recursive: true, force: true });
    this.#dir = undefined;
  }
}
