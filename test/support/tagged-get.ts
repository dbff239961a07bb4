// A connection as the local driver's relay hands one to the traffic-proxy's tagged socket: the
// line "<sandbox> <ip> <port>" (where the redirect in the sandbox's namespace found it going),
// then a plain HTTP GET naming `host`. Resolves with everything the proxy answered.
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:http";
import { connect, type AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { TrafficProxy } from "../../controllers/traffic/proxy.ts";

export function taggedGet(socketPath: string, tag: string, port: number, host: string, ip = "127.0.0.1"): Promise<string> {
  return new Promise<string>((resolve) => {
    const s = connect(socketPath);
    let got = "";
    s.on("data", (c: Buffer) => (got += c.toString())).on("close", () => resolve(got)).on("error", () => {});
    s.write(`${tag} ${ip} ${port}\n`);
    s.end(`GET / HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`);
  });
}

/** An origin on 127.0.0.1 answering `hello <Host>`, and `proxy` made by `make` listening on a
 * tagged socket of its own; `get` sends a redirected GET there as `taggedGet` does. */
export async function taggedHarness(make: (originPort: number) => TrafficProxy) {
  const origin = createServer((req, res) => res.end(`hello ${req.headers.host}`));
  await new Promise<void>((r) => origin.listen(0, "127.0.0.1", r));
  const port = (origin.address() as AddressInfo).port;
  const proxy = make(port);
  const dir = mkdtempSync(join(tmpdir(), "tagged-"));
  await proxy.listenTagged(join(dir, "p.sock"));
  return {
    proxy,
    port,
    socketPath: join(dir, "p.sock"),
    get: (tag: string, host: string) => taggedGet(join(dir, "p.sock"), tag, port, host),
    async close() {
      await proxy.close();
      origin.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
