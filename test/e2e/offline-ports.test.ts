// A sandbox created with allowInternetAccess: false cannot reach out, yet its user ports answer
// through the gateway as on E2B (host routing and the E2b-Sandbox-Port header, WebSocket too).
import { Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { getWithHost } from "./host-request.ts";
import { e2b } from "./sdk.ts";
import { waitFor } from "../support/wait-for.ts";

/** A WebSocket echo server for the sandbox's own node: the handshake by hand, short text frames
 * echoed back. */
const WS_ECHO = `
const { createHash } = require("node:crypto");
const server = require("node:http").createServer((_q, r) => r.writeHead(426).end("upgrade required"));
server.on("upgrade", (req, socket) => {
  const accept = createHash("sha1").update(req.headers["sec-websocket-key"] + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest("base64");
  socket.write("HTTP/1.1 101 Switching Protocols\\r\\nUpgrade: websocket\\r\\nConnection: Upgrade\\r\\nSec-WebSocket-Accept: " + accept + "\\r\\n\\r\\n");
  socket.on("data", (f) => {
    if ((f[0] & 0x0f) === 0x8) return socket.end();
    const len = f[1] & 0x7f, mask = f.subarray(2, 6);
    const payload = Buffer.from(f.subarray(6, 6 + len)).map((b, i) => b ^ mask[i % 4]);
    socket.write(Buffer.concat([Buffer.from([0x81, payload.length]), payload]));
  });
});
server.listen(8081, "127.0.0.1");
`;


let sbx: Sandbox;
beforeAll(async () => {
  sbx = await Sandbox.create({ ...e2b(), allowInternetAccess: false });
});
afterAll(async () => {
  await sbx?.kill().catch(() => false);
});

describe("user ports of a sandbox without internet access", () => {
  it("serves HTTP through {port}-{id} host routing and the E2b-Sandbox-Port header", async () => {
    const { apiUrl } = e2b();
    const headers = { "e2b-sandbox-id": sbx.sandboxId, "e2b-sandbox-port": "8000" };
    // Nothing listens yet: the gateway answers with a clear 502, not a hang.
    const early = await fetch(`${apiUrl}/`, { headers });
    expect(early.status).toBe(502);
    expect(await early.text()).toMatch(/port 8000.*Connection refused/);

    await sbx.files.write("/home/user/www/index.html", "offline but reachable");
    await sbx.commands.run("cd /home/user/www && python3 -m http.server 8000 >/dev/null 2>&1", { background: true });
    const byHost = await waitFor(async () => {
      const r = await getWithHost(`${apiUrl}/index.html`, sbx.getHost(8000));
      return r.status === 200 ? r : undefined;
    }, { what: "the page by host", intervalMs: 200 });
    expect(byHost.body).toBe("offline but reachable");

    const posted = await fetch(`${apiUrl}/missing`, { method: "POST", headers, body: "x".repeat(100_000) });
    // http.server answers POST with 501 before reading the body and closes: the answer must
    // still come back, as it does over TCP.
    expect(posted.status).toBe(501);
    expect(await posted.text()).toMatch(/Unsupported method \('POST'\)/);
    const byHeader = await fetch(`${apiUrl}/index.html`, { headers });
    expect(byHeader.status).toBe(200);
    expect(await byHeader.text()).toBe("offline but reachable");
  });

  it("passes a WebSocket both ways", async () => {
    await sbx.files.write("/home/user/ws-echo.js", WS_ECHO);
    await sbx.commands.run("node /home/user/ws-echo.js >/dev/null 2>&1", { background: true });
    const { apiUrl } = e2b();
    const reply = await waitFor(() => {
      const ws = new WebSocket(`${apiUrl.replace(/^http/, "ws")}/socket`, { headers: { "e2b-sandbox-id": sbx.sandboxId, "e2b-sandbox-port": "8081" } } as never);
      return new Promise<string>((ok, fail) => {
        const timer = setTimeout(() => fail(new Error("no echo within 5 s")), 5_000);
        ws.onopen = () => ws.send("ping into an offline sandbox");
        ws.onmessage = (e) => (clearTimeout(timer), ws.close(), ok(String(e.data)));
        ws.onerror = ws.onclose = () => (clearTimeout(timer), fail(new Error("websocket failed or closed before the echo")));
      });
    }, { what: "the websocket echo", intervalMs: 200 });
    expect(reply).toBe("ping into an offline sandbox");
  });

  it("still cannot connect out: not to the edge on the host, not by name", async () => {
    const port = new URL(e2b().apiUrl).port;
    const probe = `python3 -c 'import socket; s=socket.socket(); s.settimeout(2); print(s.connect_ex(("127.0.0.1", ${port})))'`;
    expect((await sbx.commands.run(probe)).stdout.trim()).not.toBe("0");
    const dns = await sbx.commands.run(`python3 -c 'import socket; socket.getaddrinfo("registry.npmjs.org", 443)'`).catch((e: { exitCode?: number }) => e);
    expect(dns.exitCode).not.toBe(0);
  });
});
