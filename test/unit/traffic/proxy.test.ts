// The traffic-proxy against real loopback servers: what it forwards, what it refuses and how
// it knows whose connection it is. The loopback servers stand in for "outside" here, so the
// proxy under test is told to refuse nothing by itself (`refuse`); what the proxy refuses
// whatever the rules say (loopback, link-local, the host's own addresses) has its own tests below.
import { mkdtempSync, rmSync } from "node:fs";
import { createServer, type IncomingMessage, type Server } from "node:http";
import { connect, createServer as createNetServer, type AddressInfo, type Server as NetServer, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { compilePolicy } from "../../../controllers/traffic/policy.ts";
import { TrafficProxy } from "../../../controllers/traffic/proxy.ts";
import { refuseHost } from "../../../controllers/traffic/host-reach.ts";
import { networkInterfaces } from "node:os";

let origin: Server;
let port = 0;
/** On `::`, dual stack: what an address that connect() maps to loopback (0.0.0.0, [::]) or IPv6
 * loopback would reach. */
let origin6: Server;
let port6 = 0;
const seen6: string[] = [];
let echo: NetServer;
let echoPort = 0;
const seen: { host: string | undefined; url: string | undefined; by: string }[] = [];
const resolved: string[] = [];
let proxy: TrafficProxy;
let dir = "";
let sock = "";

const policies: Record<string, ReturnType<typeof compilePolicy>> = {
  strict: compilePolicy({ allowOut: ["127.0.0.1"], denyOut: ["0.0.0.0/0"] }),
  byName: compilePolicy({ allowOut: ["localhost"], denyOut: ["0.0.0.0/0"] }),
  denyLo: compilePolicy({ allowOut: [], denyOut: ["127.0.0.0/8", "::1"] }),
  denyLo4: compilePolicy({ allowOut: [], denyOut: ["127.0.0.0/8"] }),
  loopback4: compilePolicy({ allowOut: ["127.0.0.0/8"], denyOut: ["0.0.0.0/0"] }),
};

beforeAll(async () => {
  origin = createServer((req: IncomingMessage, res) => {
    seen.push({ host: req.headers.host, url: req.url, by: req.socket.localAddress ?? "" });
    res.end(`hello from ${req.socket.localAddress}`);
  });
  origin.on("upgrade", (req: IncomingMessage, socket: Socket) => {
    seen.push({ host: req.headers.host, url: req.url, by: req.socket.localAddress ?? "" });
    socket.end("HTTP/1.1 101 Switching Protocols\r\nUpgrade: test\r\nConnection: Upgrade\r\n\r\n");
  });
  origin6 = createServer((req, res) => {
    seen6.push(req.url ?? "");
    res.end("reached the host's loopback");
  });
  await new Promise<void>((r) => origin6.listen(0, "::", r));
  port6 = (origin6.address() as AddressInfo).port;
  echo = createNetServer((s) => s.on("error", () => {}).pipe(s));
  await new Promise<void>((r) => echo.listen(0, "0.0.0.0", r));
  echoPort = (echo.address() as AddressInfo).port;
  // 0.0.0.0 so that 127.0.0.2 would answer too: only the proxy may keep a sandbox from it.
  await new Promise<void>((r) => origin.listen(0, "0.0.0.0", r));
  port = (origin.address() as AddressInfo).port;
  proxy = new TrafficProxy({
    firstRequestTimeoutMs: 300,
    refuse: () => undefined,
    policyFor: (tag) => policies[tag] ?? `no egress rules for sandbox ${JSON.stringify(tag)}`,
    resolve: async (host) => {
      resolved.push(host);
      if (host === "rebind.test") return ["127.0.0.2", "127.0.0.1"];
      // ::1 first, where nothing listens: the proxy must go on to the next checked address.
      if (host === "localhost") return ["::1", "127.0.0.1"];
      throw Object.assign(new Error("not found"), { code: "ENOTFOUND" });
    },
  });
  dir = mkdtempSync(join(tmpdir(), "traffic-test-"));
  sock = join(dir, "proxy.sock");
  await proxy.listenTagged(sock);
});

afterAll(async () => {
  await proxy.close();
  origin.close();
  origin6.close();
  echo.close();
  rmSync(dir, { recursive: true, force: true });
});

/** Sends `tag` and then `payload` in one write (as a fast sandbox's bytes can arrive with the
 * relay's line) and collects everything until the proxy closes. */
function exchange(tag: string, payload: string, after?: (text: string) => string | undefined): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = connect(sock);
    let text = "";
    let sent = false;
    s.on("data", (c) => {
      text += String(c);
      const more = !sent && after?.(text);
      if (more) {
        sent = true;
        s.write(more);
      }
    });
    s.on("end", () => resolve(text)).on("error", reject);
    s.write(`${tag}\n${payload}`);
  });
}

