// The kernel's fast path of local sandboxes behind the proxy (controllers/traffic/README.md, "The
// kernel's fast path"): once the proxy allowed a redirected connection at L3/L4 with no L7 policy
// for the sandbox, the destination goes into an nft set in the sandbox's network namespace, and
// later connections to it leave by the sandbox's eth0 without the proxy. Destinations: two
// namespaces standing in for the internet (outside-net.ts), `a` allowed and `b` denied.
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import type { DesiredSandbox } from "../../../../controllers/drivers/driver.ts";
import { LocalDriver } from "../../../../controllers/drivers/local/local-driver.ts";
import { DEFAULT_CT_MARK_MASK, PortRelay } from "../../../../controllers/drivers/local/port-relay.ts";
import { layoutFor } from "../../../../controllers/drivers/local/layout.ts";
import { readRecord } from "../../../../controllers/drivers/local/records.ts";
import { egressDecisions } from "../../../../controllers/lib/metrics.ts";
import { TrafficPolicySpec } from "../../../../schema/api/traffic-policy.ts";
import { SecurityProfileSpec } from "../../../../schema/api/security-profile.ts";
import { startOutside, type Outside } from "../../../support/outside-net.ts";
import { desiredSandbox, destroyAll, pollUntil, shIn } from "./fixture.ts";

const dataDir = mkdtempSync(join(tmpdir(), "local-egress-fast-"));
const cgroupName = `kruise-test-${process.pid}-egress-fast`;
const names: Record<string, string[]> = {};
const egressResolve = async (host: string) => names[host] ?? Promise.reject(Object.assign(new Error(`${host} not found`), { code: "ENOTFOUND" }));
const driver = new LocalDriver({ dataDir, cgroupName, egressResolve, egressFastPath: true });
let a: Outside;
let b: Outside;
let STRICT = { allowOut: [] as string[], denyOut: ["0.0.0.0/0"] };

const desired = (over: Partial<DesiredSandbox> = {}) => desiredSandbox("ef", { allowInternetAccess: true, egress: STRICT, ...over });
const sh = async (id: string, script: string) => (await shIn(driver, id, script)).stdout.trim();
/** curl without proxy variables: only the redirect (or the fast path) takes it out. */
const curlDirect = (id: string, url: string, args = "") => sh(id, `env -u HTTP_PROXY -u http_proxy -u HTTPS_PROXY -u https_proxy curl -s -m 5 ${url} ${args}`);
const fromA = () => `outside saw ${a.hostIp}`;
/** Raw TCP to port 80 of `ip`: true when the stand-in's server answered (its 400 page). */
const rawConnect = (id: string, ip: string) =>
  sh(id, `python3 -c 'import socket; s=socket.create_connection(("${ip}", 80), 3); s.settimeout(3); s.sendall(b"hello\\r\\n\\r\\n"); print(b"400" in s.recv(4096))'`).then((out) => out === "True");
/** Connections the proxy allowed so far (sandbox_egress_decisions_total{decision="allow"}). */
const allowedByProxy = async () => (await egressDecisions.get()).values.find((v) => v.labels.decision === "allow")?.value ?? 0;
const nsPid = (id: string, dir = dataDir) => readRecord(layoutFor(dir, id).record)!.nsInit!.pid;
/** The sandbox's fast-path set as the host sees it (nft in the sandbox's network namespace). */
function fastSet(id: string): string {
  try {
    return execFileSync("nsenter", [`--net=/proc/${nsPid(id)}/ns/net`, "nft", "list", "set", "ip", "kruise_egress", "fast"], { encoding: "utf8" });
  } catch {
    return "";
  }
}
/** The same set of the host's guard on the sandbox's veth. */
const hostSet = (id: string) => execFileSync("nft", ["list", "set", "inet", `kruise_veth_kr${nsPid(id)}`, "fast"], { encoding: "utf8" });
/** The first connection to `a` goes through the proxy and puts `a` on the fast path. */
async function onFastPath(id: string): Promise<void> {
  expect(await curlDirect(id, `http://${a.ip}/`)).toBe(fromA());
  expect(await pollUntil(() => fastSet(id), (s) => s.includes(`${a.ip} . tcp . 80`))).toContain(`${a.ip} . tcp . 80`);
}
/** Runs `argv` as the host's root in the sandbox's network namespace: what root inside could do
 * with a capability it must not have (CAP_NET_ADMIN, CAP_NET_RAW). */
const asNetAdmin = (id: string, argv: string[], dir = dataDir) => execFileSync("nsenter", [`--net=/proc/${nsPid(id, dir)}/ns/net`, ...argv], { encoding: "utf8" });
const addressOf = (id: string, dir = dataDir) => readRecord(layoutFor(dir, id).record)!.net!.address;
/** The host's neighbour entry (on the bridge) for the address of `id`. */
const neighbour = (id: string, dir = dataDir) => execFileSync("ip", ["neigh", "show", addressOf(id, dir), "dev", "kruise0"], { encoding: "utf8" });
const macOf = (id: string, dir = dataDir) => /link\/ether (\S+)/.exec(asNetAdmin(id, ["ip", "-o", "link", "show", "dev", "eth0"], dir))![1]!;
/** As root with CAP_NET_RAW in the thief's namespace: ARP replies "the victim's address is at my
 * MAC", a few, spread past the kernel's ARP lock time (1 s) so one would be taken. */
