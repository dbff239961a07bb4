// E2B egress rules (`network.allowOut` / `denyOut`) through the real SDK: a sandbox with rules
// reaches what they allow through the traffic-proxy (HTTP_PROXY), gets a 403 for the rest, and
// has no other way out; a sandbox without rules goes out directly. The test's own HTTP server on the
// host's loopback stands in for "outside" (all of 127/8 is local, so 127.0.0.2 is the same server
// at an address the rules deny).
import { createServer, type Server } from "node:http";
import { ALL_TRAFFIC, Sandbox, type SandboxOpts } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startOutside } from "../controllers/drivers/local/outside-net.ts";
import { e2b, sleep } from "./sdk.ts";

let server: Server;
let port = 0;
const created: Sandbox[] = [];

beforeAll(async () => {
  server = createServer((req, res) => res.end(`outside via ${req.socket.localAddress}`));
  await new Promise<void>((ok) => server.listen(0, "0.0.0.0", ok));
  port = (server.address() as { port: number }).port;
});

afterAll(async () => {
  await Promise.all(created.map((s) => s.kill().catch(() => false)));
  server.close();
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

/** curl through the sandbox's proxy settings. Inside the sandbox 127.0.0.1 is its own loopback,
 * which its NO_PROXY rightly keeps local; here the host's loopback plays "outside", so NO_PROXY
 * is dropped for this one command. */
const curl = (sbx: Sandbox, host: string) => run(sbx, `env -u NO_PROXY -u no_proxy curl -s -m 5 http://${host}:${port}/`);

/** Whether a plain TCP connect (no proxy) from inside reaches the test's server. */
const rawConnect = (sbx: Sandbox, ip: string) =>
  run(sbx, `python3 -c 'import socket; s=socket.socket(); s.settimeout(2); print(s.connect_ex(("${ip}", ${port})))'`).then((out) => out === "0");

describe("network egress rules", () => {
  it("denyOut ALL_TRAFFIC + allowOut 127.0.0.1: curl reaches 127.0.0.1 only, and nothing leaves without the proxy", async () => {
    const sbx = await create({ network: { denyOut: [ALL_TRAFFIC], allowOut: ["127.0.0.1"] } });
    expect(await run(sbx, "echo $HTTPS_PROXY")).toBe("http://127.0.0.1:3128");
    expect(await curl(sbx, "127.0.0.1")).toBe("outside via 127.0.0.1");
    expect(await curl(sbx, "127.0.0.2")).toBe('traffic-proxy: egress denied: 127.0.0.2 is denied by denyOut "0.0.0.0/0"');
    expect(await rawConnect(sbx, "127.0.0.1")).toBe(false);
    expect(await rawConnect(sbx, "127.0.0.2")).toBe(false);
  });

  it("a domain in allowOut is allowed by name (localhost), its address is not", async () => {
    const sbx = await create({ network: { denyOut: [ALL_TRAFFIC], allowOut: ["localhost"] } });
    expect(await curl(sbx, "localhost")).toBe("outside via 127.0.0.1");
    expect(await curl(sbx, "127.0.0.1")).toMatch(/^traffic-proxy: egress denied/);
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
    const outside = await startOutside();
    try {
      expect(await run(sbx, `curl -s -m 5 http://${outside.ip}/`)).toBe(`outside saw ${outside.hostIp}`);
    } finally {
      outside.stop();
    }
    // Its own network namespace: 127.0.0.2 is its own loopback, not the host's.
    expect(await rawConnect(sbx, "127.0.0.2")).toBe(false);
    expect(await run(sbx, 'echo "[$HTTP_PROXY]"')).toBe("[]");
  });
});
