// Connections the redirect in a sandbox's namespace brings to the proxy (the relay's tag line
// "<sandbox> <ip> <port>"), which speak their own protocol, not the proxy's: TCP to ip:port, and
// DNS (TCP port 53, and the relay's channel carrying UDP port 53). See README.md, "Every
// connection". An L7 handler (`L7Hook`) can take over an allowed connection: the proxy has then
// decided at L3/L4 and read the first bytes; the handler speaks to the client and the upstream.
import type { Socket } from "node:net";
import { normalizeHost } from "../../schema/egress/rules.ts";
import { parseIp } from "../../schema/egress/address.ts";
import type { Refuse } from "./host-reach.ts";
import { decide, type CompiledPolicy, type Verdict } from "./policy.ts";
import { ALLOWED, connectAny, denied, rawReply } from "./connect.ts";
import { decideGoverned, type Governance } from "./governed.ts";
import { MAX_SNIFF, sniff, sniffFinal, type Sniffed } from "./sniff.ts";
import type { SandboxResolver } from "./resolver.ts";
import { ANSWER_TTL_S } from "./dns-wire.ts";

/** The longest tag line a relay sends (a sandbox id is at most 64 characters). */
export const MAX_TAG = 100;

/** An allowed redirected connection, as an L7 handler receives it. */
export interface RedirectedConnection {
  sandbox: string;
  /** Where the sandbox was connecting (from the kernel, never from its bytes). */
  ip: string;
  port: number;
  /** The name its first bytes asked for (TLS SNI, HTTP Host), when read. */
  sniffed: Sniffed;
  /** The bytes read so far (the sniffed head), not yet sent anywhere. */
  head: Buffer;
  /** The client side, paused. */
  client: Socket;
  /** Which rule allowed it. */
  allowedBy: string;
  /** The names the sandbox's DNS was lately answered `ip` for: what the address may be serving,
   * whatever its bytes say (a connection without a name is judged by these). */
  names: readonly string[];
  /** A connection to ip:port (the only destination allowed), tracked so a rule change ends it.
   * `shared`: not tied to this client's life (the L7 handler's pool keeps it for the sandbox's
   * later connections to the same ip:port); the client itself is then what a rule change ends. */
  connectUpstream(opts?: { shared?: boolean }): Promise<Socket>;
}

/** Where L7 policy plugs in (controllers/traffic's L7 files): asked for each redirected connection
 * before the decision; one it wants is sniffed even when its address alone allows it, and handed
 * over once allowed. */
export interface L7Hook {
  wants(sandbox: string, ip: string, port: number): boolean;
  handle(conn: RedirectedConnection): void;
}

/** The kernel's fast path (README.md, "The kernel's fast path"): a redirected connection allowed
 * at L3/L4 that no L7 policy could inspect makes its destination skip the proxy for a while. */
export interface FastPath {
  /** Later TCP connections of `sandbox` to ip:port go out by the kernel for `seconds`. */
  admit(sandbox: string, ip: string, port: number, seconds: number): void;
  /** Every new connection of `sandbox` goes to the proxy again; `endOpen` also ends those that
   * went the kernel's way. */
  flush(sandbox: string, endOpen: boolean): void | Promise<void>;
}

/** How long a destination allowed by its address alone (a CIDR rule) stays on the fast path;
 * one a name admitted stays for that name's TTL (ANSWER_TTL_S). */
export const FAST_PATH_CAP_S = 300;

