// Egress rules of local sandboxes: the sandbox has its own network namespace whose only way out
// is the traffic-proxy on its loopback (HTTP_PROXY), which applies the rules; nothing else leaves.
import { createServer, type Server } from "node:http";
import { createServer as createNetServer, type Server as NetServer } from "node:net";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from "vitest";
import type { DesiredSandbox } from "../../../../controllers/drivers/driver.ts";
import { LocalDriver } from "../../../../controllers/drivers/local/local-driver.ts";
import { startOutside } from "./outside-net.ts";

const dataDir = mkdtempSync(join(tmpdir(), "local-egress-"));
const cgroupName = `kruise-test-${process.pid}-egress`;
let driver = new LocalDriver({ dataDir, cgroupName });
const USER = { name: "user", uid: 1000, gid: 1000, home: "/home/user", shell: "/bin/bash" };
const STRICT = { allowOut: ["127.0.0.1"], denyOut: ["0.0.0.0/0"] };
let seq = 0;
let host: Server;
let port = 0;
let echo: NetServer;
let echoPort = 0;

function desired(over: Partial<DesiredSandbox> = {}): DesiredSandbox {
  return { id: `eg${process.pid}x${seq++}`, generation: 1, template: "base", state: "Running", pauseStrategy: "Freeze", resources: { cpuCount: 1, memoryMB: 256 }, allowInternetAccess: true, egress: STRICT, ...over };
}

async function sh(id: string, script: string): Promise<string> {
  const r = await driver.exec(id, { cmd: "/bin/bash", args: ["-c", script], cwd: USER.home, env: { PATH: "/usr/bin:/bin" }, user: USER }, { timeoutMs: 20_000 });
  return r.stdout.trim();
}

/** What curl gets for http://<ip>:<port>/ through the sandbox's proxy. The host's loopback
 * stands in for "outside" here; inside the sandbox 127.0.0.1 is its own loopback, which the
 * sandbox's NO_PROXY rightly keeps local, so this one request drops NO_PROXY. */
const curl = (id: string, ip: string, opts = "") => sh(id, `env -u NO_PROXY -u no_proxy curl -s -m 5 ${opts} http://${ip}:${port}/`);
/** Whether a plain TCP connect (no proxy) from inside reaches the host's server. */
const rawConnect = (id: string, ip: string) =>
  sh(id, `python3 -c 'import socket; s=socket.socket(); s.settimeout(2); print(s.connect_ex(("${ip}", ${port})))'`).then((out) => out === "0");

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

/** A CONNECT tunnel from inside the sandbox to the host's echo server, kept in use until it
 * closes (prints "closed") or 8 s pass (prints "still open"). */
const tunnelScript = (ip: string) => [
  "import socket, time",
  'print(open("/dev/null").read(), end="")',
  `s = socket.create_connection(("127.0.0.1", 3128))`,
  `s.sendall(b"CONNECT ${ip}:%d HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n" % ${echoPort})`,
  'print(s.recv(100).split(b"\\r\\n")[0].decode(), flush=True)',
  "for i in range(80):",
  "    try:",
  '        s.sendall(b"x"); r = s.recv(1)',
  "    except OSError:",
  '        r = b""',
  "    if not r:",
  '        print("closed", flush=True); break',
  "    time.sleep(0.1)",
  "else:",
  '    print("still open", flush=True)',
].join("\n");

async function waitFor<T>(fn: () => Promise<T> | T, ok: (v: T) => boolean, ms = 10_000): Promise<T> {
  let v = await fn();
  for (const deadline = Date.now() + ms; !ok(v) && Date.now() < deadline; await sleep(100)) v = await fn();
  return v;
}

beforeAll(async () => {
  host = createServer((req, res) => res.end(`host server via ${req.socket.localAddress}`));
  // On every address, so that only the rules keep a sandbox from 127.0.0.2.
  await new Promise<void>((ok) => host.listen(0, "0.0.0.0", ok));
  port = (host.address() as { port: number }).port;
  echo = createNetServer((s) => s.on("error", () => {}).pipe(s));
  await new Promise<void>((ok) => echo.listen(0, "0.0.0.0", ok));
  echoPort = (echo.address() as { port: number }).port;
});

