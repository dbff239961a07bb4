// E2B egress rules (`network.allowOut` / `denyOut`) through the real SDK: a sandbox with rules
// reaches what they allow through the traffic-proxy (HTTP_PROXY), gets a 403 for the rest, and
// has no other way out; a sandbox without rules goes out directly. Two namespaces on this machine
// stand in for the internet (outside-net.ts): `a`, which the rules allow, and `b`, which they deny.
// The proxy connects from the host, so they see the host's address on their link. Whatever the
// rules say, the proxy never reaches the host itself (its loopback, its addresses, the bridge) or
// another sandbox.
import { createServer, type Server } from "node:http";
import { ALL_TRAFFIC, Sandbox, type SandboxOpts } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startOutside, type Outside } from "../support/outside-net.ts";
import { e2b, sleep } from "./sdk.ts";

let a: Outside;
let b: Outside;
/** A service of the host's on every address (loopback, the bridge, its link to `a`). */
let host: Server;
let hostPort = 0;
const created: Sandbox[] = [];

beforeAll(async () => {
  a = await startOutside();
  b = await startOutside();
  host = createServer((_req, res) => res.end("host secret"));
  await new Promise<void>((ok) => host.listen(0, "0.0.0.0", ok));
  hostPort = (host.address() as { port: number }).port;
});

afterAll(async () => {
  await Promise.all(created.map((s) => s.kill().catch(() => false)));
  host?.close();
  a?.stop();
  b?.stop();
});

async function create(opts: SandboxOpts = {}): Promise<Sandbox> {
  const sbx = await Sandbox.create({ ...e2b(), ...opts });
  created.push(sbx);
  return sbx;
}

async function run(sbx: Sandbox, cmd: string): Promise<string> {
  const r = await sbx.commands.run(cmd).catch((err: { stdout?: string }) => err);
  return (r.stdout ?? "").trim();
}

/** curl http://<host>/ (the stand-ins' port 80) with the sandbox's proxy settings. */
const curl = (sbx: Sandbox, host: string) => run(sbx, `curl -s -m 5 http://${host}/`);
/** curl through the proxy to a host's port; NO_PROXY is dropped so that loopback goes to the
 * proxy too instead of the sandbox's own loopback. */
const curlVia = (sbx: Sandbox, host: string, port: number) => run(sbx, `env -u NO_PROXY -u no_proxy curl -s -m 5 http://${host}:${port}/`);
/** Whether raw TCP (no proxy, bytes that are not HTTP) from inside gets an answer from `ip`'s
 * port 80 (the stand-in's error page): the connect alone ends at the redirect in the sandbox. */
const rawConnect = (sbx: Sandbox, ip: string) =>
  run(sbx, `python3 -c 'import socket; s=socket.create_connection(("${ip}", 80), 3); s.settimeout(3); s.sendall(b"hello\\r\\n\\r\\n"); print(b"400" in s.recv(4096))'`).then((out) => out === "True");
const denied = "traffic-proxy: egress denied:";

