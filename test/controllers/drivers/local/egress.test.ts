// Egress rules of local sandboxes: the sandbox has its own network namespace whose only way out
// is the traffic-proxy on its loopback (HTTP_PROXY), which applies the rules; nothing else leaves.
// Two namespaces standing in for the internet (outside-net.ts) are the destinations: `a`, which
// the rules allow, and `b`, which they deny. The proxy connects from the host, so they see the
// host's address on their link. The host's own services, its loopback and other sandboxes are
// never reached through the proxy, whatever the rules say.
import { execFileSync } from "node:child_process";
import { createServer, type Server } from "node:http";
import { mkdtempSync, readdirSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { DesiredSandbox } from "../../../../controllers/drivers/driver.ts";
import { LocalDriver } from "../../../../controllers/drivers/local/local-driver.ts";
import { layoutFor } from "../../../../controllers/drivers/local/layout.ts";
import { readRecord } from "../../../../controllers/drivers/local/records.ts";
import { startOutside, type Outside } from "../../../support/outside-net.ts";
import { desiredSandbox, destroyAll, pollUntil, shIn } from "./fixture.ts";

const dataDir = mkdtempSync(join(tmpdir(), "local-egress-"));
const cgroupName = `kruise-test-${process.pid}-egress`;
/** DNS for the proxy: names the stand-ins answer to (set once they exist); any other name does
 * not exist. Never the host's resolver, which would ask real DNS servers. */
const names: Record<string, string[]> = {};
const egressResolve = async (host: string) => names[host] ?? Promise.reject(Object.assign(new Error(`${host} not found`), { code: "ENOTFOUND" }));
let driver = new LocalDriver({ dataDir, cgroupName, egressResolve });
let a: Outside;
let b: Outside;
/** Allows `a` only (set once `a` exists). */
let STRICT = { allowOut: [] as string[], denyOut: ["0.0.0.0/0"] };
let host: Server;
let port = 0;

function desired(over: Partial<DesiredSandbox> = {}): DesiredSandbox {
  return desiredSandbox("eg", { allowInternetAccess: true, egress: STRICT, ...over });
}

async function sh(id: string, script: string): Promise<string> {
  return (await shIn(driver, id, script)).stdout.trim();
}

/** What curl gets for http://<host>/ (port 80: the stand-ins' server) through the sandbox's proxy. */
const curl = (id: string, host: string) => sh(id, `curl -s -m 5 http://${host}/`);
/** What curl gets from the host's own server through the proxy; NO_PROXY is dropped so that
 * 127.0.0.1 too goes to the proxy rather than to the sandbox's own loopback. */
const curlHost = (id: string, ip: string, p = port) => sh(id, `env -u NO_PROXY -u no_proxy curl -s -m 5 http://${ip}:${p}/`);
/** What `a` answers a request the proxy forwarded (it sees the host's address on its link). */
const fromA = () => `outside saw ${a.hostIp}`;
/** Whether raw TCP (no proxy, bytes that are not HTTP) from inside gets an answer from port 80
 * of `ip`: the stand-in's server answers them with an error page. The connect itself always
 * succeeds in a sandbox with rules (it ends at the redirect), so only an answer proves the way out. */
const rawConnect = (id: string, ip: string) =>
  sh(id, `python3 -c 'import socket; s=socket.create_connection(("${ip}", 80), 3); s.settimeout(3); s.sendall(b"hello\\r\\n\\r\\n"); print(b"400" in s.recv(4096))'`).then((out) => out === "True");
/** curl with no proxy variables at all: only the redirect in the sandbox's namespace governs it. */
const curlDirect = (id: string, url: string, args = "") => sh(id, `env -u HTTP_PROXY -u http_proxy -u HTTPS_PROXY -u https_proxy curl -s -m 5 ${url} ${args}`);

/** The processes whose parent is `parent`, with their command lines. */
function childrenOf(parent: number): { pid: number; cmdline: string }[] {
  const out: { pid: number; cmdline: string }[] = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, "utf8");
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      if (ppid === parent) out.push({ pid: Number(name), cmdline: readFileSync(`/proc/${name}/cmdline`, "utf8") });
    } catch {
      // gone meanwhile
    }
  }
  return out;
}

/** The pid of this process's port relay (a child running port-relay.pl), if one runs. */
function relayPid(): number | undefined {
  return childrenOf(process.pid).find((p) => p.cmdline.includes("port-relay.pl"))?.pid;
}