afterAll(async () => {
  host.close();
  echo.close();
  for (const s of await driver.list()) await driver.destroy(s.id);
  driver.dispose();
  rmSync(dataDir, { recursive: true, force: true });
});

describe("local sandboxes with egress rules", () => {
  it("reach allowed destinations through the proxy only: denied ones get a 403, raw TCP goes nowhere", async () => {
    const d = desired();
    await driver.ensure(d);
    expect(await sh(d.id, "echo $HTTP_PROXY $https_proxy $NO_PROXY")).toBe("http://127.0.0.1:3128 http://127.0.0.1:3128 localhost,127.0.0.1,::1");
    expect(await curl(d.id, "127.0.0.1")).toBe("host server via 127.0.0.1");
    expect(await curl(d.id, "127.0.0.2")).toBe('traffic-proxy: egress denied: 127.0.0.2 is denied by denyOut "0.0.0.0/0"');
    // TLS goes by CONNECT, refused before any tunnel.
    expect(await sh(d.id, `env -u NO_PROXY curl -s -m 5 -o /dev/null -w '%{http_connect}' https://127.0.0.2:${port}/; echo " $?"`)).toBe("403 56");
    expect(await rawConnect(d.id, "127.0.0.1")).toBe(false);
    expect(await rawConnect(d.id, "127.0.0.2")).toBe(false);
    // A process that ignores the proxy variables has no way out at all: loopback is the only
    // interface, and there is no route.
    expect(await sh(d.id, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '")).toBe("lo");
    expect(await sh(d.id, "tail -n +2 /proc/net/route | wc -l")).toBe("0");
  });

  it("a warm member claimed with rules moves behind the proxy; new rules apply to the next request", async () => {
    const d = desired({ egress: null });
    await driver.ensure(d);
    const outside = await startOutside();
    onTestFinished(() => outside.stop());
    const direct = () => sh(d.id, `env -u HTTP_PROXY -u http_proxy curl -s -m 3 http://${outside.ip}/`);
    expect(await direct()).toBe(`outside saw ${outside.hostIp}`);
    await driver.ensure({ ...d, generation: 2, egress: STRICT });
    expect(await direct()).toBe("");
    expect(await rawConnect(d.id, "127.0.0.2")).toBe(false);
    expect(await curl(d.id, "127.0.0.2")).toMatch(/^traffic-proxy: egress denied/);
    expect(await curl(d.id, "127.0.0.1")).toBe("host server via 127.0.0.1");
    const before = await sh(d.id, "cat /proc/1/stat | cut -d' ' -f22");
    await driver.ensure({ ...d, generation: 3, egress: { allowOut: ["127.0.0.2"], denyOut: ["0.0.0.0/0"] } });
    expect(await curl(d.id, "127.0.0.2")).toBe("host server via 127.0.0.2");
    expect(await curl(d.id, "127.0.0.1")).toMatch(/^traffic-proxy: egress denied/);
    // Rules changed without restarting the sandbox.
    expect(await sh(d.id, "cat /proc/1/stat | cut -d' ' -f22")).toBe(before);
    // Back to no rules: straight out again (through its own veth: the host's loopback stays out of reach).
    await driver.ensure({ ...d, generation: 4, egress: null });
    expect(await direct()).toBe(`outside saw ${outside.hostIp}`);
    expect(await rawConnect(d.id, "127.0.0.2")).toBe(false);
    expect(await sh(d.id, "echo \"[$HTTP_PROXY]\"")).toBe("[]");
  });

  it("allowInternetAccess:false with allowOut entries is an allow list (E2B: false means denyOut ALL_TRAFFIC)", async () => {
    const d = desired({ allowInternetAccess: false, egress: { allowOut: ["127.0.0.1"], denyOut: [] } });
    await driver.ensure(d);
    expect(await curl(d.id, "127.0.0.1")).toBe("host server via 127.0.0.1");
    expect(await curl(d.id, "127.0.0.2")).toMatch(/^traffic-proxy: egress denied/);
  });

  it("the proxy is back after a Stop pause and resume, and after the agent restarts", async () => {
    const d = desired({ pauseStrategy: "Stop" });
    await driver.ensure(d);
    await driver.ensure({ ...d, generation: 2, state: "Paused" });
    await driver.ensure({ ...d, generation: 3 });
    expect(await curl(d.id, "127.0.0.1")).toBe("host server via 127.0.0.1");
    // A new agent: the old one's relay (and its listeners) died with it.
    driver.dispose();
    driver = new LocalDriver({ dataDir, cgroupName });
    await driver.ensure({ ...d, generation: 3 });
    expect(await curl(d.id, "127.0.0.1")).toBe("host server via 127.0.0.1");
    expect(await curl(d.id, "127.0.0.2")).toMatch(/^traffic-proxy: egress denied/);
  });

  it("a relay that dies is restarted with the listeners of every sandbox with rules", async () => {
    const d = desired();
    await driver.ensure(d);
    expect(await curl(d.id, "127.0.0.1")).toBe("host server via 127.0.0.1");
    const pid = relayPid();
    expect(pid).toBeDefined();
    process.kill(pid!, "SIGKILL");
    let answer = "";
    for (const deadline = Date.now() + 10_000; Date.now() < deadline && !answer; await sleep(100)) {
      answer = await curl(d.id, "127.0.0.1");
    }
    expect(answer).toBe("host server via 127.0.0.1");
    expect(relayPid()).not.toBe(pid);
  });

  it("connections through the proxy port are the sandbox's processes: they join its cgroups and its pids limit bounds them", async () => {
    expect(driver.capabilities.limits.pids).toBe(true);
    const d = desired({ resources: { cpuCount: 1, memoryMB: 256, pidsMax: 40 } });
    await driver.ensure(d);
    const py = ["import socket, time", "ss = []", "for i in range(200):", "    ss.append(socket.create_connection((\"127.0.0.1\", 3128)))", "time.sleep(3)"].join("\n");
    await background(d.id, "hold", py);
    const relay = relayPid()!;
    const held = await waitFor(() => childrenOf(relay), (k) => k.length >= 30, 3000);
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
    expect(await waitFor(() => curl(d.id, "127.0.0.1").catch(() => ""), (a) => a.startsWith("host server"))).toBe("host server via 127.0.0.1");
    await driver.destroy(d.id);
    expect(childrenOf(relay)).toEqual([]);
  });

  it("a rule change ends the open tunnels the new rules deny; moving to no network ends them all", async () => {
    const d = desired();
    await driver.ensure(d);
    await background(d.id, "t1", tunnelScript("127.0.0.1"));
    await waitFor(() => sh(d.id, "cat /tmp/t1.out"), (o) => o.includes("200"));
    await driver.ensure({ ...d, generation: 2, egress: { allowOut: ["127.0.0.0/8"], denyOut: ["0.0.0.0/0"] } });
    await sleep(300);
    expect(await sh(d.id, "cat /tmp/t1.out")).toBe("HTTP/1.1 200 Connection Established");
    await driver.ensure({ ...d, generation: 3, egress: { allowOut: ["127.0.0.2"], denyOut: ["0.0.0.0/0"] } });
    expect(await waitFor(() => sh(d.id, "cat /tmp/t1.out"), (o) => o.includes("\n"), 3000)).toBe("HTTP/1.1 200 Connection Established\nclosed");

    await background(d.id, "t2", tunnelScript("127.0.0.2"));
    await waitFor(() => sh(d.id, "cat /tmp/t2.out"), (o) => o.includes("200"));
    await driver.ensure({ ...d, generation: 4, allowInternetAccess: false, egress: null });
    expect(await waitFor(() => sh(d.id, "cat /tmp/t2.out"), (o) => o.includes("\n"), 3000)).toBe("HTTP/1.1 200 Connection Established\nclosed");
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
    expect(await waitFor(() => sh(d.id, "cat /tmp/squat.out"), (o) => o.endsWith("left"), 5000)).toBe("bound\nleft");
    await driver.ensure({ ...d, generation: 2 });
    expect(await curl(d.id, "127.0.0.1")).toBe("host server via 127.0.0.1");
  });
});
