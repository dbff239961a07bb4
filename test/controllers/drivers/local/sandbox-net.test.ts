// Sandboxes with internet access have a network namespace of their own (veth, bridge, NAT): each
// sandbox's port 8000 is its own, host services and other sandboxes are out of reach, "the
// internet" (a namespace standing in for it) is reached through NAT, and the address survives
// an agent restart, a Stop pause and a change of network settings.
import { connect, createServer, type Server } from "node:net";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { request } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from "vitest";
import type { DesiredSandbox } from "../../../../controllers/drivers/driver.ts";
import { LocalDriver } from "../../../../controllers/drivers/local/local-driver.ts";
import { procRef } from "../../../../controllers/drivers/local/holder.ts";
import { layoutFor } from "../../../../controllers/drivers/local/layout.ts";
import { PortRelay } from "../../../../controllers/drivers/local/port-relay.ts";
import { readRecord } from "../../../../controllers/drivers/local/records.ts";
import { METADATA_IP, startOutside, type Outside } from "./outside-net.ts";

const dataDir = mkdtempSync(join(tmpdir(), "local-sandbox-net-"));
const cgroupName = `kruise-test-${process.pid}-net`;
let driver = new LocalDriver({ dataDir, cgroupName });
const USER = { name: "user", uid: 1000, gid: 1000, home: "/home/user", shell: "/bin/bash" };
let seq = 0;
let outside: Outside;
let hostService: Server;
let hostPort = 0;

function desired(over: Partial<DesiredSandbox> = {}): DesiredSandbox {
  return { id: `sn${process.pid}x${seq++}`, generation: 1, template: "base", state: "Running", pauseStrategy: "Freeze", resources: { cpuCount: 1, memoryMB: 256 }, allowInternetAccess: true, ...over };
}

async function sh(id: string, script: string): Promise<string> {
  const r = await driver.exec(id, { cmd: "/bin/bash", args: ["-c", script], cwd: USER.home, env: { PATH: "/usr/bin:/bin" }, user: USER }, { timeoutMs: 20_000 });
  return r.stdout.trim();
}

/** connect_ex from inside the sandbox: "0" when it connected, an errno (or "timeout") otherwise. */
const tcpFrom = (id: string, ip: string, port: number) =>
  sh(id, `python3 -c 'import socket; s=socket.socket(); s.settimeout(1)
try: print(s.connect_ex(("${ip}", ${port})))
except OSError as e: print("timeout")'`);

/** A web server in the sandbox on `port` serving `text`, bound to `bind`. */
async function serve(id: string, port: number, text: string, bind = "0.0.0.0"): Promise<void> {
  await sh(id, `mkdir -p /tmp/w${port} && echo -n '${text}' > /tmp/w${port}/index.html && cd /tmp/w${port} && (setsid python3 -m http.server ${port} --bind ${bind} >/dev/null 2>&1 < /dev/null &)`);
}

/** GET / through driver.connectUserPort, as the agent's ingress does; retried while the server starts. */
async function viaUserPort(id: string, port: number, timeoutMs = 10_000): Promise<string> {
  let last: unknown;
  for (const deadline = Date.now() + timeoutMs; Date.now() < deadline; await sleep(100)) {
    try {
      const socket = await driver.connectUserPort(id, port);
      return await new Promise<string>((resolve, reject) => {
        const req = request({ createConnection: () => socket, path: "/index.html", headers: { connection: "close" } }, (res) => {
          let body = "";
          res.on("data", (c) => (body += String(c)));
          res.on("end", () => resolve(body));
        });
        req.on("error", reject);
        req.end();
      });
    } catch (err) {
      last = err;
    }
  }
  throw last;
}

const recordOf = (id: string) => readRecord(layoutFor(dataDir, id).record)!;

async function gone(path: string): Promise<boolean> {
  for (const deadline = Date.now() + 5000; Date.now() < deadline; await sleep(50)) if (!existsSync(path)) return true;
  return false;
}

beforeAll(async () => {
  outside = await startOutside({ metadata: true });
  hostService = createServer((s) => s.on("error", () => {}).end("host secret\n"));
  await new Promise<void>((ok) => hostService.listen(0, "0.0.0.0", ok));
  hostPort = (hostService.address() as { port: number }).port;
});