/** Python run in the background of a sandbox, its output in /tmp/<name>.out there. */
const background = (id: string, name: string, py: string) => sh(id, `nohup python3 -c '${py}' > /tmp/${name}.out 2>&1 < /dev/null &`);

/** A CONNECT tunnel from inside the sandbox to port 80 of `ip`, kept in use (a request whose
 * header lines come one at a time, which the server waits for) until it closes (prints "closed")
 * or 8 s pass (prints "still open"). */
const tunnelScript = (ip: string) => [
  "import socket, time",
  `s = socket.create_connection(("127.0.0.1", 3128))`,
  `s.sendall(b"CONNECT ${ip}:80 HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n")`,
  'print(s.recv(100).split(b"\\r\\n")[0].decode(), flush=True)',
  's.sendall(b"GET / HTTP/1.1\\r\\n"); s.settimeout(0.1)',
  "for i in range(80):",
  "    try:",
  '        s.sendall(b"x-wait: %d\\r\\n" % i); r = s.recv(1)',
  "    except socket.timeout:",
  "        continue",
  "    except OSError:",
  '        r = b""',
  "    if not r:",
  '        print("closed", flush=True); break',
  "else:",
  '    print("still open", flush=True)',
].join("\n");

beforeAll(async () => {
  host = createServer((req, res) => res.end(`host server via ${req.socket.localAddress}`));
  // On every address: the host's loopback, its address on the link to `a`, the bridge.
  await new Promise<void>((ok) => host.listen(0, "0.0.0.0", ok));
  port = (host.address() as { port: number }).port;
  a = await startOutside({ privateHost: true });
  b = await startOutside();
  STRICT = { allowOut: [a.ip], denyOut: ["0.0.0.0/0"] };
  Object.assign(names, { localhost: ["::1", "127.0.0.1"], "a.example.test": [a.ip], "b.example.test": [b.ip], "alias-of-a.test": [a.ip] });
});

afterAll(async () => {
  host.close();
  a?.stop();
  b?.stop();
  await destroyAll(driver, dataDir);
});

