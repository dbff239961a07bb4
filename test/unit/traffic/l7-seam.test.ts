// The seam an L7 handler plugs into (redirected.ts `L7Hook`): a redirected connection it wants is
// decided at L3/L4 first, its first bytes read, and handed over with where it was going, the name
// it asked for and the rule that allowed it; one the rules deny never reaches the handler.
import { mkdtempSync, rmSync } from "node:fs";
import { connect, createServer, type AddressInfo, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, expect, it } from "vitest";
import { compilePolicy } from "../../../controllers/traffic/policy.ts";
import { TrafficProxy } from "../../../controllers/traffic/proxy.ts";
import type { RedirectedConnection } from "../../../controllers/traffic/redirected.ts";

let upstream: Server;
let port = 0;
let proxy: TrafficProxy;
let dir = "";
const handed: RedirectedConnection[] = [];

beforeAll(async () => {
  upstream = createServer((s) => s.on("error", () => {}).end("from upstream\n"));
  await new Promise<void>((r) => upstream.listen(0, "127.0.0.1", r));
  port = (upstream.address() as AddressInfo).port;
  proxy = new TrafficProxy({
    refuse: () => undefined,
    policyFor: (tag) => (tag === "sbx" ? compilePolicy({ allowOut: ["127.0.0.1"], denyOut: ["0.0.0.0/0"] }) : "no rules"),
    l7: {
      wants: (_sandbox, _ip, p) => p === port,
      handle: (conn) => {
        handed.push(conn);
        void conn.connectUpstream().then((up) => {
          conn.client.write(`l7 saw ${conn.sniffed?.kind} ${conn.sniffed && "name" in conn.sniffed ? conn.sniffed.name : ""} (${conn.head.length} bytes)\n`);
          up.pipe(conn.client);
        });
      },
    },
  });
  dir = mkdtempSync(join(tmpdir(), "l7-seam-"));
  await proxy.listenTagged(join(dir, "p.sock"));
});

afterAll(async () => {
  await proxy.close();
  upstream.close();
  rmSync(dir, { recursive: true, force: true });
});

function redirected(tag: string, payload: string, offer = ""): Promise<string> {
  return new Promise((resolve) => {
    const s = connect(join(dir, "p.sock"));
    let got = "";
    s.on("data", (c: Buffer) => (got += c.toString())).on("close", () => resolve(got)).on("error", () => {});
    s.write(`${tag} 127.0.0.1 ${port}${offer}\n`);
    s.write(payload);
  });
}

it("hands an allowed connection it wants to the L7 handler, with its first bytes and the deciding rule", async () => {
  const got = await redirected("sbx", "GET / HTTP/1.1\r\nHost: api.test\r\n\r\n");
  expect(got).toBe("l7 saw http api.test (34 bytes)\nfrom upstream\n");
  expect(handed).toHaveLength(1);
  expect(handed[0]).toMatchObject({ sandbox: "sbx", ip: "127.0.0.1", port });
  expect(handed[0]!.allowedBy).toContain("127.0.0.1");
});

it("never hands over a connection of a sandbox without rules (closed)", async () => {
  const got = await redirected("other", "GET / HTTP/1.1\r\nHost: api.test\r\n\r\n");
  expect(got).toBe("");
  expect(handed).toHaveLength(1);
});

it("a connection it wants that the relay offers back stays with the proxy: 'R' before the handler's first byte", async () => {
  const got = await redirected("sbx", "GET / HTTP/1.1\r\nHost: api.test\r\n\r\n", " *");
  expect(got).toBe("Rl7 saw http api.test (34 bytes)\nfrom upstream\n");
  expect(handed).toHaveLength(2);
});