describe("network egress rules", () => {
  it("denyOut ALL_TRAFFIC + allowOut one address: curl reaches it only, and raw TCP is governed the same", async () => {
    const sbx = await create({ network: { denyOut: [ALL_TRAFFIC], allowOut: [a.ip] } });
    expect(await run(sbx, "echo $HTTPS_PROXY")).toBe("http://127.0.0.1:3128");
    expect(await curl(sbx, a.ip)).toBe(`outside saw ${a.hostIp}`);
    expect(await curl(sbx, b.ip)).toBe(`${denied} ${b.ip} is denied by denyOut "0.0.0.0/0"`);
    expect(await rawConnect(sbx, a.ip)).toBe(true);
    expect(await rawConnect(sbx, b.ip)).toBe(false);
  });

  it("a domain in allowOut is allowed by name, never at the host's loopback (localhost), and other names are not resolved", async () => {
    const sbx = await create({ network: { denyOut: [ALL_TRAFFIC], allowOut: ["localhost"] } });
    // The proxy resolves names on the host, where localhost is the host's loopback.
    expect(await curlVia(sbx, "localhost", hostPort)).toMatch(/^traffic-proxy: egress denied: localhost \([0-9a-f:.]+\) is loopback, never reached through the proxy/);
    expect(await curl(sbx, a.ip)).toBe(`${denied} ${a.ip} is denied by denyOut "0.0.0.0/0"`);
    expect(await curl(sbx, "c2VjcmV0.example.com")).toBe(`${denied} c2vjcmv0.example.com is not allowed by name, and denyOut covers every address (not resolved)`);
  });

  it("rules that allow everything reach the internet but not the host (loopback, the edge, its addresses, the bridge) nor another sandbox", async () => {
    const sbx = await create({ network: { allowOut: [ALL_TRAFFIC] } });
    const other = await create();
    await other.commands.run("cd /tmp && echo other > index.html && python3 -m http.server 8000 >/dev/null 2>&1", { background: true });
    // Its address: the source of a route lookup (no packet is sent).
    const otherIp = await run(other, `python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.connect(("${a.ip}", 9)); print(s.getsockname()[0])'`);
    expect(otherIp).toMatch(/^10\.88\./);
    expect(await curl(sbx, a.ip)).toBe(`outside saw ${a.hostIp}`);
    const edgePort = Number(new URL(e2b().apiUrl).port);
    expect(await curlVia(sbx, "127.0.0.1", hostPort)).toMatch(new RegExp(`^${denied} 127\\.0\\.0\\.1 is loopback`));
    expect(await curlVia(sbx, "127.0.0.1", edgePort)).toMatch(new RegExp(`^${denied} 127\\.0\\.0\\.1 is loopback`));
    expect(await curlVia(sbx, a.hostIp, hostPort)).toBe(`${denied} ${a.hostIp} is an address of the agent's host, never reached through the proxy (its services are not a sandbox's to reach)`);
    expect(await curlVia(sbx, "10.88.0.1", hostPort)).toContain(`${denied} 10.88.0.1 is an address of the agent's host`);
    let served = "";
    for (const deadline = Date.now() + 10_000; Date.now() < deadline && served !== "other"; await sleep(200)) {
      served = await run(other, "curl -s -m 2 http://127.0.0.1:8000/");
    }
    expect(served).toBe("other");
    expect(await curlVia(sbx, otherIp, 8000)).toBe(`${denied} ${otherIp} is in the sandbox network 10.88.0.0/16 (other sandboxes), never reached through the proxy`);
    expect(await curl(sbx, "169.254.169.254")).toContain(`${denied} 169.254.169.254 is link-local`);
  });

  it("user ports of a sandbox with rules still answer through the gateway", async () => {
    const sbx = await create({ network: { denyOut: [ALL_TRAFFIC] } });
    await sbx.commands.run("cd /tmp && echo inside > index.html && python3 -m http.server 8002 >/dev/null 2>&1", { background: true });
    const headers = { "e2b-sandbox-id": sbx.sandboxId, "e2b-sandbox-port": "8002" };
    let text = "";
    for (const deadline = Date.now() + 10_000; Date.now() < deadline && text !== "inside\n"; await sleep(200)) {
      const res = await fetch(`${e2b().apiUrl}/index.html`, { headers }).catch(() => undefined);
      text = res?.ok ? await res.text() : "";
    }
    expect(text).toBe("inside\n");
    // The proxy's port is not one of them: from outside it would be a proxy under the sandbox's rules.
    const proxyPort = await fetch(`${e2b().apiUrl}/`, { headers: { ...headers, "e2b-sandbox-port": "3128" } });
    expect(proxyPort.status).toBe(502);
    expect(await proxyPort.text()).toContain("port 3128 is the sandbox's egress proxy, not a user port");
  });

  it("a sandbox without rules goes out directly, with no proxy, and not to the host's loopback", async () => {
    const sbx = await create();
    expect(await run(sbx, `curl -s -m 5 http://${a.ip}/`)).toBe(`outside saw ${a.hostIp}`);
    // Its own network namespace: 127.0.0.1 is its own loopback, not the host's.
    expect(await run(sbx, `python3 -c 'import socket; s=socket.socket(); s.settimeout(2); print(s.connect_ex(("127.0.0.1", ${hostPort})))'`)).not.toBe("0");
    expect(await run(sbx, 'echo "[$HTTP_PROXY]"')).toBe("[]");
  });
});
