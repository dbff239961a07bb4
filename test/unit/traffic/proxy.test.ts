// The traffic-proxy against real loopback servers: what it forwards, what it refuses and how
// it knows whose connection it is.
import { mkdtempSync, rmSync } from "node:fs";
import { createServer, type IncomingMessage, type Server } from "node:http";
import { connect, type AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { compilePolicy } from "../../../controllers/traffic/policy.ts";
import { TrafficProxy } from "../../../controllers/traffic/proxy.ts";

let origin: Server;
let port = 0;
const seen: { host: string | undefined; url: string | undefined; by: string }[] = [];
const resolved: string[] = [];
let proxy: TrafficProxy;
let dir = "";
let sock = "";

const policies: Record<string, ReturnType<typeof compilePolicy>> = {
  strict: compilePolicy({ allowOut: ["127.0.0.1"], denyOut: ["0.0.0.0/0"] }),
  byName: compilePolicy({ allowOut: ["localhost"], denyOut: ["0.0.0.0/0"] }),
};

beforeAll(async () => {
  origin = createServer((req: IncomingMessage, res) => {
    seen.push({ host: req.headers.host, url: req.url, by: req.socket.localAddress ?? "" });
    res.end(`hello from ${req.socket.localAddress}`);
  });
  // 0.0.0.0 so that 127.0.0.2 would answer too: only the proxy may keep a sandbox from it.
  await new Promise<void>((r) => origin.listen(0, "0.0.0.0", r));
  port = (origin.address() as AddressInfo).port;
  proxy = new TrafficProxy({
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
    const missing = await exchange("byName", get("missing.test"));
    expect(missing).toMatch(/^HTTP\/1.1 502/);
    expect(missing).toContain("cannot resolve missing.test: ENOTFOUND");
  });

  it("takes the sandbox from the relay's line only: an unknown one is refused everything", async () => {
    const reply = await exchange("nobody", get("127.0.0.1"));
    expect(reply).toMatch(/^HTTP\/1.1 403/);
    expect(reply).toContain('no egress rules for sandbox "nobody"');
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