/** What the proxy sends a relay child that offered a connection (tag `line`, then the client's
 * `payload`) until it closes, or until `done` holds (then the child's socket closes). */
function asRelayChild(line: string, payload: string, done: (t: string) => boolean): Promise<string> {
  return new Promise<string>((resolve, reject) => {
    const s = connect(sock);
    let text = "";
    s.on("data", (c) => {
      text += c.toString("latin1");
      if (done(text)) {
        s.destroy();
        resolve(text);
      }
    });
    s.on("end", () => resolve(text)).on("close", () => resolve(text)).on("error", reject);
    s.write(`${line}\n${payload}`);
  });
}

const get = (host: string) => `GET http://${host}:${port}/path?q=1 HTTP/1.1\r\nHost: ${host}:${port}\r\nConnection: close\r\n\r\n`;

describe("traffic-proxy", () => {
  it("forwards an allowed request by absolute URI to the address it checked", async () => {
    const reply = await exchange("strict", get("127.0.0.1"));
    expect(reply).toMatch(/^HTTP\/1.1 200/);
    expect(reply).toContain("hello from 127.0.0.1");
    expect(seen.at(-1)).toEqual({ host: `127.0.0.1:${port}`, url: "/path?q=1", by: "127.0.0.1" });
  });

  it("refuses a denied destination with 403 and the reason, without contacting it", async () => {
    const before = seen.length;
    const reply = await exchange("strict", get("127.0.0.2"));
    expect(reply).toMatch(/^HTTP\/1.1 403/);
    expect(reply).toContain('egress denied: 127.0.0.2 is denied by denyOut "0.0.0.0/0"');
    expect(seen.length).toBe(before);
  });

  it("CONNECT opens a tunnel to an allowed destination and is refused before any tunnel otherwise", async () => {
    const inner = `GET /tunnelled HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`;
    const ok = await exchange("strict", `CONNECT 127.0.0.1:${port} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n\r\n`, (t) => (t.includes("\r\n\r\n") ? inner : undefined));
    expect(ok).toMatch(/^HTTP\/1.1 200 Connection Established\r\n\r\nHTTP\/1.1 200/);
    expect(seen.at(-1)?.url).toBe("/tunnelled");

    const denied = await exchange("strict", `CONNECT 127.0.0.2:${port} HTTP/1.1\r\nHost: 127.0.0.2:${port}\r\n\r\n`);
    expect(denied).toMatch(/^HTTP\/1.1 403 Forbidden\r\n/);
    expect(denied).toContain("egress denied: 127.0.0.2 is denied");
    expect(denied).not.toContain("Connection Established");
  });

  it("a connection the relay offers back (\"<sandbox> *\"): decided at L3/L4, it is handed to the relay with the destination, what goes first each way and how much the proxy read; the proxy connects nowhere", async () => {
    const offer = (payload: string, done: (t: string) => boolean, tag = "strict") => asRelayChild(`${tag} *`, payload, done);
    const framed = /^S(\S+) (\d+) (\d+|-) (\d+) (\d+) (\d+)\n/;
    const parts = (t: string) => {
      const m = framed.exec(t)!;
      const [ok, fail, up] = [Number(m[4]), Number(m[5]), Number(m[6])];
      const body = t.slice(m[0].length);
      return { to: `${m[1]}:${m[2]}`, read: m[3] === "-" ? "-" : Number(m[3]), ok: body.slice(0, ok), fail: body.slice(ok, ok + fail), up: body.slice(ok + fail, ok + fail + up), complete: body.length >= ok + fail + up };
    };
    const before = seen.length;
    // CONNECT, with the client's first bytes right behind it (they go to the destination first).
    const connectReq = `CONNECT 127.0.0.1:${port} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n\r\n`;
    const tunnel = parts(await offer(`${connectReq}early`, (t) => framed.test(t) && parts(t).complete));
    expect(tunnel).toMatchObject({ to: `127.0.0.1:${port}`, read: connectReq.length + 5, ok: "HTTP/1.1 200 Connection Established\r\n\r\n", up: "early" });
    expect(tunnel.fail).toMatch(/^HTTP\/1.1 502 Bad Gateway\r\n/);
    // A plain GET without a body: the request as it goes upstream, closing after its answer, and
    // nothing of the client's after it ('-'): a request pipelined behind it was never checked.
    const plain = parts(await offer(get("127.0.0.1"), (t) => framed.test(t) && parts(t).complete));
    expect(plain).toMatchObject({ to: `127.0.0.1:${port}`, read: "-", ok: "" });
    expect(plain.up).toBe(`GET /path?q=1 HTTP/1.1\r\nhost: 127.0.0.1:${port}\r\nconnection: close\r\n\r\n`);
    const sneaked = `GET /other HTTP/1.1\r\nHost: not-checked.example\r\n\r\n`;
    const keptAlive = get("127.0.0.1").replace("Connection: close\r\n", "");
    const pipelined = parts(await offer(keptAlive + sneaked, (t) => framed.test(t) && parts(t).complete));
    expect(pipelined).toMatchObject({ to: `127.0.0.1:${port}`, read: "-", ok: "" });
    expect(pipelined.up).toBe(plain.up);
    expect(seen.length).toBe(before);
    // Handed back only with one IPv4 address, the one the relay dials and a rule change judges: a
    // name with an IPv6 address (the relay dials IPv4 only) or with several (the relay could reach
    // another than the one tracked) stays with the proxy, which tries each in turn.
    expect(await offer(`GET http://localhost:${port}/dual HTTP/1.1\r\nHost: localhost:${port}\r\n\r\n`, (t) => t.includes("hello from") || framed.test(t), "byName")).toMatch(/^RHTTP\/1.1 200/);
    expect(seen.at(-1)?.url).toBe("/dual");
    const twoTunnel = await new Promise<string>((resolve, reject) => {
      const s = connect(sock);
      let text = "";
      s.on("data", (c) => {
        text += c.toString("latin1");
        if (text === "RHTTP/1.1 200 Connection Established\r\n\r\n") s.write(`GET /two HTTP/1.1\r\nHost: rebind.test\r\n\r\n`);
        if (text.includes("hello from") || text.startsWith("S")) {
          s.destroy();
          resolve(text);
        }
      });
      s.on("end", () => resolve(text)).on("error", reject);
      s.write(`loopback4 *\nCONNECT rebind.test:${port} HTTP/1.1\r\nHost: rebind.test:${port}\r\n\r\n`);
    });
    expect(twoTunnel).toMatch(/^RHTTP\/1.1 200 Connection Established\r\n\r\nHTTP\/1.1 200/);
    expect(seen.at(-1)?.url).toBe("/two");
    // Denied: it stays with the proxy ('R'), which answers 403.
    const denied = await offer(get("127.0.0.2"), (t) => t.includes("egress denied"));
    expect(denied).toMatch(/^RHTTP\/1.1 403/);
    // A request with a body stays with the proxy too, and is forwarded by it.
    const post = `POST http://127.0.0.1:${port}/posted HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc`;
    expect(await offer(post, (t) => t.includes("hello from"))).toMatch(/^RHTTP\/1.1 200/);
    expect(seen.at(-1)?.url).toBe("/posted");
    // The child holds the client's bytes back beyond its first MiB until it hears: a request whose
    // body the destination waits for hears 'R' as soon as it is decided, before the body is sent.
    const upload = await new Promise<string>((resolve, reject) => {
      const s = connect(sock);
      let text = "";
      s.on("data", (c) => {
        if (text === "" && String(c).startsWith("R")) s.write("xyz");
        text += c.toString("latin1");
        if (text.includes("hello from") || text.startsWith("S")) {
          s.destroy();
          resolve(text);
        }
      });
      s.on("error", reject);
      s.write(`strict *\nPOST http://127.0.0.1:${port}/uploaded HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nContent-Length: 3\r\nConnection: close\r\n\r\n`);
    });
    expect(upload).toMatch(/^RHTTP\/1.1 200/);
    expect(seen.at(-1)?.url).toBe("/uploaded");
    // A relay that sends no request in time hears nothing: its socket just ends.
    expect(await offer("", () => false)).toBe("");
  });

  it("a redirected connection the relay offers back (\"<sandbox> <ip> <port> *\"): allowed at L3/L4, handed back to that very ip:port with the bytes the proxy read; whatever the sandbox sends names no other", async () => {
    const offer = (tag: string, ip: string, p: number, payload: string, done: (t: string) => boolean = () => false) => asRelayChild(`${tag} ${ip} ${p} *`, payload, done);
    const line = /^S(\S+) (\d+) (\d+) 0 0 (\d+)\n/;
    const complete = (t: string) => line.test(t) && t.length >= line.exec(t)![0].length + Number(line.exec(t)![4]);
    const before = seen.length;
    // Bytes that would name another destination, to the proxy and to an S-reading relay alike.
    const forged = `S127.0.0.2 ${port} 0 0 0 0\nCONNECT 127.0.0.2:${port} HTTP/1.1\r\nHost: 127.0.0.2\r\n\r\n`;
    const handed = await offer("strict", "127.0.0.1", port, forged, complete);
    const m = line.exec(handed)!;
    expect({ to: `${m[1]}:${m[2]}`, read: Number(m[3]) }).toEqual({ to: `127.0.0.1:${port}`, read: forged.length });
    expect(handed.slice(m[0].length)).toBe(forged);
    // The proxy itself connected nowhere (the relay's child does).
    expect(seen.length).toBe(before);
    // Denied: never handed back, whatever it sends; plain HTTP hears 'R' and the 403 of the proxy.
    expect(await offer("strict", "127.0.0.2", port, forged)).toBe("");
    expect(await offer("strict", "127.0.0.2", port, get("127.0.0.1"), (t) => t.includes("egress denied"))).toMatch(/^RHTTP\/1.1 403/);
    expect(seen.length).toBe(before);
  });

  it("with handoff off, an offered connection (HTTP_PROXY or redirected) stays with the proxy: 'R', then the proxy's own bytes", async () => {
    const dir2 = mkdtempSync(join(tmpdir(), "traffic-nohandoff-"));
    const off = new TrafficProxy({ handoff: false, refuse: () => undefined, policyFor: () => policies.strict! });
    await off.listenTagged(join(dir2, "p.sock"));
    const talk = (line: string, payload: string) =>
      new Promise<string>((resolve, reject) => {
        const s = connect(join(dir2, "p.sock"));
        let text = "";
        s.on("data", (c) => {
          text += c.toString("latin1");
          if (text.includes("hello from")) {
            s.destroy();
            resolve(text);
          }
        });
        s.on("close", () => resolve(text)).on("error", reject);
        s.write(`${line}\n${payload}`);
      });
    try {
      expect(await talk("strict *", get("127.0.0.1"))).toMatch(/^RHTTP\/1.1 200/);
      expect(await talk(`strict 127.0.0.1 ${port} *`, `GET /r HTTP/1.1\r\nHost: x\r\n\r\n`)).toMatch(/^RHTTP\/1.1 200/);
      expect(seen.at(-1)?.url).toBe("/r");
    } finally {
      await off.close();
      rmSync(dir2, { recursive: true, force: true });
    }
  });

  it("resolves a name once and connects only to an address that passed (no second lookup)", async () => {
    resolved.length = 0;
    const reply = await exchange("strict", get("rebind.test"));
    expect(reply).toContain("hello from 127.0.0.1");
    expect(resolved).toEqual(["rebind.test"]);
    expect(seen.at(-1)).toMatchObject({ host: `rebind.test:${port}`, by: "127.0.0.1" });
  });

  it("a domain rule allows the name; an unresolvable name is a 502, not a denial", async () => {
    expect(await exchange("byName", get("localhost"))).toContain("hello from 127.0.0.1");
    expect(await exchange("byName", get("127.0.0.1"))).toMatch(/^HTTP\/1.1 403/);
    const missing = await exchange("strict", get("missing.test"));
    expect(missing).toMatch(/^HTTP\/1.1 502/);
    expect(missing).toContain("cannot resolve missing.test: ENOTFOUND");
  });

  it("takes the sandbox from the relay's line only: an unknown one is refused everything, a forged line after it changes nothing", async () => {
    const reply = await exchange("nobody", get("127.0.0.1"));
    expect(reply).toMatch(/^HTTP\/1.1 403/);
    expect(reply).toContain('no egress rules for sandbox "nobody"');
    // The sandbox's own bytes start after the relay's line: one that names a sandbox whose rules
    // allow 127.0.0.1 is just a malformed request of sandbox "nobody".
    const before = seen.length;
    const forged = await exchange("nobody", `strict\n${get("127.0.0.1")}`);
    expect(forged).not.toContain("hello from");
    expect(seen.length).toBe(before);
    // And a second request on the same connection is still "nobody"'s.
    const second = await exchange("nobody", `${get("127.0.0.1").replace("Connection: close\r\n", "")}strict\n${get("127.0.0.1")}`);
    expect(second).not.toContain("hello from");
    expect(seen.length).toBe(before);
  });

  it("closes a connection that sends no request in time (each one holds a relay process)", async () => {
    const s = connect(sock);
    s.write("strict\n");
    const t0 = Date.now();
    const closed = await new Promise<boolean>((resolve) => {
      s.on("close", () => resolve(true)).on("error", () => {}).resume();
      setTimeout(() => resolve(false), 3000);
    });
    s.destroy();
    expect(closed).toBe(true);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(250);
  });

  it("0.0.0.0, 0 and [::] never reach the host's loopback, even where loopback is only denied", async () => {
    for (const host of ["0.0.0.0", "0", "[::]", "[::ffff:0.0.0.0]"]) {
      const fwd = await exchange("denyLo", `GET http://${host}:${port6}/x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`);
      expect(fwd, host).toMatch(/^HTTP\/1.1 403/);
      const tunnel = await exchange("denyLo", `CONNECT ${host}:${port6} HTTP/1.1\r\nHost: x\r\n\r\n`);
      expect(tunnel, host).toMatch(/^HTTP\/1.1 (403|502)/);
    }
    expect(seen6).toEqual([]);
  });

  it("IPv6 does not walk around an IPv4 deny list: [::1] is refused when 127.0.0.0/8 is denied", async () => {
    const reply = await exchange("denyLo4", `GET http://[::1]:${port6}/v6 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`);
    expect(reply).toMatch(/^HTTP\/1.1 403/);
    expect(reply).toContain("::1 is IPv6, which passes only when allowOut admits it");
    expect(seen6).toEqual([]);
  });

  it("refuses a name without looking it up when no address could pass (no DNS channel)", async () => {
    resolved.length = 0;
    const reply = await exchange("byName", `CONNECT c2VjcmV0.exfil.test:443 HTTP/1.1\r\nHost: x\r\n\r\n`);
    expect(reply).toMatch(/^HTTP\/1.1 403/);
    expect(reply).toContain("not allowed by name, and denyOut covers every address (not resolved)");
    expect(resolved).toEqual([]);
    // Under an allow list with addresses the name must be resolved: that channel remains.
    await exchange("strict", `CONNECT c2VjcmV0.exfil.test:443 HTTP/1.1\r\nHost: x\r\n\r\n`);
    expect(resolved).toEqual(["c2vjcmv0.exfil.test"]);
  });

  it("a rule change ends the open tunnels the new rules deny, and all of them when no rules are left", async () => {
    policies.mutable = policies.strict!;
    const open = (ip: string) =>
      new Promise<{ s: Socket; said: (text: string) => Promise<string>; closed: Promise<void> }>((resolve) => {
        const s = connect(sock);
        let buf = "";
        let waiting: (() => void) | undefined;
        const closed = new Promise<void>((r) => s.once("close", () => r()));
        s.on("data", (c) => {
          buf += String(c);
          waiting?.();
        }).on("error", () => {});
        const said = (text: string) =>
          new Promise<string>((r) => {
            buf = "";
            waiting = () => buf.includes(text) && r(buf);
            s.write(text);
          });
        waiting = () => buf.includes("\r\n\r\n") && resolve({ s, said, closed });
        s.write(`mutable\nCONNECT ${ip}:${echoPort} HTTP/1.1\r\nHost: x\r\n\r\n`);
      });
    const one = await open("127.0.0.1");
    const two = await open("127.0.0.1");
    expect(await one.said("ping")).toBe("ping");
    // Rules that still allow 127.0.0.1 keep both.
    policies.mutable = compilePolicy({ allowOut: ["127.0.0.0/8"], denyOut: ["0.0.0.0/0"] });
    expect(proxy.revalidate("mutable")).toBe(0);
    expect(await two.said("pong")).toBe("pong");
    // Rules that deny it end them.
    policies.mutable = compilePolicy({ allowOut: ["127.0.0.2"], denyOut: ["0.0.0.0/0"] });
    const three = await open("127.0.0.2");
    expect(proxy.revalidate("mutable")).toBe(2);
    await Promise.all([one.closed, two.closed]);
    expect(await three.said("still")).toBe("still");
    // No rules at all (the sandbox moved to no network): nothing stays open.
    delete policies.mutable;
    expect(proxy.revalidate("mutable")).toBe(1);
    await three.closed;
  });

  it("an upgrade reaches the destination with the Host the rules were applied to, not the client's", async () => {
    const reply = await exchange("strict", `GET http://127.0.0.1:${port}/up HTTP/1.1\r\nHost: elsewhere.example\r\nUpgrade: test\r\nConnection: Upgrade\r\n\r\n`);
    expect(reply).toMatch(/^HTTP\/1.1 101/);
    expect(seen.at(-1)).toMatchObject({ host: `127.0.0.1:${port}`, url: "/up" });
  });

  it("answers a request that is not for a proxy with 400", async () => {
    const reply = await exchange("strict", "GET /local HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    expect(reply).toMatch(/^HTTP\/1.1 400/);
    expect(reply).toContain("absolute URI");
  });

  it("the TCP form serves one sandbox's rules", async () => {
    const single = new TrafficProxy({ policyFor: () => policies.strict! });
    const p = await single.listenTcp(0, "127.0.0.1");
    try {
      const res = await fetch(`http://127.0.0.1:${p}/`, { method: "GET", headers: {} }).catch(() => undefined);
      expect(res?.status).toBe(400);
      const s = connect(p, "127.0.0.1");
      const text = await new Promise<string>((resolve) => {
        let t = "";
        s.on("data", (c) => (t += String(c))).on("end", () => resolve(t));
        s.write(get("127.0.0.2"));
      });
      expect(text).toMatch(/^HTTP\/1.1 403/);
    } finally {
      await single.close();
    }
  });
});

/** What one request through `p` (a TCP listener) gets back. */
function viaTcp(p: number, payload: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = connect(p, "127.0.0.1");
    let t = "";
    s.on("data", (c) => (t += String(c))).on("end", () => resolve(t)).on("error", reject);
    s.write(payload);
  });
}

