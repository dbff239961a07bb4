// TrafficPolicy / GlobalTrafficPolicy on the local driver: a sandbox a policy selects is moved
// behind the traffic-proxy (every TCP connection and DNS query redirected in its namespace) and
// each connection is decided by the policies, first match by priority, team before global, closed
// by default; a policy change applies to the next connection, and removing every policy gives the
// sandbox its internet access back. Two namespaces stand in for the internet (outside-net.ts).
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TrafficPolicySpec, type TrafficPolicyEntry } from "../../../../schema/api/traffic-policy.ts";
import { LocalDriver } from "../../../../controllers/drivers/local/local-driver.ts";
import { startOutside, type Outside } from "../../../support/outside-net.ts";
import { desiredSandbox, destroyAll, shIn } from "./fixture.ts";

const dataDir = mkdtempSync(join(tmpdir(), "local-tp-"));
const names: Record<string, string[]> = {};
const egressResolve = async (host: string) => names[host] ?? Promise.reject(Object.assign(new Error(`${host} not found`), { code: "ENOTFOUND" }));
const driver = new LocalDriver({ dataDir, cgroupName: `kruise-test-${process.pid}-tp`, egressResolve });
let a: Outside;
let b: Outside;

const policy = (team: string | null, name: string, spec: unknown): TrafficPolicyEntry => ({ team, name, spec: TrafficPolicySpec.parse(spec) });
const sh = async (id: string, script: string) => (await shIn(driver, id, script)).stdout.trim();
/** curl with no proxy variables: only the redirect governs it. Prints the body, or the exit code. */
const curl = (id: string, url: string) => sh(id, `env -u HTTP_PROXY -u http_proxy -u HTTPS_PROXY -u https_proxy curl -s -m 5 ${url} || echo "exit $?"`);
/** Raw TCP (not HTTP) to port 80 of `ip`: whether the stand-in answered. */
const raw = (id: string, ip: string) =>
  sh(id, `python3 -c 'import socket; s=socket.create_connection(("${ip}", 80), 3); s.settimeout(3); s.sendall(b"hello\\r\\n\\r\\n"); print(b"400" in s.recv(4096))' 2>/dev/null || echo False`).then((o) => o === "True");

beforeAll(async () => {
  a = await startOutside({ privateHost: true });
  b = await startOutside();
  Object.assign(names, { "a.pkg.test": [a.ip], "b.pkg.test": [b.ip], "mirror.other.test": [a.ip] });
});

afterAll(async () => {
  a?.stop();
  b?.stop();
  await destroyAll(driver, dataDir);
});

describe("TrafficPolicies on local sandboxes", () => {
  it("decide every connection and DNS name of the sandboxes they select: priorities, FQDN wildcards, ports, global beneath team", async () => {
    const web = desiredSandbox("tp", { allowInternetAccess: true, namespace: "team-a", labels: { app: "web" } });
    const other = desiredSandbox("tp", { allowInternetAccess: true, namespace: "team-b" });
    await driver.ensure(web);
    await driver.ensure(other);
    const baseline = policy(null, "baseline", { priority: 0, egress: { rules: [{ action: "reject", to: [{ cidr: "0.0.0.0/0" }] }] } });
    await driver.setTrafficPolicies([
      policy("team-a", "deny-b", { priority: 10, selector: { matchLabels: { app: "web" } }, egress: { rules: [{ action: "reject", to: [{ fqdn: "b.pkg.test" }] }] } }),
      policy("team-a", "packages", { priority: 20, selector: { matchLabels: { app: "web" } }, egress: { rules: [{ action: "allow", to: [{ fqdn: "*.pkg.test" }], ports: [{ port: 80, endPort: 81 }] }] } }),
      baseline,
    ]);
    // By name through the proxy's DNS, without proxy variables: the wildcard admits a.pkg.test.
    expect(await curl(web.id, "http://a.pkg.test/")).toBe(`outside saw ${a.hostIp}`);
    // deny-b (priority 10) comes before the wildcard: b.pkg.test never resolves (curl: exit 6).
    expect(await curl(web.id, "http://b.pkg.test/")).toBe("exit 6");
    // By address, a name no rule admits: the global policy refuses, naming its rule.
    expect(await curl(web.id, `http://${b.ip}/`)).toBe("traffic-proxy: egress denied: GlobalTrafficPolicy baseline rule 1 (reject)");
    expect(await raw(web.id, b.ip)).toBe(false);
    // A name outside the wildcard does not resolve; Host cannot borrow an allowed name for b.
    expect(await curl(web.id, "http://mirror.other.test/")).toBe("exit 6");
    expect(await curl(web.id, `-H 'Host: b.pkg.test' http://${b.ip}/`)).toContain("egress denied");
    // The other team's sandbox: only the global policy selects it.
    expect(await curl(other.id, "http://a.pkg.test/")).toBe("exit 6");
    expect(await curl(other.id, `http://${a.ip}/`)).toBe("traffic-proxy: egress denied: GlobalTrafficPolicy baseline rule 1 (reject)");

    // A higher-priority team policy opens b by address, raw TCP included, from the next connection.
    await driver.setTrafficPolicies([policy("team-a", "open-b", { priority: 1, egress: { rules: [{ action: "allow", to: [{ cidr: `${b.ip}/32` }], ports: [{ protocol: "TCP", port: 80 }] }] } }), baseline]);
    expect(await curl(web.id, `http://${b.ip}/`)).toBe(`outside saw ${b.hostIp}`);
    expect(await raw(web.id, b.ip)).toBe(true);
    expect(await curl(web.id, `http://${b.ip}:81/`)).toMatch(/^exit|denied/);
    expect(driver.trafficTargets().map((t) => t.id).sort()).toEqual([web.id, other.id].sort());

    // No policy any more: the sandboxes are out from behind the proxy, with their internet access.
    await driver.setTrafficPolicies([]);
    expect(await curl(other.id, `http://${a.ip}/`)).toMatch(/^outside saw /);
  });
});