/** What the redirected path needs of the proxy it belongs to. */
export interface RedirectedContext {
  policyFor(sandbox: string): CompiledPolicy | string;
  /** TrafficPolicies deciding for the sandbox instead (governed.ts), when some select it. */
  governed(sandbox: string): Governance | undefined;
  refuse: Refuse;
  /** A lookup on behalf of `sandbox` (in its turn, lookup-queue.ts). */
  resolve(host: string, sandbox: string): Promise<string[]>;
  dns: SandboxResolver;
  log?: (line: string) => void;
  connectTimeoutMs: number;
  firstRequestTimeoutMs: number;
  /** Keeps a client socket until it closes, so the proxy's close() ends it. */
  adopt(socket: Socket): void;
  /** Remembers an open connection to a destination under its sandbox (revalidate). */
  track(sandbox: string, host: string, upstream: Socket, client: Socket): void;
  /** The same for a client whose upstream sockets are shared: judged by ip:port, kept until it closes. */
  trackClient?(sandbox: string, host: string, ip: string, port: number, client: Socket): void;
  l7?: L7Hook;
  /** A connection the relay offered back ("<sandbox> <ip> <port> *", port-relay.pl `handoff`):
   * `can` says it may still be handed back; `give` hands it to the relay's child, which connects
   * to ip:port itself from the host's network (nowhere else: the child checks it against its own
   * SO_ORIGINAL_DST) and relays in the kernel, `head` (the bytes the proxy read) first; the
   * proxy keeps the socket, tracked under the sandbox, so a rule change still ends it. `stay`:
   * every byte goes through the proxy (L7, or no handoff). None: nothing is handed back. */
  handback?: {
    can(client: Socket): boolean;
    give(client: Socket, host: string, ip: string, port: number, head: Buffer): void;
    stay(client: Socket): void;
  };
  /** The kernel's fast path: `epoch` is the sandbox's policy epoch now (taken before a verdict);
   * `admit` is called for an allowed connection that went to ip:port without L7 (host: the name it
   * went by) once connected, with the epoch its verdict was taken under, and says whether the
   * connection may go on (false: the rules changed meanwhile and deny it now). */
  fast?: {
    epoch(sandbox: string): number;
    admit(sandbox: string, ip: string, port: number, host: string, seconds: number, epoch: number): boolean;
  };
}

export class RedirectedPath {
  readonly #c: RedirectedContext;

  constructor(context: RedirectedContext) {
    this.#c = context;
  }

  /** A connection redirected on its way to ip:port, with no proxy protocol: allowed when the rules
   * admit that address, or else the name its first bytes ask for (SNI, Host) when that name is
   * allowed and resolves to that very address (so a name cannot be borrowed for another server).
   * Connected only to ip:port, the bytes read so far sent first. */
  async connection(sandbox: string, client: Socket, ip: string, port: number): Promise<void> {
    const c = this.#c;
    c.adopt(client);
    client.on("error", () => client.destroy());
    // Before anything is decided: a policy change from here on makes this verdict stale.
    const epoch = c.fast?.epoch(sandbox) ?? 0;
    const policy = c.policyFor(sandbox);
    const where = `${ip}:${port}`;
    if (!parseIp(ip) || !(port >= 1 && port <= 65535)) return void client.destroy();
    const g = c.governed(sandbox);
    if (g) return this.#governed(sandbox, g, client, ip, port, epoch);
    let verdict: Verdict = typeof policy === "string" ? { allowed: false, reason: policy } : decide(policy, ip, [], c.refuse);
    // Allowed by the address alone: the fast path may keep it up to its cap; by a name, that name's TTL.
    const byAddress = verdict.allowed;
    let head: Buffer = Buffer.alloc(0);
    let seen: Sniffed;
    const l7 = c.l7?.wants(sandbox, ip, port) ?? false;
    if ((l7 || !verdict.allowed) && typeof policy !== "string") [head, seen] = await this.#sniffHead(client);
    if (!verdict.allowed && typeof policy !== "string") {
      const name = seen && "name" in seen ? seen.name : undefined;
      if (name && !parseIp(name)) {
        const byName = decide(policy, name, [ip], c.refuse);
        const answered = c.dns.namesFor(sandbox, ip).includes(name);
        const addresses = byName.allowed && !answered ? await c.resolve(name, sandbox).catch(() => [] as string[]) : [];
        if (byName.allowed && (answered || addresses.some((a) => normalizeHost(a) === ip))) verdict = byName;
        else verdict = { allowed: false, reason: byName.allowed ? `${name} does not resolve to ${ip}` : byName.reason };
      } else {
        // No name in the bytes (ssh, a database): the names this sandbox looked up and was
        // answered this address for.
        const admitted = c.dns.namesFor(sandbox, ip).map((n) => decide(policy, n, [ip], c.refuse)).find((v) => v.allowed);
        if (admitted) verdict = admitted;
      }
    }
    if (!verdict.allowed) return this.#refuse(sandbox, client, where, verdict.reason, seen, "rules");
    ALLOWED.inc();
    const host = seen && "name" in seen && seen.name ? seen.name : ip;
    return this.#pass(sandbox, client, ip, port, host, head, seen, verdict.rule ?? "allowed", l7, byAddress ? FAST_PATH_CAP_S : ANSWER_TTL_S, epoch);
  }

