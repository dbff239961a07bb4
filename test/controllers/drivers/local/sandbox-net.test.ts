// Sandboxes with internet access have a network namespace of their own (veth, bridge, NAT): each
// sandbox's port 8000 is its own, host services and other sandboxes are out of reach, "the
// internet" (a namespace standing in for it) is reached through NAT, and the address survives
// an agent restart, a Stop pause and a change of network settings.
import { execFile, execFileSync } from "node:child_process";
import { connect, createServer, type Server } from "node:net";
import { existsSync, mkdtempSync, readFileSync, rmSync, unlinkSync, writeFileSync } from "node:fs";
import { request } from "node:http";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { setTimeout as sleep } from "node:timers/promises";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from "vitest";
import type { DesiredSandbox } from "../../../../controllers/drivers/driver.ts";
import { LocalDriver } from "../../../../controllers/drivers/local/local-driver.ts";
import { procRef, sandboxPids } from "../../../../controllers/drivers/local/holder.ts";
import { layoutFor } from "../../../../controllers/drivers/local/layout.ts";
import { PortRelay } from "../../../../controllers/drivers/local/port-relay.ts";
import { readRecord, writeRecord } from "../../../../controllers/drivers/local/records.ts";
import { METADATA_IP, startOutside, startPublished, type Outside } from "../../../support/outside-net.ts";
import { desiredSandbox, destroyAll, shIn, USER } from "./fixture.ts";

const dataDir = mkdtempSync(join(tmpdir(), "local-sandbox-net-"));
const cgroupName = `kruise-test-${process.pid}-net`;
let driver = new LocalDriver({ dataDir, cgroupName });
let outside: Outside;
let hostService: Server;
let hostPort = 0;

function desired(over: Partial<DesiredSandbox> = {}): DesiredSandbox {
  return desiredSandbox("sn", { allowInternetAccess: true, ...over });
}