function arpTakeover(thief: string, victim: string, dir = dataDir): void {
  const thiefMac = macOf(thief, dir);
  const gwMac = readFileSync("/sys/class/net/kruise0/address", "utf8").trim();
  const gateway = asNetAdmin(thief, ["ip", "-4", "route", "show", "default", "dev", "eth0"], dir).split(" ")[2]!;
  const arp = [
    "import socket, struct, time",
    `mine = bytes.fromhex("${thiefMac.replace(/:/g, "")}"); br = bytes.fromhex("${gwMac.replace(/:/g, "")}")`,
    `pkt = br + mine + b"\\x08\\x06" + struct.pack("!HHBBH", 1, 0x0800, 6, 4, 2) + mine + socket.inet_aton("${addressOf(victim, dir)}") + br + socket.inet_aton("${gateway}")`,
    's = socket.socket(socket.AF_PACKET, socket.SOCK_RAW); s.bind(("eth0", 0))',
    "for i in range(6): s.send(pkt); time.sleep(0.3)",
  ].join("\n");
  asNetAdmin(thief, ["python3", "-c", arp], dir);
}
/** The host's tables of the veth of `id` (port-relay.pl `veth_tables`, `guard_table`). */
const vethTables = (id: string, dir = dataDir) =>
  execFileSync("nft", ["list", "tables"], { encoding: "utf8" }).split("\n").filter((l) => l.endsWith(` kruise_veth_kr${nsPid(id, dir)}`)).sort();
/** A UDP listener in the stand-in `o` on port 9999 that records each datagram; `heard()` once the
 * host's own "marker" datagram (sent after whatever the test sent) has arrived. */
async function udpListener(o: Outside): Promise<{ heard: () => Promise<string[]>; stop: () => void }> {
  const listener = spawn("ip", ["netns", "exec", o.ns, "python3", "-u", "-c", 'import socket\ns=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("0.0.0.0", 9999)); print("ready", flush=True)\nwhile True: print(s.recv(100).decode(), flush=True)'], { stdio: ["ignore", "pipe", "inherit"] });
  let heard = "";
  listener.stdout!.on("data", (c: Buffer) => (heard += c.toString()));
  await pollUntil(() => heard, (h) => h.includes("ready"));
  return {
    heard: async () => {
      execFileSync("python3", ["-c", `import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"marker", ("${o.ip}", 9999))`]);
      await pollUntil(() => heard, (h) => h.includes("marker"));
      return heard.split("\n").filter(Boolean);
    },
    stop: () => listener.kill("SIGKILL"),
  };
}

/** The pid of this process's port relay: the only way into the proxy from a sandbox. */
function relayPid(): number {
  const out = execFileSync("pgrep", ["-P", String(process.pid), "-f", "port-relay.pl"], { encoding: "utf8" }).trim().split("\n");
  return Number(out[0]);
}

/** A connection to `a` on the fast path, kept in use (a request whose header lines come one at a
 * time); /tmp/held.out says "open", then "ended" once a write fails. */
async function holdConnection(id: string, tick = false): Promise<void> {
  const held = [
    "import socket, time",
    `s = socket.create_connection(("${a.ip}", 80), 3)`,
    's.sendall(b"GET / HTTP/1.1\\r\\n"); print("open", flush=True)',
    "for i in range(300):",
    "    try:",
    '        s.sendall(b"x-wait: %d\\r\\n" % i); time.sleep(0.1)',
    ...(tick ? ['        print("w", flush=True)'] : []),
    "    except OSError:",
    '        print("ended", flush=True); break',
    "else:",
    '    print("still open", flush=True)',
  ].join("\n");
  await sh(id, `nohup python3 -c '${held}' > /tmp/held.out 2>&1 < /dev/null &`);
  expect(await pollUntil(() => sh(id, "cat /tmp/held.out"), (o) => o.includes("open"))).toMatch(/^open/);
}

beforeAll(async () => {
  a = await startOutside();
  b = await startOutside();
  STRICT = { allowOut: [a.ip], denyOut: ["0.0.0.0/0"] };
  Object.assign(names, { "a.example.test": [a.ip], "b.example.test": [b.ip] });
});

afterAll(async () => {
  a?.stop();
  b?.stop();
  await destroyAll(driver, dataDir);
});

