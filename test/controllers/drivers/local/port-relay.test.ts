// Inbound connections to user ports of sandboxes without network (the port relay): bytes pass
// both ways, a port nobody listens on is refused with a reason, the relay reaches only the
// sandbox's own loopback, and the sandbox still cannot reach out.
import { execFileSync } from "node:child_process";
import { createServer, type Server, type Socket } from "node:net";
import { mkdtempSync, rmSync } from "node:fs";
import { networkInterfaces, tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, describe, expect, it } from "vitest";
import type { DesiredSandbox } from "../../../../controllers/drivers/driver.ts";
import { LocalDriver } from "../../../../controllers/drivers/local/local-driver.ts";
import { PortRelay } from "../../../../controllers/drivers/local/port-relay.ts";
import { procRef } from "../../../../controllers/drivers/local/holder.ts";
import { layoutFor } from "../../../../controllers/drivers/local/layout.ts";
import { readRecord } from "../../../../controllers/drivers/local/records.ts";
import { TrafficProxy } from "../../../../controllers/traffic/proxy.ts";
import { desiredSandbox, destroyAll, shIn } from "./fixture.ts";

const dataDir = mkdtempSync(join(tmpdir(), "local-port-relay-"));
const driver = new LocalDriver({ dataDir, cgroupName: `kruise-test-${process.pid}-relay` });
let hostServer: Server | undefined;

function desired(over: Partial<DesiredSandbox> = {}): DesiredSandbox {
  return desiredSandbox("pr", { allowInternetAccess: false, ...over });
}

function sh(id: string, script: string) {
  return shIn(driver, id, script);
}

/** A line echo server inside the sandbox on `port`, started in the background. */
async function startEcho(id: string, port: number): Promise<void> {
  const py = `import socket\\ns=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", ${port})); s.listen(8)\\nwhile True:\\n  c,_=s.accept(); d=c.recv(100); c.sendall(b"echo:"+d); c.shutdown(socket.SHUT_WR); c.recv(100); c.close()`;
  await sh(id, `printf '${py}' > /tmp/echo.py; setsid python3 /tmp/echo.py >/dev/null 2>&1 < /dev/null &`);
}

function roundTrip(s: Socket, text: string): Promise<string> {
  return new Promise((resolve, reject) => {
    let got = "";
    s.on("data", (c) => (got += String(c)));
    s.once("end", () => {
      s.end();
      resolve(got);
    });
    s.once("error", reject);
    s.write(text);
  });
}

afterAll(async () => {
  hostServer?.close();
  await destroyAll(driver, dataDir);
});