describe("local sandboxes with egress rules", () => {
  it("reach allowed destinations through the proxy only: denied ones get a 403, raw TCP goes nowhere", async () => {
    const d = desired();
    await driver.ensure(d);
    expect(await sh(d.id, "echo $HTTP_PROXY $https_proxy $NO_PROXY")).toBe("http://127.0.0.1:3128 http://127.0.0.1:3128 localhost,127.0.0.1,::1");
    expect(await curl(d.id, a.ip)).toBe(fromA());
    expect(await curl(d.id, b.ip)).toBe(`traffic-proxy: egress denied: ${b.ip} is denied by denyOut "0.0.0.0/0"`);
    // TLS goes by CONNECT, refused before any tunnel.
    expect(await sh(d.id, `curl -s -m 5 -o /dev/null -w '%{http_connect}' https://${b.ip}/; echo " $?"`)).toBe("403 56");
    // A process that ignores the proxy variables is governed all the same: every TCP connection
    // is redirected to the proxy, which judges where it was going.
    expect(await rawConnect(d.id, a.ip)).toBe(true);
    expect(await rawConnect(d.id, b.ip)).toBe(false);
    expect(await curlDirect(d.id, `http://${a.ip}/`)).toBe(fromA());
    expect(await curlDirect(d.id, `http://${b.ip}/`)).toBe(`traffic-proxy: egress denied: ${b.ip} is denied by denyOut "0.0.0.0/0"`);
    // TLS without CONNECT and without a name (an address) is judged by the address: refused.
    expect(await curlDirect(d.id, `https://${b.ip}/`, "-k -o /dev/null; echo $?")).toMatch(/^(35|52|56)$/);
    // Loopback, and eth0 for the kernel's fast path only (egress-fast.test.ts): raw TCP to `b`
    // above found no way out by it.
    expect(await sh(d.id, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | sort | tr '\\n' ' '")).toBe("eth0 lo");
  });

  it("DNS comes from the proxy: a name the rules admit resolves and its address is reached by name rule, even by raw TCP; others do not resolve", async () => {
    const d = desired({ egress: { allowOut: ["*.example.test"], denyOut: ["0.0.0.0/0"] } });
    await driver.ensure(d);
    expect(await sh(d.id, "getent ahostsv4 a.example.test | head -1 | cut -d' ' -f1")).toBe(a.ip);
    // Not admissible by any rule (and denyOut covers every address): NXDOMAIN, never looked up.
    expect(await sh(d.id, "getent hosts alias-of-a.test; echo $?")).toBe("2");
    // Over TCP too (python: a DNS query by hand, to the resolver resolv.conf names).
    const tcpQuery = [
      "import socket, struct",
      'ns = [l.split()[1] for l in open("/etc/resolv.conf") if l.startswith("nameserver")][0]',
      'q = struct.pack("!HHHHHH", 7, 0x100, 1, 0, 0, 0) + b"".join(bytes([len(p)]) + p for p in b"b.example.test".split(b".")) + b"\\0" + struct.pack("!HH", 1, 1)',
      "s = socket.create_connection((ns, 53), 3); s.sendall(struct.pack(\"!H\", len(q)) + q)",
      "r = s.recv(512)[2:]; print(r[3] & 15, socket.inet_ntoa(r[-4:]))",
    ].join("\n");
    expect(await sh(d.id, `python3 -c '${tcpQuery}'`)).toBe(`0 ${b.ip}`);
    // An address under a name the rules do not allow, by Host: refused.
    expect(await curlDirect(d.id, `http://${a.ip}/`, "-H 'Host: alias-of-a.test'")).toMatch(/^traffic-proxy: egress denied: alias-of-a.test is not allowed by name/);
    // By name, without proxy variables: the Host names it.
    expect(await curlDirect(d.id, "http://a.example.test/")).toBe(fromA());
    // Raw TCP by name, no name in the bytes: admitted because this sandbox was answered that
    // address for a name the rules allow.
    expect(await rawConnect(d.id, "b.example.test")).toBe(true);
    // Once a name admitted the address, the kernel's fast path stands for the name until its TTL
    // ends: another Host at that address is not read (traffic/README.md, "The kernel's fast path").
    expect(await pollUntil(() => curlDirect(d.id, `http://${a.ip}/`, "-H 'Host: alias-of-a.test'"), (o) => o === fromA())).toBe(fromA());
  });

  it("the sandbox cannot remove the redirect: root inside has no CAP_NET_ADMIN over its network namespace (userns must keep it so)", async () => {
    const d = desired();
    await driver.ensure(d);
    const root = { name: "root", uid: 0, gid: 0, home: "/root", shell: "/bin/bash" };
    // The sandbox's image has no nft; what nft would do (netlink to the namespace's netfilter and
    // routes) needs CAP_NET_ADMIN, which root inside lacks (bit 12 of its effective set).
    const capEff = BigInt(`0x${(await shIn(driver, d.id, "grep CapEff /proc/self/status | cut -f2", root)).stdout.trim()}`);
    expect((capEff >> 12n) & 1n).toBe(0n);
    const out = await shIn(driver, d.id, "ip route del default dev lo; echo ip=$?; ip addr del 127.0.0.2/32 dev lo; echo addr=$?", root);
    expect(out.stdout).toMatch(/ip=[1-9]/);
    expect(out.stdout).toMatch(/addr=[1-9]/);
    expect(out.stderr).toContain("Operation not permitted");
    expect(await rawConnect(d.id, b.ip)).toBe(false);
    expect(await curlDirect(d.id, `http://${b.ip}/`)).toMatch(/^traffic-proxy: egress denied/);
  });

  it("rules that allow everything still reach neither the host (loopback, its addresses, the bridge) nor another sandbox nor link-local", async () => {
    const d = desired({ egress: { allowOut: ["0.0.0.0/0", "localhost"], denyOut: [] } });
    const other = desired({ egress: null });
    await Promise.all([driver.ensure(d), driver.ensure(other)]);
    await sh(other.id, "cd /tmp && echo other > index.html && (nohup python3 -m http.server 8000 >/dev/null 2>&1 &)");
    const otherIp = readRecord(layoutFor(dataDir, other.id).record)!.net!.address;
    const gateway = "10.88.0.1";
    // The host reaches all of these: only the proxy keeps the sandbox from them.
    const fromHost = (url: string) => fetch(url).then((r) => r.text(), () => "");
    expect(await fromHost(`http://${a.hostIp}:${port}/`)).toBe(`host server via ${a.hostIp}`);
    expect(await fromHost(`http://${gateway}:${port}/`)).toBe(`host server via ${gateway}`);
    expect(await pollUntil(() => fromHost(`http://${otherIp}:8000/`), (t) => t === "other\n")).toBe("other\n");
    // The same rules do let the sandbox out.
    expect(await curl(d.id, a.ip)).toBe(fromA());
    const denied = "traffic-proxy: egress denied:";
    expect(await curlHost(d.id, "127.0.0.1")).toBe(`${denied} 127.0.0.1 is loopback, never reached through the proxy (a sandbox's own loopback is not proxied; the proxy's would be the host's)`);
    expect(await curlHost(d.id, "localhost")).toMatch(/^traffic-proxy: egress denied: localhost \([0-9a-f:.]+\) is loopback/);
    expect(await curlHost(d.id, a.hostIp)).toBe(`${denied} ${a.hostIp} is an address of the agent's host, never reached through the proxy (its services are not a sandbox's to reach)`);
    expect(await curlHost(d.id, gateway)).toContain(`${denied} ${gateway} is an address of the agent's host`);
    expect(await curlHost(d.id, otherIp, 8000)).toBe(`${denied} ${otherIp} is in the sandbox network 10.88.0.0/16 (other sandboxes), never reached through the proxy`);
    expect(await curl(d.id, "169.254.169.254")).toContain(`${denied} 169.254.169.254 is link-local`);
    // TLS alike: refused before any tunnel.
    expect(await sh(d.id, `env -u NO_PROXY -u no_proxy curl -s -m 5 -o /dev/null -w '%{http_connect}' https://127.0.0.1:${port}/; echo " $?"`)).toBe("403 56");
  });

  it("private ranges are refused unless allowOut names an address or block inside them", async () => {
    // `a` also answers at a private address (a LAN or VPC neighbour of the host's stand-in).
    const broad = desired({ egress: { allowOut: ["0.0.0.0/0"], denyOut: [] } });
    const named = desired({ egress: { allowOut: [a.privateIp!], denyOut: ["0.0.0.0/0"] } });
    const block = desired({ egress: { allowOut: ["172.30.0.0/16"], denyOut: [] } });
    await Promise.all([driver.ensure(broad), driver.ensure(named), driver.ensure(block)]);
    expect(await curl(broad.id, a.ip)).toBe(fromA());
    expect(await curl(broad.id, a.privateIp!)).toBe(`traffic-proxy: egress denied: ${a.privateIp} is in the private range 172.16.0.0/12, reached only when allowOut names an address or block inside it`);
    expect(await curl(named.id, a.privateIp!)).toBe(fromA());
    expect(await curl(block.id, a.privateIp!)).toBe(fromA());
  });

  it("a warm member claimed with rules moves behind the proxy; new rules apply to the next request", async () => {
    const d = desired({ egress: null });
    await driver.ensure(d);
    const direct = () => sh(d.id, `env -u HTTP_PROXY -u http_proxy curl -s -m 3 http://${a.ip}/`);
    expect(await direct()).toBe(fromA());
    await driver.ensure({ ...d, generation: 2, egress: STRICT });
    // Behind the proxy now, without proxy variables too: `a` is allowed, `b` is not.
    expect(await direct()).toBe(fromA());
    expect(await rawConnect(d.id, b.ip)).toBe(false);
    expect(await curl(d.id, b.ip)).toMatch(/^traffic-proxy: egress denied/);
    expect(await curl(d.id, a.ip)).toBe(fromA());
    const before = await sh(d.id, "cat /proc/1/stat | cut -d' ' -f22");
    await driver.ensure({ ...d, generation: 3, egress: { allowOut: [b.ip], denyOut: ["0.0.0.0/0"] } });
    expect(await curl(d.id, b.ip)).toBe(`outside saw ${b.hostIp}`);
    expect(await curl(d.id, a.ip)).toMatch(/^traffic-proxy: egress denied/);
    // Rules changed without restarting the sandbox.
    expect(await sh(d.id, "cat /proc/1/stat | cut -d' ' -f22")).toBe(before);
    // Back to no rules: straight out again (through its own veth: the host's loopback stays out of reach).
    await driver.ensure({ ...d, generation: 4, egress: null });
    expect(await direct()).toBe(fromA());
    expect(await sh(d.id, `python3 -c 'import socket; s=socket.socket(); s.settimeout(2); print(s.connect_ex(("127.0.0.2", ${port})))'`)).not.toBe("0");
    expect(await sh(d.id, "echo \"[$HTTP_PROXY]\"")).toBe("[]");
  });

  it("allowInternetAccess:false with allowOut entries is an allow list (E2B: false means denyOut ALL_TRAFFIC)", async () => {
    const d = desired({ allowInternetAccess: false, egress: { allowOut: [a.ip], denyOut: [] } });
    await driver.ensure(d);
    expect(await curl(d.id, a.ip)).toBe(fromA());
    expect(await curl(d.id, b.ip)).toMatch(/^traffic-proxy: egress denied/);
  });

  it("the proxy is back after a Stop pause and resume, and after the agent restarts", async () => {
    const d = desired({ pauseStrategy: "Stop" });
    await driver.ensure(d);
    await driver.ensure({ ...d, generation: 2, state: "Paused" });
    await driver.ensure({ ...d, generation: 3 });
    expect(await curl(d.id, a.ip)).toBe(fromA());
    // A new agent: the old one's relay (and its listeners) died with it. dispose() is async, and
    // the relay's sockets close only once the process is gone: wait for both.
    const oldRelay = relayPid();
    await driver.dispose();
    for (const deadline = Date.now() + 5_000; oldRelay && childrenOf(process.pid).some((p) => p.pid === oldRelay) && Date.now() < deadline; ) await sleep(50);
    driver = new LocalDriver({ dataDir, cgroupName, egressResolve });
    await driver.ensure({ ...d, generation: 3 });
    expect(await curl(d.id, a.ip)).toBe(fromA());
    expect(await curl(d.id, b.ip)).toMatch(/^traffic-proxy: egress denied/);
  });

  it("a relay that dies is restarted with the listeners of every sandbox with rules", async () => {
    const d = desired();
    await driver.ensure(d);
    expect(await curl(d.id, a.ip)).toBe(fromA());
    const pid = relayPid();
    expect(pid).toBeDefined();
    process.kill(pid!, "SIGKILL");
    let answer = "";
    for (const deadline = Date.now() + 10_000; Date.now() < deadline && !answer; await sleep(100)) {
      answer = await curl(d.id, a.ip);
    }
    expect(answer).toBe(fromA());
    expect(relayPid()).not.toBe(pid);
  });

  it("connections through the proxy port are the sandbox's processes: they join its cgroups and its pids limit bounds them", async () => {
    expect(driver.capabilities.limits.pids).toBe(true);
    const d = desired({ resources: { cpuCount: 1, memoryMB: 256, pidsMax: 40 } });
    await driver.ensure(d);
    const py = ["import socket, time", "ss = []", "for i in range(200):", "    ss.append(socket.create_connection((\"127.0.0.1\", 3128)))", "time.sleep(3)"].join("\n");
    await background(d.id, "hold", py);
    const relay = relayPid()!;
    const held = await pollUntil(() => childrenOf(relay), (k) => k.length >= 30, 3000);
    await sleep(500);
    const kids = childrenOf(relay);
    expect(held.length).toBeGreaterThan(0);
    expect(kids.length).toBeLessThanOrEqual(40);
    const cgroupsOf = (pid: number) => {
      try {
        return readFileSync(`/proc/${pid}/cgroup`, "utf8");
      } catch {
        return undefined; // gone meanwhile
      }
    };
    for (const k of kids) {
      const c = cgroupsOf(k.pid);
      if (c !== undefined) expect(c).toContain(`/${d.id}`);
    }
    // The sandbox's own processes and the children together stay within its pids.max.
    const line = /^\d+:pids:(.*)$/m.exec(cgroupsOf(kids[0]!.pid) ?? "") ?? /^0::(.*)$/m.exec(cgroupsOf(kids[0]!.pid) ?? "");
    const dir = line![0].includes(":pids:") ? `/sys/fs/cgroup/pids${line![1]}` : `/sys/fs/cgroup${line![1]}`;
    expect(Number(readFileSync(`${dir}/pids.current`, "utf8"))).toBeLessThanOrEqual(40);
    // Once the holder of those connections exits, the sandbox gets out again.
    expect(await pollUntil(() => curl(d.id, a.ip).catch(() => ""), (text) => text.startsWith("outside saw"))).toBe(fromA());
    await driver.destroy(d.id);
    expect(childrenOf(relay)).toEqual([]);
  });

  it("a rule change ends the open tunnels the new rules deny; moving to no network ends them all", async () => {
    const d = desired();
    await driver.ensure(d);
    await background(d.id, "t1", tunnelScript(a.ip));
    await pollUntil(() => sh(d.id, "cat /tmp/t1.out"), (o) => o.includes("200"));
    await driver.ensure({ ...d, generation: 2, egress: { allowOut: ["198.51.100.0/24"], denyOut: ["0.0.0.0/0"] } });
    await sleep(300);
    expect(await sh(d.id, "cat /tmp/t1.out")).toBe("HTTP/1.1 200 Connection Established");
    await driver.ensure({ ...d, generation: 3, egress: { allowOut: [b.ip], denyOut: ["0.0.0.0/0"] } });
    expect(await pollUntil(() => sh(d.id, "cat /tmp/t1.out"), (o) => o.includes("\n"), 3000)).toBe("HTTP/1.1 200 Connection Established\nclosed");

    await background(d.id, "t2", tunnelScript(b.ip));
    await pollUntil(() => sh(d.id, "cat /tmp/t2.out"), (o) => o.includes("200"));
    await driver.ensure({ ...d, generation: 4, allowInternetAccess: false, egress: null });
    expect(await pollUntil(() => sh(d.id, "cat /tmp/t2.out"), (o) => o.includes("\n"), 3000)).toBe("HTTP/1.1 200 Connection Established\nclosed");
  });

  it("a redirected connection (no proxy variables) is handed back to the relay's child, which reaches only where it was going; a rule change still ends it", async () => {
    const d = desired();
    await driver.ensure(d);
    // As tunnelScript, without the proxy: straight to port 80 of a, which the redirect brings to the proxy.
    const direct = tunnelScript(a.ip)
      .replace(`s = socket.create_connection(("127.0.0.1", 3128))`, `s = socket.create_connection(("${a.ip}", 80))`)
      .replace(/s\.sendall\(b"CONNECT[^\n]*\n[^\n]*\n/, 'print("open", flush=True)\n');
    await background(d.id, "r1", direct);
    await pollUntil(() => sh(d.id, "cat /tmp/r1.out"), (o) => o.includes("open"));
    // The connection to a is the relay child's (splice), not the agent's (this process).
    const holders = () => execFileSync("ss", ["-tnpH", "dst", `${a.ip}:80`], { encoding: "utf8" });
    expect(await pollUntil(async () => holders(), (o) => o.includes("perl"), 3000)).toContain('"perl"');
    expect(holders()).not.toContain('"node"');
    await driver.ensure({ ...d, generation: 2, egress: { allowOut: ["198.51.100.0/24"], denyOut: ["0.0.0.0/0"] } });
    await sleep(300);
    expect(await sh(d.id, "cat /tmp/r1.out")).toBe("open");
    await driver.ensure({ ...d, generation: 3, egress: { allowOut: [b.ip], denyOut: ["0.0.0.0/0"] } });
    expect(await pollUntil(() => sh(d.id, "cat /tmp/r1.out"), (o) => o.includes("\n"), 3000)).toBe("open\nclosed");
    expect(holders()).not.toContain("perl");
    // Bytes that would be a hand-back line to the relay go to the proxy as data: to a denied
    // destination they reach nothing, neither it nor the address they name.
    const forge = `python3 -c 'import socket; s=socket.create_connection(("${a.ip}", 80), 3); s.settimeout(3); s.sendall(b"S${b.ip} 80 0 0 0 0\\nGET / HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n"); print(b"outside saw" in s.recv(4096))'`;
    expect(await sh(d.id, forge)).toBe("False");
  });

  it("the proxy port is not a user port: the way in refuses it", async () => {
    const d = desired();
    await driver.ensure(d);
    await expect(driver.connectUserPort(d.id, 3128)).rejects.toThrow("port 3128 is the sandbox's egress proxy, not a user port");
  });

  it("a listener the restarted relay cannot reopen is reopened by the sandbox's next ensure", async () => {
    const d = desired();
    await driver.ensure(d);
    // Takes 127.0.0.1:3128 in the sandbox the moment the relay's listener is gone, for 1.5 s.
    const squat = [
      "import socket, time",
      "end = time.time() + 8",
      "while time.time() < end:",
      "    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)",
      "    try:",
      "        s.bind((\"127.0.0.1\", 3128)); s.listen(1); print(\"bound\", flush=True); break",
      "    except OSError:",
      "        s.close(); time.sleep(0.002)",
      "time.sleep(1.5)",
      "print(\"left\", flush=True)",
    ].join("\n");
    await background(d.id, "squat", squat);
    await sleep(300);
    process.kill(relayPid()!, "SIGKILL");
    // The restarted relay cannot listen while the squatter holds the port; then it leaves.
    expect(await pollUntil(() => sh(d.id, "cat /tmp/squat.out"), (o) => o.endsWith("left"), 5000)).toBe("bound\nleft");
    await driver.ensure({ ...d, generation: 2 });
    expect(await curl(d.id, a.ip)).toBe(fromA());
  });
});
