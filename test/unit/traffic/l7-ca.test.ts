// The per-sandbox CA (ca.ts): a CA certificate that can sign (CA:true, keyCertSign), leaves that
// verify against it and name the host (DNS or IP SAN), one leaf per host, a new key per sandbox,
// and what `create(sandbox, dir)` keeps (key 0600) is what `load(dir)` signs with after a restart.
import { X509Certificate } from "node:crypto";
import { mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, expect, it } from "vitest";
import { SandboxCa } from "../../../controllers/traffic/l7/ca.ts";

const dir = mkdtempSync(join(tmpdir(), "l7-ca-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

it("makes a CA per sandbox whose leaves verify against it and name their host", async () => {
  const a = await SandboxCa.create("sbx-a");
  const b = await SandboxCa.create("sbx-a");
  const caCert = new X509Certificate(a.certPem);
  expect(caCert.ca).toBe(true);
  expect(new X509Certificate(b.certPem).publicKey.export({ format: "der", type: "spki" })).not.toEqual(caCert.publicKey.export({ format: "der", type: "spki" }));

  const leaf = await a.leaf("API.Example.test");
  const cert = new X509Certificate(leaf.cert);
  expect(cert.verify(caCert.publicKey)).toBe(true);
  expect(cert.verify(new X509Certificate(b.certPem).publicKey)).toBe(false);
  expect(cert.checkHost("api.example.test")).toBe("api.example.test");
  expect(cert.checkHost("other.test")).toBeUndefined();
  expect(await a.leaf("api.example.test")).toBe(leaf);
  const ip = new X509Certificate((await a.leaf("10.1.2.3")).cert);
  expect(ip.checkIP("10.1.2.3")).toBe("10.1.2.3");
});

it("keeps the CA in the sandbox's directory (key 0600) and loads it back", async () => {
  const kept = join(dir, "sbx-k");
  const made = await SandboxCa.create("sbx-k", kept);
  expect(statSync(join(kept, "ca.key")).mode & 0o777).toBe(0o600);
  const loaded = await SandboxCa.load(kept);
  expect(loaded.certPem).toBe(made.certPem);
  const leaf = new X509Certificate((await loaded.leaf("api.test")).cert);
  expect(leaf.verify(new X509Certificate(made.certPem).publicKey)).toBe(true);
});

it("keeps at most maxLeaves leaves, the least recently used dropped, and makes a leaf again before it expires", async () => {
  let now = Date.now();
  const ca = await SandboxCa.create("sbx-l", undefined, { maxLeaves: 2, now: () => now });
  const a = await ca.leaf("a.test");
  await ca.leaf("b.test");
  expect(await ca.leaf("a.test")).toBe(a);
  await ca.leaf("c.test"); // b.test, used longest ago, goes
  expect(await ca.leaf("a.test")).toBe(a);
  const b = await ca.leaf("b.test");
  expect(await ca.leaf("b.test")).toBe(b);
  now += 6 * 86_400_000;
  const renewed = await ca.leaf("b.test");
  expect(renewed).not.toBe(b);
  expect(Date.parse(new X509Certificate(renewed.cert).validTo)).toBeGreaterThan(now + 86_400_000);
});