describe("user ports of sandboxes without network", () => {
  it("relays a connection to a port on the sandbox's own loopback, and refuses a closed one with a reason", async () => {
    const d = desired();
    await driver.ensure(d);
    await expect(driver.connectUserPort(d.id, 8000)).rejects.toThrow(/connect to port 8000: Connection refused/);
    await startEcho(d.id, 8000);
    let answer = "";
    for (const deadline = Date.now() + 10_000; Date.now() < deadline && !answer; ) {
      const s = await driver.connectUserPort(d.id, 8000).catch(() => undefined);
      if (s) answer = await roundTrip(s, "hello");
      else await sleep(100);
    }
    expect(answer).toBe("echo:hello");
    // Still no way out: the host's loopback is not the sandbox's.
    const out = await sh(d.id, `python3 -c 'import socket; s=socket.socket(); s.settimeout(2); print(s.connect_ex(("127.0.0.1", 1)))'`);
    expect(out.stdout.trim()).not.toBe("0");
  });

  it("does not reach a port of the host's loopback through the relay", async () => {
    // A host server on a port the sandbox does not listen on: the relay must not find it.
    hostServer = createServer((c) => c.end("host"));
    await new Promise<void>((ok) => hostServer!.listen(0, "127.0.0.1", ok));
    const port = (hostServer.address() as { port: number }).port;
    const d = desired();
    await driver.ensure(d);
    await expect(driver.connectUserPort(d.id, port)).rejects.toThrow(/Connection refused/);
    // Asked for a process sharing the host's network (this one), the relay refuses outright.
    const relay = new PortRelay();
    try {
      await expect(relay.connect(procRef(process.pid)!, port)).rejects.toThrow(/shares the host network/);
      await expect(relay.connect({ pid: process.pid, start: "1" }, port)).rejects.toThrow(/not running/);
    } finally {
      relay.dispose();
    }
  });

  it("refuses an egress listener's port as a user port (it would serve outsiders under the sandbox's rules)", async () => {
    const d = desired();
    await driver.ensure(d);
    const nsInit = readRecord(layoutFor(dataDir, d.id).record)!.nsInit!;
    const relay = new PortRelay({ proxySocket: join(dataDir, "no-proxy.sock") });
    try {
      await relay.listenEgress(d.id, nsInit, 3999, { cgroupProcs: [], maxConnections: 4 });
      await expect(relay.connect(nsInit, 3999)).rejects.toThrow("port 3999 is the sandbox's egress proxy, not a user port");
      await relay.closeEgress(d.id);
      await expect(relay.connect(nsInit, 3999)).rejects.toThrow(/connect to port 3999: Connection refused/);
    } finally {
      relay.dispose();
    }
  });

  it("an egress connection the proxy closes unheard (no request in time) leaves no relay process, though the sandbox keeps its end", async () => {
    const d = desired();
    await driver.ensure(d);
    const nsInit = readRecord(layoutFor(dataDir, d.id).record)!.nsInit!;
    const dir = mkdtempSync(join(tmpdir(), "relay-proxy-"));
    const proxySocket = join(dir, "proxy.sock");
    const proxy = new TrafficProxy({ policyFor: () => "no rules", firstRequestTimeoutMs: 300 });
    await proxy.listenTagged(proxySocket);
    const relay = new PortRelay({ proxySocket });
    /** How many children that relay (the one started with this proxy socket) has. */
    const count = () => {
      try {
        const pid = execFileSync("pgrep", ["-f", "-P", String(process.pid), proxySocket], { encoding: "utf8" }).trim();
        return execFileSync("pgrep", ["-P", pid], { encoding: "utf8" }).trim().split("\n").length;
      } catch {
        return 0; // pgrep found none
      }
    };
    try {
      await relay.listenEgress(d.id, nsInit, 3998, { cgroupProcs: [], maxConnections: 8 });
      const py = `import socket, time\nss = [socket.create_connection(("127.0.0.1", 3998)) for i in range(3)]\ntime.sleep(30)`;
      await sh(d.id, `nohup python3 -c '${py}' >/dev/null 2>&1 < /dev/null &`);
      let seen = 0;
      for (const deadline = Date.now() + 2000; Date.now() < deadline && seen < 3; await sleep(20)) seen = Math.max(seen, count());
      expect(seen).toBe(3);
      let left = seen;
      // Generous for a loaded CI machine (a 2 s window failed once beside benchmarks); the sandbox
      // holds its ends for 30 s, so only the proxy's close (at 300 ms) can end them in this window.
      for (const deadline = Date.now() + 8000; Date.now() < deadline && left > 0; await sleep(50)) left = count();
      expect(left).toBe(0);
    } finally {
      relay.dispose();
      await proxy.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("a redirected connection is handed back only to where the kernel says it was going, whatever the proxy's line names", async () => {
    const d = desired();
    await driver.ensure(d);
    const nsInit = readRecord(layoutFor(dataDir, d.id).record)!.nsInit!;
    // A host address that is not loopback (the sandbox's own loopback is never redirected).
    const hostIp = Object.values(networkInterfaces()).flat().find((i) => i && i.family === "IPv4" && !i.internal)!.address;
    let reached = 0;
    const target = createServer((c) => {
      reached++;
      c.on("error", () => {}).end("host here");
    });
    await new Promise<void>((r) => target.listen(0, "0.0.0.0", r));
    const targetPort = (target.address() as { port: number }).port;
    const dir = mkdtempSync(join(tmpdir(), "relay-handback-"));
    const proxySocket = join(dir, "proxy.sock");
    // A proxy that hands every offered connection back to `sendTo` (what it said: `lines`).
    let sendTo = "";
    const lines: string[] = [];
    const proxy = createServer((c) => {
      c.on("error", () => {}).once("data", (b) => {
        lines.push(String(b).split("\n")[0]!);
        c.write(`S${sendTo} ${targetPort} 0 0 0 0\n`);
      });
    });
    await new Promise<void>((r) => proxy.listen(proxySocket, r));
    const relay = new PortRelay({ proxySocket });
    const fetch = () => sh(d.id, `python3 -c 'import socket; s=socket.create_connection(("${hostIp}", ${targetPort}), 3); s.settimeout(3); print(s.recv(100))'`).then((r) => r.stdout.trim());
    try {
      await relay.listenEgress(d.id, nsInit, 3997, { cgroupProcs: [], maxConnections: 8 });
      sendTo = hostIp;
      expect(await fetch()).toBe("b'host here'");
      expect(lines).toEqual([`${d.id} ${hostIp} ${targetPort} *`]);
      expect(reached).toBe(1);
      // Another address than the original destination (here the host's loopback): not dialled.
      sendTo = "127.0.0.1";
      expect(await fetch()).toBe("b''");
      expect(reached).toBe(1);
    } finally {
      relay.dispose();
      proxy.close();
      target.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("refuses sandboxes that do not run", async () => {
    await expect(driver.connectUserPort("nosuchsandbox", 8000)).rejects.toThrow(/not running/);
    await expect(driver.connectUserPort("nosuchsandbox", 0)).rejects.toThrow(/invalid port/);
  });

  it("keeps no process per sandbox: one relay serves every sandbox", async () => {
    const a = desired();
    const b = desired();
    await Promise.all([driver.ensure(a), driver.ensure(b)]);
    await Promise.all([startEcho(a.id, 9000), startEcho(b.id, 9000)]);
    const answers: string[] = [];
    for (const [id, text] of [[a.id, "a"], [b.id, "b"]] as const) {
      for (const deadline = Date.now() + 10_000; Date.now() < deadline; await sleep(100)) {
        const s = await driver.connectUserPort(id, 9000).catch(() => undefined);
        if (s) {
          answers.push(await roundTrip(s, text));
          break;
        }
      }
    }
    expect(answers).toEqual(["echo:a", "echo:b"]);
    // Children of this process running the relay script: the one relay of `driver`.
    const relays = execFileSync("pgrep", ["-f", "-P", String(process.pid), "port-relay.pl"], { encoding: "utf8" }).trim().split("\n");
    expect(relays).toHaveLength(1);
    // A relay that died is started again by the next connection.
    process.kill(Number(relays[0]), "SIGKILL");
    await sleep(50);
    expect(await roundTrip(await driver.connectUserPort(a.id, 9000), "again")).toBe("echo:again");
  });
});

