// Network settings a client chooses at create time, through the real SDK: no internet access at
// all, and user ports that require the sandbox's traffic token. A sandbox with internet access has
// a network of its own: it reaches "the internet" (a namespace on this machine standing in for
// it) but not the host's services, and its user ports are its own.
import { Sandbox } from "e2b";
import { createServer, type Server } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startOutside, type Outside } from "../support/outside-net.ts";
import { getWithHost } from "./host-request.ts";
import { e2b, sleep } from "./sdk.ts";

const created: Sandbox[] = [];
let outside: Outside;
let hostService: Server;
let hostPort = 0;
beforeAll(async () => {
  outside = await startOutside();
  hostService = createServer((s) => s.on("error", () => {}).end("HTTP/1.1 200 OK\r\ncontent-length: 11\r\n\r\nhost secret"));
  await new Promise<void>((ok) => hostService.listen(0, "127.0.0.1", ok));
  hostPort = (hostService.address() as { port: number }).port;
});
afterAll(async () => {
  await Promise.all(created.map((s) => s.kill().catch(() => false)));
  hostService?.close();
  outside?.stop();
});

/** Whether a TCP connect from inside the sandbox to `ip:port` succeeds. */
async function reaches(sbx: Sandbox, ip: string, port: number): Promise<boolean> {
  const probe = `python3 -c 'import socket; s=socket.socket(); s.settimeout(2); print(s.connect_ex(("${ip}", ${port})))'`;
  return (await sbx.commands.run(probe)).stdout.trim() === "0";
}

/** GET / of the sandbox's `port` through the gateway, retried while its server starts. */
async function page(sbx: Sandbox, port: number): Promise<{ status: number; body: string }> {
  let last = { status: 0, body: "" };
  for (const deadline = Date.now() + 10_000; Date.now() < deadline; await sleep(200)) {
    last = await getWithHost(`${e2b().apiUrl}/index.html`, sbx.getHost(port)).catch(() => last);
    if (last.status === 200) break;
  }
  return last;
}

describe("network", () => {
  it("allowInternetAccess:false leaves the sandbox without any network, while the default reaches the internet", async () => {
    const open = await Sandbox.create(e2b());
    const closed = await Sandbox.create({ ...e2b(), allowInternetAccess: false });
    created.push(open, closed);
    expect((await open.commands.run(`curl -s -m 5 http://${outside.ip}/`)).stdout).toBe(`outside saw ${outside.hostIp}`);
    expect(await reaches(closed, outside.ip, 80)).toBe(false);
    expect((await Sandbox.getInfo(closed.sandboxId, e2b())).allowInternetAccess).toBe(false);
  });

  it("two sandboxes serve port 8000 each, and each URL reaches its own; a host service is reached by neither", async () => {
    const [a, b] = await Promise.all([Sandbox.create(e2b()), Sandbox.create(e2b())]);
    created.push(a, b);
    for (const [sbx, text] of [[a, "page of A"], [b, "page of B"]] as const) {
      await sbx.files.write("/home/user/www/index.html", text);
      await sbx.commands.run("cd /home/user/www && python3 -m http.server 8000 >/dev/null 2>&1", { background: true });
    }
    expect(await page(a, 8000)).toEqual({ status: 200, body: "page of A" });
    expect(await page(b, 8000)).toEqual({ status: 200, body: "page of B" });
    // Before, a sandbox's URL for port p led to whatever listened on the host's 127.0.0.1:p.
    const viaUrl = await getWithHost(`${e2b().apiUrl}/index.html`, a.getHost(hostPort));
    expect(viaUrl.status).toBe(502);
    expect(viaUrl.body).not.toContain("host secret");
    expect(await reaches(a, "127.0.0.1", hostPort)).toBe(false);
    expect(await reaches(a, "127.0.0.1", Number(new URL(e2b().apiUrl).port))).toBe(false);
  });

  it("allowPublicTraffic:false makes user ports require the traffic access token", async () => {
    const sbx = await Sandbox.create({ ...e2b(), network: { allowPublicTraffic: false } });
    created.push(sbx);
    expect(sbx.trafficAccessToken).toMatch(/^[0-9a-f]+$/);
    await sbx.files.write("/home/user/www/index.html", "private page");
    await sbx.commands.run("cd /home/user/www && python3 -m http.server 8001 >/dev/null 2>&1", { background: true });
    const { apiUrl } = e2b();
    const headers = { "e2b-sandbox-id": sbx.sandboxId, "e2b-sandbox-port": "8001" };

    // E2B's proxy answers a missing or wrong traffic token with 403 (401 is envd's, for its port).
    const denied = await fetch(`${apiUrl}/index.html`, { headers });
    expect(denied.status).toBe(403);
    expect(await denied.json()).toMatchObject({ code: 403, message: expect.stringContaining("e2b-traffic-access-token") });
    const wrong = await fetch(`${apiUrl}/index.html`, { headers: { ...headers, "e2b-traffic-access-token": "0".repeat(48) } });
    expect(wrong.status).toBe(403);

    let res: Response | undefined;
    const deadline = Date.now() + 10_000;
    while (Date.now() < deadline) {
      res = await fetch(`${apiUrl}/index.html`, { headers: { ...headers, "e2b-traffic-access-token": sbx.trafficAccessToken! } });
      if (res.status === 200) break;
      await sleep(200);
    }
    expect(res?.status).toBe(200);
    expect(await res!.text()).toBe("private page");
  });

  it("network.maskRequestHost is the Host header the sandbox's user ports receive (${PORT} filled in); without it a client cannot set one", async () => {
    const server = `python3 -c '
import http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        b = (self.headers.get("Host") or "").encode()
        self.send_response(200); self.send_header("content-length", str(len(b))); self.end_headers(); self.wfile.write(b)
    def log_message(self, *a): pass
http.server.HTTPServer(("0.0.0.0", 8003), H).serve_forever()'`;
    const masked = await Sandbox.create({ ...e2b(), network: { maskRequestHost: "localhost:${PORT}" } });
    const plain = await Sandbox.create(e2b());
    created.push(masked, plain);
    const { apiUrl } = e2b();
    const hostSeen = async (sbx: Sandbox, extra: Record<string, string> = {}) => {
      const deadline = Date.now() + 10_000;
      for (;;) {
        const res = await fetch(`${apiUrl}/`, { headers: { "e2b-sandbox-id": sbx.sandboxId, "e2b-sandbox-port": "8003", ...extra } });
        const body = await res.text();
        if (res.status === 200 || Date.now() > deadline) return body;
        await sleep(200);
      }
    };
    await masked.commands.run(server, { background: true });
    await plain.commands.run(server, { background: true });
    expect(await hostSeen(masked)).toBe("localhost:8003");
    // A client's own mask header is dropped by the gateway: it is the edge's to set.
    const unmasked = await hostSeen(plain, { "e2b-mask-host": "evil.example" });
    expect(unmasked).not.toBe("evil.example");
    expect(unmasked).not.toBe("");
  });
});