  /** A connection of a sandbox TrafficPolicies govern: judged by its address with the names its
   * DNS was answered for it; else (or when L7 wants it) by the name its first bytes ask for, when
   * that name was answered or resolves to this very address. */
  async #governed(sandbox: string, g: Governance, client: Socket, ip: string, port: number, epoch: number): Promise<void> {
    const c = this.#c;
    const names = c.dns.namesFor(sandbox, ip);
    let v = decideGoverned(g, { ip, port, names }, c.refuse);
    const l7 = c.l7?.wants(sandbox, ip, port) ?? false;
    let head: Buffer = Buffer.alloc(0);
    let seen: Sniffed;
    let host = ip;
    if (!v.allowed || l7) {
      [head, seen] = await this.#sniffHead(client);
      const name = seen && "name" in seen ? seen.name : undefined;
      const known = name !== undefined && names.includes(name);
      if (name && !parseIp(name) && !known) {
        const resolves = (await c.resolve(name, sandbox).catch(() => [] as string[])).some((a) => normalizeHost(a) === ip);
        if (resolves) v = decideGoverned(g, { ip, port, names: [...names, name] }, c.refuse);
        else if (!v.allowed) v = { ...v, by: `${v.by}; ${name} does not resolve to ${ip}` };
        if (resolves) host = name;
      } else if (known) host = name;
    }
    if (!v.allowed) return this.#refuse(sandbox, client, `${ip}:${port}`, v.by, seen, v.source);
    ALLOWED.inc();
    // Only a connection the fast path may take needs to know (a proxy without one: no second decision).
    const byAddress = c.fast !== undefined && !l7 && decideGoverned(g, { ip, port, names: [] }, c.refuse).allowed;
    return this.#pass(sandbox, client, ip, port, host, head, seen, v.by, l7, byAddress ? FAST_PATH_CAP_S : ANSWER_TTL_S, epoch);
  }

  /** Counts, logs (with the rule) and ends a refused connection; plain HTTP gets a 403 saying why. */
  #refuse(sandbox: string, client: Socket, where: string, reason: string, seen: Sniffed, source: string): void {
    denied(source);
    this.#c.log?.(`traffic-proxy: ${sandbox || "sandbox"}: denied ${where}: ${reason}`);
    if (seen?.kind === "http") return void client.end(rawReply("403 Forbidden", `traffic-proxy: egress denied: ${reason}\n`));
    client.destroy();
  }

  /** Connects an allowed connection to ip:port (or hands it to the L7 handler) and copies bytes;
   * without L7, the destination goes on the fast path for `fastSeconds` once connected. */
  async #pass(sandbox: string, client: Socket, ip: string, port: number, host: string, head: Buffer, seen: Sniffed, allowedBy: string, l7: boolean, fastSeconds: number, epoch: number): Promise<void> {
    const c = this.#c;
    const connectUpstream = async (opts?: { shared?: boolean }) => {
      const upstream = await connectAny([ip], port, c.connectTimeoutMs);
      if (opts?.shared) {
        upstream.on("error", () => upstream.destroy());
        return upstream;
      }
      upstream.on("error", () => client.destroy());
      client.on("close", () => upstream.destroy());
      upstream.on("close", () => client.destroy());
      c.track(sandbox, host, upstream, client);
      return upstream;
    };
    // Decided at L3/L4 with nothing to inspect: the relay's child takes it from here. The
    // destination goes on the fast path now, before the child's connect (a destination that does
    // not answer is then tried by the kernel's way as well, and fails there alike).
    if (!l7 && c.handback?.can(client)) {
      if (c.fast && !c.fast.admit(sandbox, ip, port, host, fastSeconds, epoch)) return void client.destroy();
      return c.handback.give(client, host, ip, port, head);
    }
    // Said before anything is written: an L7 handler may write below the socket (TLS on its handle).
    c.handback?.stay(client);
    // An L7 client may be served on pooled sockets it did not open: it is what a rule change ends.
    if (l7) {
      c.trackClient?.(sandbox, host, ip, port, client);
      return c.l7!.handle({ sandbox, ip, port, sniffed: seen, head, client, allowedBy, names: c.dns.namesFor(sandbox, ip), connectUpstream });
    }
    let upstream: Socket;
    try {
      upstream = await connectUpstream();
    } catch {
      return void client.destroy();
    }
    // After the connect, so a destination that does not answer stays with the proxy; the connect
    // may have outlasted a policy change (its revalidate did not see this connection yet).
    if (c.fast && !c.fast.admit(sandbox, ip, port, host, fastSeconds, epoch)) {
      upstream.destroy();
      return void client.destroy();
    }
    if (head.length) upstream.write(head);
    client.pipe(upstream).on("error", () => {});
    upstream.pipe(client);
    client.resume();
  }

  /** DNS messages, each behind a 2-byte length (DNS over TCP, RFC 1035 4.2.2): from a sandbox's
   * redirected TCP port 53 (`channel` false, `sandbox` its tag), or the relay's channel for UDP,
   * whose frames each start with "<sandbox> <token>\n" (echoed before the answer). */
  dnsFrames(sandbox: string, socket: Socket, channel: boolean): void {
    const c = this.#c;
    c.adopt(socket);
    let buf = Buffer.alloc(0);
    socket.on("error", () => socket.destroy());
    socket.on("data", (chunk: Buffer) => {
      buf = Buffer.concat([buf, chunk]);
      while (buf.length >= 2 && buf.length >= 2 + buf.readUInt16BE(0)) {
        const frame = buf.subarray(2, 2 + buf.readUInt16BE(0));
        buf = buf.subarray(2 + frame.length);
        const nl = channel ? frame.indexOf(0x0a) : -1;
        if (channel && (nl < 0 || nl > MAX_TAG)) return void socket.destroy();
        const head = frame.subarray(0, nl + 1);
        const who = channel ? head.toString().split(" ")[0]! : sandbox;
        void this.dnsAnswer(who, frame.subarray(nl + 1)).then((answer) => {
          if (!answer || socket.destroyed) return;
          const reply = Buffer.concat([head, answer]);
          const len = Buffer.alloc(2);
          len.writeUInt16BE(reply.length);
          socket.write(Buffer.concat([len, reply]));
        });
      }
    });
    socket.resume();
  }

  /** The answer to one DNS query of a sandbox (its rules decide which names resolve), counted
   * and logged when refused; undefined when there is nothing to send back. */
  async dnsAnswer(sandbox: string, query: Buffer): Promise<Buffer | undefined> {
    const c = this.#c;
    const g = c.governed(sandbox);
    const out = await (g ? c.dns.answerGoverned(sandbox, g, query) : c.dns.answer(sandbox, c.policyFor(sandbox), query));
    if (out.denied !== undefined) {
      denied("dns");
      c.log?.(`traffic-proxy: ${sandbox || "sandbox"}: denied DNS ${out.name}: ${out.denied}`);
    }
    return out.answer;
  }

  /** The first bytes of a redirected connection, until they name a host or cannot (at most
   * MAX_SNIFF bytes, or whatever came within the first-request timeout). */
  #sniffHead(client: Socket): Promise<[Buffer, Sniffed]> {
    return new Promise((resolve) => {
      let buf: Buffer = Buffer.alloc(0);
      const done = (s: Sniffed) => {
        clearTimeout(timer);
        client.off("data", onData).off("end", onEnd).pause();
        resolve([buf, s]);
      };
      const onData = (chunk: Buffer) => {
        buf = Buffer.concat([buf, chunk]);
        const s = sniff(buf);
        if (s || buf.length >= MAX_SNIFF) done(s ?? sniffFinal(buf));
      };
      const onEnd = () => done(sniffFinal(buf));
      const timer = setTimeout(() => done(sniffFinal(buf)), this.#c.firstRequestTimeoutMs).unref();
      client.on("data", onData).once("end", onEnd).resume();
    });
  }
}