describe("what the traffic-proxy never reaches, whatever the rules say", () => {
  const allowAll = compilePolicy({ allowOut: ["0.0.0.0/0", "localhost"], denyOut: [] });

  it("by default (the sidecar): loopback in every form, and names that resolve there, are a 403 naming why", async () => {
    const single = new TrafficProxy({ policyFor: () => allowAll, resolve: async () => ["::1", "127.0.0.1"] });
    const p = await single.listenTcp(0, "127.0.0.1");
    try {
      const before = seen.length;
      for (const host of ["127.0.0.1", "127.0.0.2", "[::1]", "[::ffff:127.0.0.1]", "[::127.0.0.1]", "localhost"]) {
        const fwd = await viaTcp(p, `GET http://${host}:${port}/ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`);
        expect(fwd, host).toMatch(/^HTTP\/1.1 403/);
        expect(fwd, host).toContain("is loopback, never reached through the proxy");
        const tunnel = await viaTcp(p, `CONNECT ${host}:${echoPort} HTTP/1.1\r\nHost: x\r\n\r\n`);
        expect(tunnel, host).toMatch(/^HTTP\/1.1 403 Forbidden/);
      }
      expect(await viaTcp(p, `GET http://169.254.169.254/latest/meta-data/ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`)).toContain(
        "egress denied: 169.254.169.254 is link-local",
      );
      expect(seen.length).toBe(before);
    } finally {
      await single.close();
    }
  });

  it("in the agent: also the host's own addresses and the sandbox network (other sandboxes), even when allowed by name", async () => {
    const own = Object.values(networkInterfaces()).flatMap((l) => l ?? []).find((a) => a.family === "IPv4" && !a.internal)?.address;
    expect(own, "this host has a non-loopback IPv4 address").toBeDefined();
    const agent = new TrafficProxy({
      policyFor: () => compilePolicy({ allowOut: ["0.0.0.0/0", "sandbox.test"], denyOut: [] }),
      refuse: refuseHost({ subnets: ["10.88.0.0/16"] }),
      resolve: async () => ["10.88.0.7"],
      connectTimeoutMs: 500,
    });
    const p = await agent.listenTcp(0, "127.0.0.1");
    try {
      const req = (host: string) => viaTcp(p, `GET http://${host}:${port}/ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`);
      expect(await req(own!)).toContain(`egress denied: ${own} is an address of the agent's host, never reached through the proxy`);
      expect(await req("10.88.3.4")).toContain("egress denied: 10.88.3.4 is in the sandbox network 10.88.0.0/16 (other sandboxes)");
      expect(await req("sandbox.test")).toContain("egress denied: sandbox.test (10.88.0.7) is in the sandbox network 10.88.0.0/16");
      expect(await req("127.0.0.1")).toContain("is loopback");
    } finally {
      await agent.close();
    }
  });
});
