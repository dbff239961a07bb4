// The local driver's wiring of E2B `network.rules` (controllers/drivers/local/egress-l7.ts): the
// real TrafficProxy's redirected path hands a sandbox's connection to LocalL7's handler, which
// adds the header with the secret value the edge sent for that sandbox; a sandbox without rules
// is not inspected, and `egressRules` puts a sandbox with rules behind the proxy.
import { mkdtempSync, rmSync } from "node:fs";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import tls from "node:tls";
import { afterAll, beforeAll, expect, it } from "vitest";
import { LocalL7 } from "../../../controllers/drivers/local/egress-l7.ts";
import { egressRules } from "../../../controllers/drivers/local/egress.ts";
import type { DesiredSandbox } from "../../../controllers/drivers/driver.ts";
import { compilePolicy } from "../../../controllers/traffic/policy.ts";
import { TrafficProxy } from "../../../controllers/traffic/proxy.ts";
import { startHttpsEcho, type EchoServer } from "../../support/l7-stand-ins.ts";

const rules = { "api.test": [{ transform: { headers: { Authorization: "Bearer ${e2b.secrets.Tok}" } } }] };
const desired = new Map<string, Partial<DesiredSandbox>>([["ruled", { networkRules: rules }], ["plain", {}]]);
let echo: EchoServer;
let l7: LocalL7;
let proxy: TrafficProxy;
let dir = "";

beforeAll(async () => {
  echo = await startHttpsEcho(["api.test"]);
  l7 = new LocalL7((id) => desired.get(id) as DesiredSandbox | undefined, { upstreamTls: { ca: echo.ca } });
  l7.setSecrets("ruled", { tok: "s3cret-value" });
  proxy = new TrafficProxy({ refuse: () => undefined, policyFor: () => compilePolicy({ allowOut: [], denyOut: [] }), l7: l7.handler });
  dir = mkdtempSync(join(tmpdir(), "l7-local-"));
  await proxy.listenTagged(join(dir, "p.sock"));
});

afterAll(async () => {
  await proxy.close();
  echo.close();
  rmSync(dir, { recursive: true, force: true });
});

/** A redirected HTTPS GET from `sandbox`, trusting `ca`; the echo's answer (the headers it saw). */
function get(sandbox: string, ca: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const raw = connect(join(dir, "p.sock"), () => {
      raw.write(`${sandbox} 127.0.0.1 ${echo.port}\n`);
      const s = tls.connect({ socket: raw, servername: "api.test", ca }, () => s.write("GET / HTTP/1.1\r\nHost: api.test\r\nConnection: close\r\n\r\n"));
      let got = "";
      s.on("data", (c: Buffer) => (got += c.toString())).on("end", () => resolve(got)).on("error", reject);
    });
    raw.on("error", reject);
  });
}

it("adds the sandbox's secret to a named host's requests, behind its own CA", async () => {
  const ca = (await l7.ca("ruled")).certPem;
  expect(await get("ruled", ca)).toContain('"authorization":"Bearer s3cret-value"');
  // The sandbox's CA does not sign anything for another sandbox; a sandbox without rules gets the
  // server's own certificate and no header.
  const plain = await get("plain", echo.ca);
  expect(plain).toContain('"host":"api.test"');
  expect(plain).not.toContain("authorization");
  l7.forget("ruled");
  expect((await l7.ca("ruled")).certPem).not.toBe(ca);
});

it("puts a sandbox with rules behind the proxy, allowing every address when it has internet access", () => {
  expect(egressRules({ allowInternetAccess: true, egress: null, networkRules: rules })).toEqual({ allowOut: [], denyOut: [] });
  expect(egressRules({ allowInternetAccess: true, egress: null })).toBeNull();
  expect(egressRules({ allowInternetAccess: false, egress: null, networkRules: rules })).toBeNull();
});