async function sh(id: string, script: string): Promise<string> {
  return (await shIn(driver, id, script)).stdout.trim();
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
const leaseOf = (address: string) => `/run/kruise-net/kruise0/${address}`;

/** Runs `script` with sh in a network and mount namespace of its own, with its own /sys and
 * /run/kruise-net, so drivers set up bridges, tables and leases there without touching the
 * host's; net-open-child.ts is $CHILD. Returns its output. */
async function isolated(script: string, path = process.env.PATH): Promise<string> {
  const prelude = "set -e; mount -t sysfs none /sys; mount -t tmpfs none /run/kruise-net; echo 0 > /proc/sys/net/ipv4/ip_forward\n";
  const child = `${process.execPath} ${fileURLToPath(new URL("./net-open-child.ts", import.meta.url))}`;
  const { stdout } = await promisify(execFile)("unshare", ["--net", "--mount", "sh", "-c", prelude + script], { env: { ...process.env, PATH: path, CHILD: child } });
  return stdout;
}

/** The JSON lines net-open-child.ts printed. */
const childResults = (out: string) => out.split("\n").filter((l) => l.startsWith("{")).map((l) => JSON.parse(l) as { error?: string; leases?: string[] });

async function gone(path: string): Promise<boolean> {
  for (const deadline = Date.now() + 5000; Date.now() < deadline; await sleep(50)) if (!existsSync(path)) return true;
  return false;
}

beforeAll(async () => {
  outside = await startOutside({ metadata: true, privateHost: true });
  hostService = createServer((s) => s.on("error", () => {}).end("host secret\n"));
  await new Promise<void>((ok) => hostService.listen(0, "0.0.0.0", ok));
  hostPort = (hostService.address() as { port: number }).port;
});

afterAll(async () => {
  hostService?.close();
  outside?.stop();
  await destroyAll(driver, dataDir);
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

  it("private ranges (the host's LAN and VPC neighbours) are out of reach; DNS to the host's resolvers is let through", async () => {
    const d = desired();
    await driver.ensure(d);
    // A stand-in neighbour at 172.30.<k>.2, in a namespace of the test's own: the host reaches it.
    expect(await hostConnects(outside.privateIp!, 80)).toBe(true);
    expect(await tcpFrom(d.id, outside.privateIp!, 80)).not.toBe("0");
    expect(await sh(d.id, `curl -s -m 5 http://${outside.ip}/`)).toBe(`outside saw ${outside.hostIp}`);
    const table = execFileSync("nft", ["list", "table", "inet", "kruise_kruise0"], { encoding: "utf8" });
    const drop = /iifname "kruise0" ip daddr \{ ([^}]+) \} drop/g;
    const dropped = [...table.matchAll(drop)].flatMap((m) => m[1]!.split(", "));
    for (const range of ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10"]) expect(dropped).toContain(range);
    expect(table).toMatch(/iifname "kruise0" ip6 daddr fc00::\/7 drop/);
    // The sandbox's resolvers (here in 10/8), on port 53 only, before the drops.
    const resolvers = [...(await sh(d.id, "cat /etc/resolv.conf")).matchAll(/^nameserver (\d+\.\d+\.\d+\.\d+)$/gm)].map((m) => m[1]!);
    for (const ip of resolvers) expect(table.indexOf(ip)).toBeLessThan(table.indexOf("10.0.0.0/8"));
    if (resolvers.length) expect(table).toMatch(/ip daddr [^\n]+ meta l4proto \{ tcp, udp \} th dport 53 accept/);
  });

  it("keeps its address and user ports across an agent restart; destroy leaves no veth and frees the address", async () => {
    const d = desired();
    await driver.ensure(d);
    await serve(d.id, 8000, "before restart");
    const before = recordOf(d.id).net!;
    expect(existsSync(`/sys/class/net/${before.veth}`)).toBe(true);
    await driver.dispose();
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

  it("a sandbox moved to egress rules keeps its veth behind the proxy (the kernel's fast path), moved to no network loses it, without a new holder, and gets it back", async () => {
    const d = desired();
    await driver.ensure(d);
    const { nsInit, net } = recordOf(d.id);
    await driver.ensure({ ...d, generation: 2, egress: { allowOut: [], denyOut: ["0.0.0.0/0"] } });
    expect(recordOf(d.id).nsInit).toEqual(nsInit);
    expect(recordOf(d.id).net).toEqual(net);
    // Its TCP ends at the proxy now (the redirect in its namespace), which denies it.
    expect(await sh(d.id, `env -u HTTP_PROXY -u http_proxy curl -s -m 5 http://${outside.ip}/`)).toMatch(/^traffic-proxy: egress denied/);
    await driver.ensure({ ...d, generation: 3, allowInternetAccess: false });
    expect(recordOf(d.id).nsInit).toEqual(nsInit);
    expect(await gone(`/sys/class/net/${net!.veth}`)).toBe(true);
    expect(await sh(d.id, "ip -o link | cut -d: -f2 | tr -d ' ' | tr '\\n' ' '")).toBe("lo");
    // No network: the redirect went with the listener, and nothing connects.
    expect(await tcpFrom(d.id, outside.ip, 80)).not.toBe("0");
    await driver.ensure({ ...d, generation: 4 });
    expect(recordOf(d.id).net!.address).toBe(net!.address);
    expect(await sh(d.id, `curl -s -m 5 http://${outside.ip}/`)).toBe(`outside saw ${outside.hostIp}`);
  });

  it("a sandbox started on the host's network (an older agent) moves to a namespace of its own at its next ensure", async () => {
    const d = desired();
    await driver.dispose();
    driver = new LocalDriver({ dataDir, cgroupName, network: false });
    await driver.ensure(d);
    expect(recordOf(d.id).sharesHostNet).toBe(true);
    await driver.dispose();
    driver = new LocalDriver({ dataDir, cgroupName });
    await driver.ensure(d);
    expect(recordOf(d.id).sharesHostNet).toBe(false);
    await serve(d.id, hostPort, "its own port");
    expect(await viaUserPort(d.id, hostPort)).toBe("its own port");
    expect(await sh(d.id, `curl -s -m 5 http://${outside.ip}/`)).toBe(`outside saw ${outside.hostIp}`);
  });

  it("host services published by DNAT (docker -p, NodePort) and containers on the host's other bridges are out of reach", async () => {
    const published = await startPublished(outside.ip);
    onTestFinished(() => published.stop());
    // The other bridges' networks are read when the driver sets up: this container came after.
    await driver.dispose();
    driver = new LocalDriver({ dataDir, cgroupName });
    const d = desired();
    await driver.ensure(d);
    const gateway = (await sh(d.id, "ip route show default")).split(" ")[2]!;
    // The host reaches the container, published and directly: the rules make the difference.
    expect(await hostConnects(gateway, published.port)).toBe(true);
    expect(await hostConnects(published.containerIp, 80)).toBe(true);
    expect(await hostConnects(gateway, published.routedPort)).toBe(true);
    expect(await tcpFrom(d.id, gateway, published.port)).not.toBe("0");
    expect(await tcpFrom(d.id, outside.hostIp, published.port)).not.toBe("0");
    expect(await tcpFrom(d.id, published.containerIp, 80)).not.toBe("0");
    // The pod itself is "the internet" here, reachable directly; only the host's published port is not.
    expect(await tcpFrom(d.id, gateway, published.routedPort)).not.toBe("0");
    expect(await sh(d.id, `curl -s -m 5 http://${outside.ip}/`)).toBe(`outside saw ${outside.hostIp}`);
  });

  it("a recorded address is leased again at start: after its lease vanished (a reboot empties /run), and never while another sandbox holds it", async () => {
    const d = desired({ pauseStrategy: "Stop" });
    await driver.ensure(d);
    const first = recordOf(d.id).net!.address;
    const record = layoutFor(dataDir, d.id).record;
    await driver.ensure({ ...d, generation: 2, state: "Paused" });
    unlinkSync(leaseOf(first));
    await driver.ensure({ ...d, generation: 3, state: "Running" });
    expect(recordOf(d.id).net!.address).toBe(first);
    expect(readFileSync(leaseOf(first), "utf8")).toBe(record);
    // Meanwhile another driver leased the address to a sandbox whose record is still being written.
    await driver.ensure({ ...d, generation: 4, state: "Paused" });
    const other = join(dataDir, "another-driver", "record.json");
    writeFileSync(leaseOf(first), other);
    await driver.ensure({ ...d, generation: 5, state: "Running" });
    const second = recordOf(d.id).net!.address;
    expect(second).not.toBe(first);
    expect(readFileSync(leaseOf(first), "utf8")).toBe(other);
    expect(readFileSync(leaseOf(second), "utf8")).toBe(record);
    expect(await sh(d.id, "ip -4 -o addr show eth0")).toContain(` ${second}/16 `);
    expect(await sh(d.id, `curl -s -m 5 http://${outside.ip}/`)).toBe(`outside saw ${outside.hostIp}`);
    unlinkSync(leaseOf(first));
  });

  it("a veth made but never recorded (the agent stopped in between), or an eth0 already in the namespace, is replaced", async () => {
    const d = desired();
    await driver.ensure(d);
    const rec = recordOf(d.id);
    // The next agent finds the record as the stopped one left it (a driver keeps what it wrote).
    const unrecorded = async () => {
      writeRecord(layoutFor(dataDir, d.id).record, { ...rec, net: { address: rec.net!.address } });
      await driver.dispose();
      driver = new LocalDriver({ dataDir, cgroupName });
    };
    await unrecorded();
    await driver.ensure({ ...d, generation: 2 });
    expect(recordOf(d.id).net).toEqual(rec.net);
    expect(await sh(d.id, `curl -s -m 5 http://${outside.ip}/`)).toBe(`outside saw ${outside.hostIp}`);
    // An eth0 of some other pair in the sandbox's namespace.
    const stray = `ktx${process.pid % 100_000}`;
    execFileSync("ip", ["link", "del", rec.net!.veth!]);
    execFileSync("ip", ["link", "add", stray, "type", "veth", "peer", "name", "eth0", "netns", String(rec.nsInit!.pid)]);
    await unrecorded();
    await driver.ensure({ ...d, generation: 3 });
    expect(existsSync(`/sys/class/net/${stray}`)).toBe(false);
    expect(recordOf(d.id).net).toEqual(rec.net);
    expect(await sh(d.id, `curl -s -m 5 http://${outside.ip}/`)).toBe(`outside saw ${outside.hostIp}`);
  });

  it("a bridge deleted while the driver runs is made again by the next create; a create whose veth fails leaves no holder behind", async () => {
    const k = process.pid % 250;
    const network = { bridge: `krt${k}`, subnet: `10.89.${k}.0/24` };
    const dir = mkdtempSync(join(tmpdir(), "local-sandbox-net-bridge-"));
    const other = new LocalDriver({ dataDir: dir, cgroupName: `${cgroupName}-br`, network });
    onTestFinished(async () => {
      for (const s of await other.list()) await other.destroy(s.id);
      other.dispose();
      rmSync(dir, { recursive: true, force: true });
      for (const cmd of [["ip", "link", "del", network.bridge], ["nft", "delete", "table", "inet", `kruise_${network.bridge}`]]) {
        try {
          execFileSync(cmd[0]!, cmd.slice(1), { stdio: "ignore" });
        } catch {
          // not there
        }
      }
    });
    execFileSync("ip", ["link", "del", network.bridge]);
    const a = desired();
    await other.ensure(a);
    expect(existsSync(`/sys/class/net/${network.bridge}/bridge`)).toBe(true);
    const r = await other.exec(a.id, { cmd: "/bin/bash", args: ["-c", `curl -s -m 5 http://${outside.ip}/`], cwd: "/", env: { PATH: "/usr/bin:/bin" }, user: USER });
    expect(r.stdout).toBe(`outside saw ${outside.hostIp}`);
    // Not a bridge: the veth cannot join it.
    execFileSync("ip", ["link", "del", network.bridge]);
    execFileSync("ip", ["link", "add", network.bridge, "type", "veth", "peer", "name", `${network.bridge}p`]);
    const b = desired();
    await expect(other.ensure(b)).rejects.toThrow(/sandbox network/);
    // Every process on the host carrying b's marker, in any pid namespace (its pid 1 included).
    for (const deadline = Date.now() + 5000; sandboxPids(b.id, undefined, { everyNamespace: true }).length && Date.now() < deadline; ) await sleep(50);
    expect(sandboxPids(b.id, undefined, { everyNamespace: true })).toEqual([]);
  });

  it("drivers starting at the same instant on a missing bridge both set it up (neither falls back to the host's network)", async () => {
    const out = await isolated(`at=$(( $(date +%s%3N) + 1000 )); for i in 1 2 3; do $CHILD $at krx0 10.90.0.0/24 & done; wait`);
    expect(childResults(out)).toEqual([{ leases: [] }, { leases: [] }, { leases: [] }]);
  });

  it("drivers taking over stale leases at the same instant never hand one address to two sandboxes", async () => {
    // Every address of a /24 leased to a record that is gone, two minutes ago.
    const out = await isolated(`ip link add krx0 type bridge; mkdir -m 700 /run/kruise-net/krx0
for i in $(seq 2 254); do printf /gone/record.json > /run/kruise-net/krx0/10.90.0.$i; touch -d '-2 min' /run/kruise-net/krx0/10.90.0.$i; done
at=$(( $(date +%s%3N) + 1500 )); for i in 1 2 3 4; do $CHILD $at krx0 10.90.0.0/24 300 & done; wait`);
    const leases = childResults(out).flatMap((r) => r.leases ?? []);
    expect(leases.length).toBe(253);
    expect(new Set(leases).size).toBe(253);
  });

  it("a failed nftables step leaves neither IPv4 forwarding on nor a bridge behind", async () => {
    const bin = mkdtempSync(join(tmpdir(), "local-sandbox-net-nft-"));
    onTestFinished(() => rmSync(bin, { recursive: true, force: true }));
    writeFileSync(join(bin, "nft"), "#!/bin/sh\ncat >/dev/null\necho 'nft: this host refuses' >&2\nexit 1\n", { mode: 0o755 });
    const out = await isolated(`$CHILD 0 krx0 10.90.0.0/24; echo "forwarding $(cat /proc/sys/net/ipv4/ip_forward)"; ls /sys/class/net | tr '\\n' ' '`, `${bin}:${dirname(process.execPath)}:${process.env.PATH}`);
    expect(childResults(out)).toEqual([{ error: expect.stringMatching(/this host refuses/) }]);
    expect(out).toContain("forwarding 0");
    expect(out).not.toContain("krx0");
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