afterAll(async () => {
  hostService?.close();
  outside?.stop();
  for (const s of await driver.list()) await driver.destroy(s.id);
  driver.dispose();
  rmSync(dataDir, { recursive: true, force: true });
});

describe("sandboxes with internet access in a network namespace of their own", () => {
  it("two sandboxes each serve port 8000, and each one's port reaches its own server", async () => {
    const [a, b] = [desired(), desired()];
    await Promise.all([driver.ensure(a), driver.ensure(b)]);
    await serve(a.id, 8000, "page of A");
    await serve(b.id, 8000, "page of B");
    expect(await viaUserPort(a.id, 8000)).toBe("page of A");
    expect(await viaUserPort(b.id, 8000)).toBe("page of B");
    expect(recordOf(a.id).net!.address).not.toBe(recordOf(b.id).net!.address);
    // A server bound to the sandbox's loopback only answers too (through the port relay).
    await serve(a.id, 8001, "loopback of A", "127.0.0.1");
    expect(await viaUserPort(a.id, 8001)).toBe("loopback of A");
  });

  it("host services are out of reach: through the sandbox's port, from inside, at the bridge and host addresses", async () => {
    const d = desired();
    await driver.ensure(d);
    await expect(driver.connectUserPort(d.id, hostPort)).rejects.toThrow(/Connection refused/);
    expect(await tcpFrom(d.id, "127.0.0.1", hostPort)).not.toBe("0");
    const gateway = (await sh(d.id, "ip route show default")).split(" ")[2]!;
    expect(gateway).toMatch(/^10\.88\./);
    expect(await tcpFrom(d.id, gateway, hostPort)).not.toBe("0");
    expect(await tcpFrom(d.id, "192.0.2.2", hostPort)).not.toBe("0");
    expect(await tcpFrom(d.id, outside.hostIp, hostPort)).not.toBe("0");
    // The host itself does reach the service at those addresses: the rules make the difference.
    expect(await hostConnects(gateway, hostPort)).toBe(true);
  });

  it("a sandbox cannot reach another sandbox's address", async () => {
    const [a, b] = [desired(), desired()];
    await Promise.all([driver.ensure(a), driver.ensure(b)]);
    await serve(b.id, 8000, "page of B");
    expect(await viaUserPort(b.id, 8000)).toBe("page of B");
    expect(await tcpFrom(a.id, recordOf(b.id).net!.address, 8000)).not.toBe("0");
  });

  it("reaches the internet through NAT (the server sees the host's address), but not the metadata address", async () => {
    const d = desired();
    await driver.ensure(d);
    expect(await sh(d.id, `curl -s -m 5 http://${outside.ip}/`)).toBe(`outside saw ${outside.hostIp}`);
    expect(await hostConnects(METADATA_IP, 80)).toBe(true);
    expect(await tcpFrom(d.id, METADATA_IP, 80)).not.toBe("0");
  });

  it("keeps its address and user ports across an agent restart; destroy leaves no veth and frees the address", async () => {
    const d = desired();
    await driver.ensure(d);
    await serve(d.id, 8000, "before restart");
    const before = recordOf(d.id).net!;
    expect(existsSync(`/sys/class/net/${before.veth}`)).toBe(true);
    driver.dispose();
    driver = new LocalDriver({ dataDir, cgroupName });
    await driver.ensure(d);
    expect(recordOf(d.id).net).toEqual(before);
    expect(await viaUserPort(d.id, 8000)).toBe("before restart");
    expect(await sh(d.id, `curl -s -m 5 http://${outside.ip}/`)).toBe(`outside saw ${outside.hostIp}`);
    await driver.destroy(d.id);
    expect(await gone(`/sys/class/net/${before.veth}`)).toBe(true);
    expect(existsSync(`/run/kruise-net/kruise0/${before.address}`)).toBe(false);
  });

  it("a Stop pause and resume keeps the address; Freeze keeps serving after thaw", async () => {
    const d = desired({ pauseStrategy: "Stop" });
    await driver.ensure(d);
    const first = recordOf(d.id).net!;
    await driver.ensure({ ...d, generation: 2, state: "Paused" });
    expect(await gone(`/sys/class/net/${first.veth}`)).toBe(true);
    await driver.ensure({ ...d, generation: 3, state: "Running" });
    const second = recordOf(d.id).net!;
    expect(second.address).toBe(first.address);
    expect(second.veth).not.toBe(first.veth);
    await serve(d.id, 8000, "resumed");
    expect(await viaUserPort(d.id, 8000)).toBe("resumed");

    const f = desired();
    await driver.ensure(f);
    await serve(f.id, 8000, "thawed");
    expect(await viaUserPort(f.id, 8000)).toBe("thawed");
    await driver.ensure({ ...f, generation: 2, state: "Paused" });
    await driver.ensure({ ...f, generation: 3, state: "Running" });
    expect(await viaUserPort(f.id, 8000)).toBe("thawed");
  });

  it("a sandbox moved to egress rules or to no network loses its veth, without a new holder, and gets it back", async () => {
    const d = desired();
    await driver.ensure(d);
    const { nsInit, net } = recordOf(d.id);
    await driver.ensure({ ...d, generation: 2, egress: { allowOut: [], denyOut: ["0.0.0.0/0"] } });
    expect(recordOf(d.id).nsInit).toEqual(nsInit);
    expect(await gone(`/sys/class/net/${net!.veth}`)).toBe(true);
    expect(await sh(d.id, "ip -o link | cut -d: -f2 | tr -d ' ' | tr '\\n' ' '")).toBe("lo");
    expect(await tcpFrom(d.id, outside.ip, 80)).not.toBe("0");
    await driver.ensure({ ...d, generation: 3, allowInternetAccess: false });
    expect(await tcpFrom(d.id, outside.ip, 80)).not.toBe("0");
    await driver.ensure({ ...d, generation: 4 });
    expect(recordOf(d.id).net!.address).toBe(net!.address);
    expect(await sh(d.id, `curl -s -m 5 http://${outside.ip}/`)).toBe(`outside saw ${outside.hostIp}`);
  });

  it("a sandbox started on the host's network (an older agent) moves to a namespace of its own at its next ensure", async () => {
    const d = desired();
    driver.dispose();
    driver = new LocalDriver({ dataDir, cgroupName, network: false });
    await driver.ensure(d);
    expect(recordOf(d.id).sharesHostNet).toBe(true);
    driver.dispose();
    driver = new LocalDriver({ dataDir, cgroupName });
    await driver.ensure(d);
    expect(recordOf(d.id).sharesHostNet).toBe(false);
    await serve(d.id, hostPort, "its own port");
    expect(await viaUserPort(d.id, hostPort)).toBe("its own port");
    expect(await sh(d.id, `curl -s -m 5 http://${outside.ip}/`)).toBe(`outside saw ${outside.hostIp}`);
  });

  it("the relay refuses to give the host's own namespace a veth, and leaves nothing behind", async () => {
    const relay = new PortRelay();
    onTestFinished(() => relay.dispose());
    const self = procRef(process.pid)!;
    const spec = { name: `kr${process.pid}`, mac: "02:6b:0a:58:ff:fe", mtu: 1400, bridgeIndex: 1, address: "10.88.255.254", prefix: 16, gateway: "10.88.0.1" };
    await expect(relay.addVeth(self, spec)).rejects.toThrow(/shares the host network/);
    expect(existsSync(`/sys/class/net/${spec.name}`)).toBe(false);
  });

  it("without a usable setup, sandboxes with internet access share the host's network, and the notes say why", async () => {
    const dir = mkdtempSync(join(tmpdir(), "local-sandbox-net-off-"));
    const off = new LocalDriver({ dataDir: dir, cgroupName: `${cgroupName}-off`, network: { bridge: "not a bridge!" } });
    onTestFinished(async () => {
      for (const s of await off.list()) await off.destroy(s.id);
      off.dispose();
      rmSync(dir, { recursive: true, force: true });
    });
    expect(off.capabilities.notes.join("\n")).toMatch(/share the host's network and its loopback: bridge name "not a bridge!"/);
    const d = desired();
    await off.ensure(d);
    const r = await off.exec(d.id, { cmd: "/bin/bash", args: ["-c", `exec 3<>/dev/tcp/127.0.0.1/${hostPort} && head -c 11 <&3`], cwd: "/", env: { PATH: "/usr/bin:/bin" }, user: USER });
    expect(r.stdout).toBe("host secret");
  });
});

function hostConnects(ip: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const c = connect(port, ip);
    c.once("connect", () => (c.destroy(), resolve(true)));
    c.once("error", () => resolve(false));
    c.setTimeout(2000, () => (c.destroy(), resolve(false)));
  });
}