describe("the kernel's fast path of sandboxes behind the proxy", () => {
  it("a later connection to an allowed destination leaves without the proxy; a denied one is still the proxy's, refused and logged", async () => {
    const d = desired();
    await driver.ensure(d);
    await onFastPath(d.id);
    const before = await allowedByProxy();
    expect(await curlDirect(d.id, `http://${a.ip}/`)).toBe(fromA());
    expect(await rawConnect(d.id, a.ip)).toBe(true);
    expect(await allowedByProxy()).toBe(before);
    // With the relay (the way into the proxy) stopped, `a` is still reached; `b`, not on the fast
    // path, waits for the proxy in vain.
    const relay = relayPid();
    process.kill(relay, "SIGSTOP");
    try {
      expect(await curlDirect(d.id, `http://${a.ip}/`)).toBe(fromA());
      expect(await curlDirect(d.id, `http://${b.ip}/`, "-m 2 -o /dev/null -w '%{http_code}'; echo \" $?\"")).toBe("000 28");
    } finally {
      process.kill(relay, "SIGCONT");
    }
    const log = vi.spyOn(console, "error");
    try {
      expect(await curlDirect(d.id, `http://${b.ip}/`)).toBe(`traffic-proxy: egress denied: ${b.ip} is denied by denyOut "0.0.0.0/0"`);
      expect(await rawConnect(d.id, b.ip)).toBe(false);
      expect(log.mock.calls.flat().join("\n")).toContain(`traffic-proxy: ${d.id}: denied ${b.ip}:80: ${b.ip} is denied by denyOut "0.0.0.0/0"`);
    } finally {
      log.mockRestore();
    }
    expect(fastSet(d.id)).not.toContain(b.ip);
  });

  it("a governed sandbox's SYN says on the wire what its eth0 carries, while the redirect's leg to the relay runs in loopback-sized segments", async () => {
    // A destination behind 9000-byte frames, larger than any sandbox veth: its server tells each
    // client the segment size it may send it (bounded by the MSS that client's SYN advertised).
    const c = await startOutside();
    const server = spawn("ip", ["netns", "exec", c.ns, "python3", "-u", "-c", [
      "import socket, threading",
      's = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("0.0.0.0", 81)); s.listen(8); print("ready", flush=True)',
      "def serve(k):",
      '    k.sendall(b"%d\\n" % k.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG)); k.recv(1); k.close()',
      "while True: threading.Thread(target=serve, args=(s.accept()[0],)).start()",
    ].join("\n")], { stdio: ["ignore", "pipe", "inherit"] });
    try {
      for (const args of [["link", "set", c.link, "mtu", "9000"], ["-n", c.ns, "link", "set", "eth0", "mtu", "9000"]]) execFileSync("ip", args);
      let said = "";
      server.stdout!.on("data", (chunk: Buffer) => (said += chunk.toString()));
      await pollUntil(() => said, (x) => x.includes("ready"));
      const d = desired({ egress: { allowOut: [c.ip], denyOut: ["0.0.0.0/0"] } });
      await driver.ensure(d);
      const mtu = Number(/ mtu (\d+)/.exec(asNetAdmin(d.id, ["ip", "-o", "link", "show", "dev", "eth0"]))![1]);
      expect(mtu).toBeLessThan(9000);
      const client = (hold: number) => `python3 -c 'import socket, time; s = socket.create_connection(("${c.ip}", 81), 3); print(s.recv(100).decode().strip(), flush=True); time.sleep(${hold})'`;
      // The first connection goes by the redirect to the relay's child, held open meanwhile: the
      // child's socket on the sandbox's loopback sends segments larger than eth0 could carry.
      await sh(d.id, `nohup ${client(3)} > /tmp/mss.out 2>&1 < /dev/null &`);
      await pollUntil(() => sh(d.id, "cat /tmp/mss.out"), (o) => o.length > 0);
      const proxyPort = Number(/:(\d+)$/.exec(await sh(d.id, "echo $HTTP_PROXY"))![1]);
      const relayLeg = asNetAdmin(d.id, ["ss", "-tin", "src", `127.0.0.1:${proxyPort}`]);
      expect(Number(/\bmss:(\d+)/.exec(relayLeg)?.[1])).toBeGreaterThan(mtu);
      // A later one takes the fast path out of eth0: its SYN says no more than eth0 carries.
      expect(await pollUntil(() => fastSet(d.id), (x) => x.includes(`${c.ip} . tcp . 81`))).toContain(`${c.ip} . tcp . 81`);
      const onWire = Number(await sh(d.id, client(0)));
      expect(onWire).toBeGreaterThan(0);
      expect(onWire).toBeLessThanOrEqual(mtu - 40);
    } finally {
      server.kill("SIGKILL");
      c.stop();
    }
  });

  it("a destination a name admitted stays on the fast path for the name's TTL (what the sandbox's DNS answered), one admitted by its address up to the cap", async () => {
    const d = desired({ egress: { allowOut: ["*.example.test"], denyOut: ["0.0.0.0/0"] } });
    await driver.ensure(d);
    expect(await curlDirect(d.id, "http://a.example.test/")).toBe(fromA());
    expect(await pollUntil(() => fastSet(d.id), (s) => s.includes(a.ip))).toMatch(new RegExp(`${a.ip.replace(/\./g, "\\.")} \\. tcp \\. 80 timeout 30s`));
    // The host's guard holds the same element a few seconds longer, so the sandbox's always
    // expires first: never a connection that skips the redirect into the host's drop.
    expect(hostSet(d.id)).toMatch(new RegExp(`${a.ip.replace(/\./g, "\\.")} \\. 80 timeout 35s`));
    const byAddress = desired();
    await driver.ensure(byAddress);
    await onFastPath(byAddress.id);
    expect(fastSet(byAddress.id)).toMatch(new RegExp(`${a.ip.replace(/\./g, "\\.")} \\. tcp \\. 80 timeout 5m`));
  });

  it("a rule change that denies the destination applies at once to new connections and ends those on the fast path", async () => {
    const d = desired();
    await driver.ensure(d);
    await onFastPath(d.id);
    const before = await allowedByProxy();
    expect(await curlDirect(d.id, `http://${a.ip}/`)).toBe(fromA());
    expect(await allowedByProxy()).toBe(before);
    await holdConnection(d.id);
    await driver.ensure({ ...d, generation: 2, egress: { allowOut: [b.ip], denyOut: ["0.0.0.0/0"] } });
    expect(await curlDirect(d.id, `http://${a.ip}/`)).toBe(`traffic-proxy: egress denied: ${a.ip} is denied by denyOut "0.0.0.0/0"`);
    expect(await curlDirect(d.id, `http://${b.ip}/`)).toBe(`outside saw ${b.hostIp}`);
    expect(fastSet(d.id)).not.toContain(a.ip);
    expect(await pollUntil(() => sh(d.id, "cat /tmp/held.out"), (o) => o.includes("ended") || o.includes("still"))).toBe("open\nended");
  });

  it("a TrafficPolicy change applies at once to a destination on the fast path", async () => {
    const d = desiredSandbox("ef", { allowInternetAccess: true, namespace: "team-f" });
    const tp = (action: "allow" | "reject") => [{ team: "team-f", name: "web", spec: TrafficPolicySpec.parse({ egress: { rules: [{ action, to: [{ cidr: `${a.ip}/32` }], ports: [{ port: 80 }] }] } }) }];
    await driver.ensure(d);
    await driver.setTrafficPolicies(tp("allow"));
    await onFastPath(d.id);
    const before = await allowedByProxy();
    expect(await curlDirect(d.id, `http://${a.ip}/`)).toBe(fromA());
    expect(await allowedByProxy()).toBe(before);
    await driver.setTrafficPolicies(tp("reject"));
    expect(fastSet(d.id)).not.toContain(a.ip);
    expect(await curlDirect(d.id, `http://${a.ip}/`)).toBe("traffic-proxy: egress denied: TrafficPolicy team-f/web rule 1 (reject)");
    await driver.setTrafficPolicies([]);
  });

  it("once L7 rules apply to the sandbox, its connections go through the proxy again, and those open on the fast path end", async () => {
    const d = desired();
    await driver.ensure(d);
    await onFastPath(d.id);
    await holdConnection(d.id);
    await driver.ensure({ ...d, generation: 2, networkRules: { "a.example.test": [{ transform: { headers: { "x-added": "by-the-proxy" } } }] } });
    expect(fastSet(d.id)).not.toContain(a.ip);
    // Its open fast-path connections end too: nothing long-lived stays uninspected.
    expect(await pollUntil(() => sh(d.id, "cat /tmp/held.out"), (o) => o.includes("ended") || o.includes("still"))).toBe("open\nended");
    const before = await allowedByProxy();
    expect(await curlDirect(d.id, `http://${a.ip}/`)).toBe(fromA());
    expect(await curlDirect(d.id, `http://${a.ip}/`)).toBe(fromA());
    expect(await allowedByProxy()).toBe(before + 2);
    expect(fastSet(d.id)).not.toContain(a.ip);
  });

  it("a SecurityProfile that comes to select the sandbox takes its connections back through the proxy at once, and ends those open on the fast path", async () => {
    const d = desired({ namespace: "team-p", labels: { app: "web" } });
    await driver.ensure(d);
    await onFastPath(d.id);
    await holdConnection(d.id);
    const spec = SecurityProfileSpec.parse({ selector: { matchLabels: { app: "web" } }, rules: [{ name: "tag", match: [{ domains: ["a.example.test"] }], actions: { headerManipulation: { set: [{ name: "x-profile", value: "on" }] } } }] });
    await driver.setSecurityProfiles([{ team: "team-p", name: "tagger", spec, createdAt: 1 }]);
    expect(fastSet(d.id)).not.toContain(a.ip);
    // The open fast-path connection ends as well: nothing long-lived stays uninspected.
    expect(await pollUntil(() => sh(d.id, "cat /tmp/held.out"), (o) => o.includes("ended") || o.includes("still"))).toBe("open\nended");
    const before = await allowedByProxy();
    expect(await curlDirect(d.id, `http://${a.ip}/`)).toBe(fromA());
    expect(await allowedByProxy()).toBe(before + 1);
    await driver.setSecurityProfiles([]);
  });

  it("the sandbox cannot change its fast path: root inside gets EPERM from nftables for flushing the set, adding to it or deleting the table", async () => {
    const d = desired();
    await driver.ensure(d);
    await onFastPath(d.id);
    const root = { name: "root", uid: 0, gid: 0, home: "/root", shell: "/bin/bash" };
    // What keeps it so: CAP_NET_ADMIN (12) is not in root's bounding set, so nothing it runs gains it.
    const capBnd = BigInt(`0x${(await shIn(driver, d.id, "grep CapBnd /proc/self/status | cut -f2", root)).stdout.trim()}`);
    expect((capBnd >> 12n) & 1n).toBe(0n);
    // The image has no nft: what it would send, by hand (nfnetlink batches), as root inside.
    const nftBatch = (msgType: number, attrs: string) => [
      "import socket, struct",
      "s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 12)",
      'def attr(t, v): n = 4 + len(v); return struct.pack("=HH", n, t) + v + b"\\0" * ((4 - n % 4) % 4)',
      'def msg(t, flags, seq, body): return struct.pack("=IHHII", 16 + len(body), t, flags, seq, 0) + body',
      'def nfg(family, res): return struct.pack("=BBH", family, 0, socket.htons(res))',
      `body = nfg(2, 0) + ${attrs}`,
      `s.sendto(msg(16, 1, 1, nfg(0, 10)) + msg((10 << 8) | ${msgType}, 5, 2, body) + msg(17, 1, 3, nfg(0, 10)), (0, 0))`,
      'r = s.recv(4096); print(struct.unpack("=i", r[16:20])[0] if struct.unpack("=H", r[4:6])[0] == 2 else "no error")',
    ].join("\n");
    const table = 'attr(1, b"kruise_egress\\0")';
    const set = `${table} + attr(2, b"fast\\0")`;
    // elements { key: b.ip . tcp . 80 }, each part of the key padded to 4 bytes. The same batches
    // as host root in a namespace of its own do flush, add and delete (checked by hand).
    const element = `${set} + attr(3 | 0x8000, attr(1 | 0x8000, attr(1 | 0x8000, attr(1, socket.inet_aton("${b.ip}") + bytes([6, 0, 0, 0]) + struct.pack(">H", 80) + bytes(2)))))`;
    for (const [what, type, attrs] of [["flush the set", 14, set], ["add an element", 12, element], ["delete the table", 2, table]] as const) {
      const r = await shIn(driver, d.id, `python3 -c '${nftBatch(type, attrs)}'`, root);
      expect(r.stdout.trim(), `${what}: ${r.stderr}`).toBe("-1"); // -EPERM
    }
    expect(fastSet(d.id)).toContain(`${a.ip} . tcp . 80`);
    expect(fastSet(d.id)).not.toContain(b.ip);
    expect(await rawConnect(d.id, b.ip)).toBe(false);
    // Nothing but TCP to a member leaves by eth0: UDP elsewhere than DNS is dropped there.
    expect(await sh(d.id, `python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(2); s.sendto(b"x", ("${a.ip}", 9)); print("sent")' 2>&1 | tail -1`)).toMatch(/PermissionError|Operation not permitted/);
  });

  it("root inside (through sudo) cannot send frames out of eth0 around the gate: a packet socket is refused, and a UDP datagram so built never reaches a denied destination; eth0 has no IPv6", async () => {
    const d = desired();
    await driver.ensure(d);
    await onFastPath(d.id);
    // A listener in `b` (denied) that prints each datagram it gets.
    const listener = spawn("ip", ["netns", "exec", b.ns, "python3", "-u", "-c", 'import socket\ns=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("0.0.0.0", 9999)); print("ready", flush=True)\nwhile True: print(s.recv(100).decode(), flush=True)'], { stdio: ["ignore", "pipe", "inherit"] });
    let heard = "";
    listener.stdout!.on("data", (c: Buffer) => (heard += c.toString()));
    try {
      await pollUntil(() => heard, (h) => h.includes("ready"));
      const gwMac = readFileSync("/sys/class/net/kruise0/address", "utf8").trim();
      // An Ethernet frame to the bridge (the gateway) carrying IPv4/UDP from the sandbox's address
      // to b:9999, sent on an AF_PACKET socket: the IPv4 output hook (the gate) never sees it.
      const frame = [
        "import socket, struct, subprocess",
        'src = subprocess.run(["ip", "-4", "-o", "addr", "show", "dev", "eth0"], capture_output=True, text=True).stdout.split()[3].split("/")[0]',
        'link = subprocess.run(["ip", "-o", "link", "show", "dev", "eth0"], capture_output=True, text=True).stdout.split()',
        'mac = link[link.index("link/ether") + 1]',
        'payload = b"around-the-gate"',
        'udp = struct.pack("!HHHH", 40000, 9999, 8 + len(payload), 0) + payload',
        'def csum(h): t = sum(struct.unpack("!10H", h)); t = (t >> 16) + (t & 0xffff); t += t >> 16; return ~t & 0xffff',
        `hdr = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 1, 0, 64, 17, 0, socket.inet_aton(src), socket.inet_aton("${b.ip}"))`,
        'hdr = hdr[:10] + struct.pack("!H", csum(hdr)) + hdr[12:]',
        `eth = bytes.fromhex("${gwMac.replace(/:/g, "")}") + bytes.fromhex(mac.replace(":", "")) + b"\\x08\\x00"`,
        "try:",
        "    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)",
        '    s.bind(("eth0", 0))',
        "    for i in range(3): s.send(eth + hdr + udp)",
        '    print("sent")',
        "except OSError as e:",
        '    print("refused", e.errno)',
      ].join("\n");
      const r = await shIn(driver, d.id, `sudo -n python3 -c '${frame}'`);
      // What was sent before it has arrived by the time this later datagram (from the host) does.
      execFileSync("python3", ["-c", `import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"marker", ("${b.ip}", 9999))`]);
      await pollUntil(() => heard, (h) => h.includes("marker"));
      expect(heard.split("\n").filter(Boolean)).toEqual(["ready", "marker"]);
      expect(r.stdout.trim(), r.stderr).toBe("refused 1"); // EPERM: no CAP_NET_RAW
    } finally {
      listener.kill("SIGKILL");
    }
    // The gate is an IPv4 chain: eth0 has no IPv6 at all (not even a link-local address).
    expect(await sh(d.id, "cat /proc/sys/net/ipv6/conf/eth0/disable_ipv6; ip -6 -o addr show dev eth0 | wc -l")).toBe("1\n0");
  });

  it("with its own netfilter gone (root inside with CAP_NET_ADMIN, a capability it must not have), a governed sandbox still gets out by eth0 only to what the proxy admitted: the host's guard drops the rest", async () => {
    const d = desired();
    await driver.ensure(d);
    await onFastPath(d.id);
    const udp = await udpListener(b);
    try {
      // The redirect, the set and the gate: all of the sandbox's own enforcement.
      asNetAdmin(d.id, ["nft", "delete", "table", "ip", "kruise_egress"]);
      expect(asNetAdmin(d.id, ["nft", "list", "tables"])).not.toContain("kruise_egress");
      // What the proxy admitted still leaves (the host's set has it) ...
      expect(await curlDirect(d.id, `http://${a.ip}/`)).toBe(fromA());
      // ... and nothing else: TCP to the denied `b`, UDP to it, TCP to `a` on another port.
      expect(await curlDirect(d.id, `http://${b.ip}/`, "-m 3 -o /dev/null -w '%{http_code}'; echo \" $?\"")).toBe("000 28");
      expect(await curlDirect(d.id, `http://${a.ip}:9999/`, "-m 3 -o /dev/null -w '%{http_code}'; echo \" $?\"")).toBe("000 28");
      await sh(d.id, `python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); [s.sendto(b"around-the-gate", ("${b.ip}", 9999)) for i in range(3)]'`);
      expect(await udp.heard()).toEqual(["ready", "marker"]);
    } finally {
      udp.stop();
    }
  });

  it("a sandbox cannot ride another's fast path by taking its address: what enters the bridge by its veth carries only its own address and MAC", async () => {
    const victim = desired();
    const thief = desired({ egress: { allowOut: [b.ip], denyOut: ["0.0.0.0/0"] } });
    await driver.ensure(victim);
    await driver.ensure(thief);
    await onFastPath(victim.id);
    // The thief's own way out works (its gateway's MAC is known in its namespace).
    expect(await curlDirect(thief.id, `http://${b.ip}/`)).toBe(`outside saw ${b.hostIp}`);
    const stolen = addressOf(victim.id);
    const gateway = asNetAdmin(thief.id, ["ip", "-4", "route", "show", "default", "dev", "eth0"]).split(" ")[2]!;
    const gwMac = readFileSync("/sys/class/net/kruise0/address", "utf8").trim();
    // With CAP_NET_ADMIN inside: its own netfilter gone, the victim's address on its eth0, the
    // gateway's MAC fixed (its ARP, now from the victim's address, would not be answered).
    asNetAdmin(thief.id, ["nft", "delete", "table", "ip", "kruise_egress"]);
    asNetAdmin(thief.id, ["ip", "addr", "add", `${stolen}/32`, "dev", "eth0"]);
    asNetAdmin(thief.id, ["ip", "neigh", "replace", gateway, "lladdr", gwMac, "dev", "eth0", "nud", "permanent"]);
    // Counts what the host would forward from the victim's address to `a` after the guards' chains.
    const spy = `spy${process.pid}`;
    execFileSync("nft", ["-f", "-"], { input: `table inet ${spy} {\n chain forward {\n  type filter hook forward priority 100; policy accept;\n  ip saddr ${stolen} ip daddr ${a.ip} tcp dport 80 counter\n }\n}\n` });
    try {
      expect(await curlDirect(thief.id, `http://${a.ip}/`, `-m 3 --interface ${stolen} -o /dev/null -w '%{http_code}'; echo " $?"`)).toBe("000 28");
      expect(execFileSync("nft", ["list", "table", "inet", spy], { encoding: "utf8" })).toContain("counter packets 0 bytes 0");
    } finally {
      execFileSync("nft", ["delete", "table", "inet", spy]);
    }
    // The victim's fast path is its own still.
    expect(await curlDirect(victim.id, `http://${a.ip}/`)).toBe(fromA());
  });

  it("a sandbox cannot take another's replies by ARP (every sandbox veth): the host's neighbour entry for its address keeps its MAC", async () => {
    const victim = desiredSandbox("ef", { allowInternetAccess: true });
    const thief = desiredSandbox("ef", { allowInternetAccess: true });
    await driver.ensure(victim);
    await driver.ensure(thief);
    expect(await sh(victim.id, `curl -s -m 5 http://${a.ip}/`)).toBe(fromA());
    const victimMac = macOf(victim.id);
    expect(neighbour(victim.id)).toContain(victimMac);
    arpTakeover(thief.id, victim.id);
    expect(neighbour(victim.id)).toContain(victimMac);
    expect(await sh(victim.id, `curl -s -m 5 http://${a.ip}/`)).toBe(fromA());
  });

  it("a veth whose host tables are gone (as an agent older than them left it) gets them back when the agent restarts: then its root can take neither another's replies by ARP nor another address", async () => {
    const dir = mkdtempSync(join(tmpdir(), "local-egress-adopt-"));
    const opts = { dataDir: dir, cgroupName: `kruise-test-${process.pid}-egress-adopt`, egressResolve, egressFastPath: true };
    const first = new LocalDriver(opts);
    let second: LocalDriver | undefined;
    const victim = desiredSandbox("ea", { allowInternetAccess: true });
    const thief = desiredSandbox("ea", { allowInternetAccess: true, egress: STRICT });
    try {
      await first.ensure(victim);
      await first.ensure(thief);
      const pid = nsPid(thief.id, dir);
      const both = [`table bridge kruise_veth_kr${pid}`, `table inet kruise_veth_kr${pid}`];
      expect(vethTables(thief.id, dir)).toEqual(both);
      // The agent stops (its relay with it); the sandboxes run on, their veths without tables.
      await first.dispose();
      execFileSync("nft", ["-f", "-"], { input: both.map((t) => `delete ${t}\n`).join("") });
      second = new LocalDriver(opts);
      // The next agent adopts them (the reconciler ensures every sandbox it finds).
      await second.ensure(victim);
      await second.ensure(thief);
      expect(vethTables(thief.id, dir)).toEqual(both);
      expect(vethTables(victim.id, dir)).toEqual([`table bridge kruise_veth_kr${nsPid(victim.id, dir)}`]);
      // Adopting is idempotent: a second pass leaves them as they are.
      await second.ensure({ ...thief, generation: 2 });
      expect(vethTables(thief.id, dir)).toEqual(both);
      expect((await shIn(second, victim.id, `curl -s -m 5 http://${a.ip}/`)).stdout).toBe(fromA());
      const victimMac = macOf(victim.id, dir);
      expect(neighbour(victim.id, dir)).toContain(victimMac);
      arpTakeover(thief.id, victim.id, dir);
      expect(neighbour(victim.id, dir)).toContain(victimMac);
      // The victim's address on the thief's eth0 (its own netfilter gone): nothing of it is forwarded.
      const stolen = addressOf(victim.id, dir);
      asNetAdmin(thief.id, ["nft", "delete", "table", "ip", "kruise_egress"], dir);
      asNetAdmin(thief.id, ["ip", "addr", "add", `${stolen}/32`, "dev", "eth0"], dir);
      const gateway = asNetAdmin(thief.id, ["ip", "-4", "route", "show", "default", "dev", "eth0"], dir).split(" ")[2]!;
      asNetAdmin(thief.id, ["ip", "neigh", "replace", gateway, "lladdr", readFileSync("/sys/class/net/kruise0/address", "utf8").trim(), "dev", "eth0", "nud", "permanent"], dir);
      // Counts what the host would forward from the victim's address to `b` (which the thief's
      // guard, keyed to its own address, would not judge).
      const spy = `spy${process.pid}`;
      execFileSync("nft", ["-f", "-"], { input: `table inet ${spy} {\n chain forward {\n  type filter hook forward priority 100; policy accept;\n  ip saddr ${stolen} ip daddr ${b.ip} tcp dport 80 counter\n }\n}\n` });
      try {
        const r = await shIn(second, thief.id, `env -u HTTP_PROXY -u http_proxy curl -s -m 3 --interface ${stolen} -o /dev/null -w '%{http_code}' http://${b.ip}/; echo " $?"`);
        expect(r.stdout.trim()).toBe("000 28");
        expect(execFileSync("nft", ["list", "table", "inet", spy], { encoding: "utf8" })).toContain("counter packets 0 bytes 0");
      } finally {
        execFileSync("nft", ["delete", "table", "inet", spy]);
      }
    } finally {
      await destroyAll(second ?? first, dir);
    }
  });

  it("the host's conntrack marks are its own bits only: another user's bits on the same connections stay, the fast path still works under them, and they admit nothing", async () => {
    const d = desired();
    await driver.ensure(d);
    await onFastPath(d.id);
    const addr = addressOf(d.id);
    const foreign = `foreign${process.pid}`;
    // Another user of the host's conntrack (a firewall, a VPN saving its marks) sets every bit
    // outside the fast path's mask (DEFAULT_CT_MARK_MASK) on the sandbox's connections, before the
    // guard sees them; after it, a counter of packets that still carry them.
    const others = (~DEFAULT_CT_MARK_MASK >>> 0).toString(16).padStart(8, "0");
    execFileSync("nft", ["-f", "-"], {
      input: `table inet ${foreign} {\n chain marker {\n  type filter hook forward priority -20; policy accept;\n  ip saddr ${addr} ct mark set ct mark or 0x${others}\n }\n chain seen {\n  type filter hook forward priority 100; policy accept;\n  ip saddr ${addr} ip daddr ${a.ip} ct mark and 0x${others} == 0x${others} counter\n }\n}\n`,
    });
    try {
      // A later connection to `a` takes the kernel's way (the proxy decides nothing) and works.
      const decided = await allowedByProxy();
      expect(await curlDirect(d.id, `http://${a.ip}/`)).toBe(fromA());
      expect(await allowedByProxy()).toBe(decided);
      // The other user's bits came through the guard on its packets.
      expect(execFileSync("nft", ["list", "chain", "inet", foreign, "seen"], { encoding: "utf8" })).not.toContain("counter packets 0 ");
      // With its own netfilter gone, the sandbox still gets nowhere else: foreign bits admit nothing.
      asNetAdmin(d.id, ["nft", "delete", "table", "ip", "kruise_egress"]);
      expect(await curlDirect(d.id, `http://${b.ip}/`, "-m 3 -o /dev/null -w '%{http_code}'; echo \" $?\"")).toBe("000 28");
      expect(await curlDirect(d.id, `http://${a.ip}:9999/`, "-m 3 -o /dev/null -w '%{http_code}'; echo \" $?\"")).toBe("000 28");
      expect(await curlDirect(d.id, `http://${a.ip}/`)).toBe(fromA());
    } finally {
      execFileSync("nft", ["delete", "table", "inet", foreign]);
    }
  });

  it("a re-listen (new limits) keeps the sandbox's connections on the fast path open", async () => {
    const d = desired();
    await driver.ensure(d);
    await onFastPath(d.id);
    await holdConnection(d.id, true);
    // A pids limit below the relay's cap (256) is a new cap on its children: the listener is opened again.
    await driver.ensure({ ...d, generation: 2, resources: { ...d.resources, pidsMax: 200 } });
    // Opened again: its redirect was replaced, and the set with it.
    expect(await pollUntil(() => fastSet(d.id), (s) => !s.includes(a.ip))).not.toContain(a.ip);
    const writes = async () => Number(await sh(d.id, "grep -c ^w /tmp/held.out"));
    const now = await writes();
    // Ten writes later (each a packet of that connection), it is still open.
    expect(await pollUntil(() => sh(d.id, "cat /tmp/held.out"), (o) => o.includes("ended") || (o.match(/^w/gm)?.length ?? 0) >= now + 10)).not.toContain("ended");
  });

  it("a re-listen (new limits) leaves no moment for the sandbox to take the egress port: processes inside spinning on bind(127.0.0.1:3128) never get it, and nothing leaves by eth0 unfiltered", async () => {
    const d = desired();
    await driver.ensure(d);
    await onFastPath(d.id);
    // Three processes of the sandbox's user, each binding 127.0.0.1:3128 as fast as it can until
    // one holds it ("got" in /tmp/squat.out, and it keeps it) or /tmp/squat.stop appears.
    const squat = [
      "import os, socket, time",
      "for i in range(2): os.fork()",
      "n = 0",
      'while not (n % 2000 == 0 and os.path.exists("/tmp/squat.stop")):',
      "    n += 1",
      "    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)",
      "    try:",
      '        s.bind(("127.0.0.1", 3128)); s.listen(1)',
      "    except OSError:",
      "        s.close(); continue",
      '    print("got", flush=True); time.sleep(120); break',
    ].join("\n");
    await sh(d.id, `rm -f /tmp/squat.stop; nohup python3 -c '${squat}' > /tmp/squat.out 2>&1 < /dev/null &`);
    try {
      // Re-listens (each a new pids limit, so a new cap on the relay's children) until one lost the
      // port to them, at most eight.
      for (let pids = 200; pids > 192; pids--) {
        await driver.ensure({ ...d, generation: 202 - pids, resources: { ...d.resources, pidsMax: pids } }).catch(() => {});
        if ((await sh(d.id, "cat /tmp/squat.out")).includes("got")) break;
      }
      expect(await sh(d.id, "cat /tmp/squat.out")).toBe("");
      // The walls are all there: the proxy still decides (and denies `b`), the host's guard stands.
      expect(await curlDirect(d.id, `http://${b.ip}/`)).toBe(`traffic-proxy: egress denied: ${b.ip} is denied by denyOut "0.0.0.0/0"`);
      expect(execFileSync("nft", ["list", "tables"], { encoding: "utf8" })).toContain(`table inet kruise_veth_kr${nsPid(d.id)}`);
    } finally {
      await sh(d.id, "touch /tmp/squat.stop");
    }
  });

  it("the host's guard is keyed to the leased address, not to what eth0 says inside: root inside with CAP_NET_ADMIN that put another address first before its rules arrived still gets out only through the proxy", async () => {
    const d = desiredSandbox("ef", { allowInternetAccess: true });
    await driver.ensure(d);
    expect(await sh(d.id, `curl -s -m 5 http://${b.ip}/`)).toBe(`outside saw ${b.hostIp}`);
    const leased = addressOf(d.id);
    const gateway = asNetAdmin(d.id, ["ip", "-4", "route", "show", "default", "dev", "eth0"]).split(" ")[2]!;
    const gwMac = readFileSync("/sys/class/net/kruise0/address", "utf8").trim();
    const prefix = /inet \S+\/(\d+)/.exec(asNetAdmin(d.id, ["ip", "-4", "-o", "addr", "show", "dev", "eth0"]))![1]!;
    // Another address of the same subnet first (eth0's primary, what SIOCGIFADDR answers), the
    // leased one after it; the route and the gateway's MAC as they were.
    const other = leased.split(".").slice(0, 2).concat(["255", "254"]).join(".");
    asNetAdmin(d.id, ["ip", "addr", "flush", "dev", "eth0"]);
    asNetAdmin(d.id, ["ip", "addr", "add", `${other}/${prefix}`, "dev", "eth0"]);
    asNetAdmin(d.id, ["ip", "addr", "add", `${leased}/${prefix}`, "dev", "eth0"]);
    asNetAdmin(d.id, ["ip", "route", "replace", "default", "via", gateway, "dev", "eth0"]);
    asNetAdmin(d.id, ["ip", "neigh", "replace", gateway, "lladdr", gwMac, "dev", "eth0", "nud", "permanent"]);
    expect(await sh(d.id, `curl -s -m 5 --interface ${leased} http://${b.ip}/`)).toBe(`outside saw ${b.hostIp}`);
    // Its rules arrive: behind the proxy; then its own netfilter goes.
    await driver.ensure({ ...d, generation: 2, egress: STRICT });
    asNetAdmin(d.id, ["nft", "delete", "table", "ip", "kruise_egress"]);
    expect(await curlDirect(d.id, `http://${b.ip}/`, `-m 3 --interface ${leased} -o /dev/null -w '%{http_code}'; echo " $?"`)).toBe("000 28");
  });

  it("with the fast path off, nothing of it is there: no eth0, no set or gate, CAP_NET_RAW kept, and no relay command for it", async () => {
    const offDir = mkdtempSync(join(tmpdir(), "local-egress-off-"));
    const off = new LocalDriver({ dataDir: offDir, cgroupName: `${cgroupName}-off`, egressResolve, egressFastPath: false });
    const admits = vi.spyOn(PortRelay.prototype, "fastAdmit");
    const flushes = vi.spyOn(PortRelay.prototype, "fastFlush");
    const d = desired();
    try {
      await off.ensure(d);
      const shOff = async (script: string) => (await shIn(off, d.id, script)).stdout.trim();
      expect(await shOff(`env -u HTTP_PROXY -u http_proxy curl -s -m 5 http://${a.ip}/`)).toBe(fromA());
      expect(await shOff(`env -u HTTP_PROXY -u http_proxy curl -s -m 5 http://${a.ip}/`)).toBe(fromA());
      // A change of its rules, with a connection allowed before and after.
      await off.ensure({ ...d, generation: 2, egress: { allowOut: [a.ip, b.ip], denyOut: ["0.0.0.0/0"] } });
      expect(await shOff(`env -u HTTP_PROXY -u http_proxy curl -s -m 5 http://${b.ip}/`)).toBe(`outside saw ${b.hostIp}`);
      expect(admits).not.toHaveBeenCalled();
      expect(flushes).not.toHaveBeenCalled();
      const rules = execFileSync("nsenter", [`--net=/proc/${readRecord(layoutFor(offDir, d.id).record)!.nsInit!.pid}/ns/net`, "nft", "list", "table", "ip", "kruise_egress"], { encoding: "utf8" });
      expect(rules).toContain("redirect to :");
      expect(rules).not.toMatch(/set fast|chain gate/);
      expect(await shOff("tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '")).toBe("lo");
      const capBnd = BigInt(`0x${await shOff("grep CapBnd /proc/self/status | cut -f2")}`);
      expect((capBnd >> 13n) & 1n).toBe(1n); // CAP_NET_RAW
    } finally {
      admits.mockRestore();
      flushes.mockRestore();
      await destroyAll(off, offDir);
    }
  });
});
