import { afterEach, describe, expect, it, vi } from "vitest";
import { cidrContains, formatIp, parseCidr, parseIp } from "../../../schema/egress/address.ts";
import { compilePolicy, decide, needsAddresses } from "../../../controllers/traffic/policy.ts";
import { policyErrors } from "../../../schema/egress/rules.ts";
import { refuseHost, refuseLocal } from "../../../controllers/traffic/host-reach.ts";

const policy = (allowOut: string[], denyOut: string[]) => compilePolicy({ allowOut, denyOut });

describe("addresses", () => {
  it.each([
    ["127.0.0.1", "127.0.0.1"],
    ["::1", "0:0:0:0:0:0:0:1"],
    ["[2001:db8::8:800:200c:417a]", "2001:db8:0:0:8:800:200c:417a"],
    ["::ffff:10.1.2.3", "10.1.2.3"],
    ["::ffff:a01:203", "10.1.2.3"],
    ["fe80::1%eth0", "fe80:0:0:0:0:0:0:1"],
    ["1:2:3:4:5:6:7:8", "1:2:3:4:5:6:7:8"],
    ["64:ff9b::192.0.2.33", "64:ff9b:0:0:0:0:c000:221"],
  ])("%s parses as %s", (text, formatted) => {
    expect(formatIp(parseIp(text)!)).toBe(formatted);
  });

  it.each(["256.0.0.1", "01.2.3.4", "1.2.3", "1:2:3:4:5:6:7:8:9", "1::2::3", "example.com", "", ":::", "12345::"])("%s is not an address", (text) => {
    expect(parseIp(text)).toBeUndefined();
  });

  it("CIDR blocks contain what they should, per family", () => {
    const v4 = parseCidr("10.0.0.0/8")!;
    expect(cidrContains(v4, parseIp("10.255.1.2")!)).toBe(true);
    expect(cidrContains(v4, parseIp("11.0.0.1")!)).toBe(false);
    expect(cidrContains(v4, parseIp("::ffff:10.0.0.1")!)).toBe(true);
    const v6 = parseCidr("2001:db8::/32")!;
    expect(cidrContains(v6, parseIp("2001:db8:ffff::1")!)).toBe(true);
    expect(cidrContains(v6, parseIp("2001:db9::1")!)).toBe(false);
    expect(cidrContains(v6, parseIp("10.0.0.1")!)).toBe(false);
    expect(cidrContains(parseCidr("1.2.3.4")!, parseIp("1.2.3.4")!)).toBe(true);
    expect(cidrContains(parseCidr("1.2.3.4")!, parseIp("1.2.3.5")!)).toBe(false);
    expect(cidrContains(parseCidr("0.0.0.0/0")!, parseIp("8.8.8.8")!)).toBe(true);
    expect(parseCidr("10.0.0.0/33")).toBeUndefined();
    expect(parseCidr("::/129")).toBeUndefined();
  });
});

describe("egress policy", () => {
  it("allowOut wins over denyOut, and ALL_TRAFFIC denies the rest", () => {
    const p = policy(["127.0.0.1", "8.8.8.0/24"], ["0.0.0.0/0"]);
    expect(decide(p, "127.0.0.1", [])).toEqual({ allowed: true, addresses: ["127.0.0.1"], rule: "127.0.0.1" });
    expect(decide(p, "8.8.8.77", [])).toMatchObject({ allowed: true, rule: "8.8.8.0/24" });
    expect(decide(p, "127.0.0.2", [])).toEqual({ allowed: false, reason: '127.0.0.2 is denied by denyOut "0.0.0.0/0"' });
  });

  it("ALL_TRAFFIC covers IPv6 and IPv4-mapped addresses too (no way around it by address family)", () => {
    const p = policy(["127.0.0.1"], ["0.0.0.0/0"]);
    expect(decide(p, "[::1]", []).allowed).toBe(false);
    expect(decide(p, "::ffff:127.0.0.2", []).allowed).toBe(false);
    expect(decide(p, "::ffff:127.0.0.1", [])).toMatchObject({ allowed: true, addresses: ["127.0.0.1"] });
  });

  it("without a matching rule an IPv4 destination is allowed (denyOut alone is a block list)", () => {
    const p = policy([], ["10.0.0.0/8", "2001:db8::/32"]);
    expect(decide(p, "1.1.1.1", []).allowed).toBe(true);
    expect(decide(p, "10.1.1.1", []).allowed).toBe(false);
    expect(decide(p, "2001:db8::5", []).allowed).toBe(false);
  });

  it("0.0.0.0/8 and :: are never destinations, in any form, whatever the rules (connect() makes them loopback)", () => {
    for (const p of [policy([], ["127.0.0.0/8", "::1"]), policy(["0.0.0.0/0"], []), policy(["localhost"], ["0.0.0.0/0"])]) {
      for (const host of ["0.0.0.0", "0.1.2.3", "[::]", "::ffff:0.0.0.0", "64:ff9b::0.0.0.0"]) {
        expect(decide(p, host, [])).toMatchObject({ allowed: false, reason: expect.stringContaining("is not a destination") });
      }
    }
    // A name resolving there (`0` resolves to 0.0.0.0), even one allowed by name.
    expect(decide(policy([], ["127.0.0.0/8"]), "0", ["0.0.0.0"]).allowed).toBe(false);
    expect(decide(policy(["localhost"], ["0.0.0.0/0"]), "localhost", ["::", "0.0.0.0"]).allowed).toBe(false);
    expect(decide(policy(["localhost"], ["0.0.0.0/0"]), "localhost", ["0.0.0.0", "127.0.0.1"])).toMatchObject({ allowed: true, addresses: ["127.0.0.1"] });
  });

  it("IPv6 passes only when allowOut admits it: an IPv4 deny list is not walked around through [::1] or AAAA", () => {
    const p = policy([], ["127.0.0.0/8"]);
    expect(decide(p, "[::1]", [])).toEqual({ allowed: false, reason: "::1 is IPv6, which passes only when allowOut admits it (E2B sandboxes have no IPv6)" });
    expect(decide(p, "2001:db9::5", []).allowed).toBe(false);
    expect(decide(p, "localhost", ["::1", "127.0.0.1"]).allowed).toBe(false);
    expect(decide(p, "v6only.test", ["2606:4700::1111"]).allowed).toBe(false);
    expect(decide(p, "dual.test", ["2606:4700::1111", "1.1.1.1"])).toEqual({ allowed: true, addresses: ["1.1.1.1"] });
    // Admitted by an IPv6 block, by ALL_TRAFFIC, or by name.
    expect(decide(policy(["::1"], ["0.0.0.0/0"]), "[::1]", []).allowed).toBe(true);
    expect(decide(policy(["2606:4700::/32"], []), "v6only.test", ["2606:4700::1111"]).allowed).toBe(true);
    expect(decide(policy(["0.0.0.0/0"], []), "[::1]", []).allowed).toBe(true);
    expect(decide(policy(["v6only.test"], ["0.0.0.0/0"]), "v6only.test", ["2606:4700::1111"]).allowed).toBe(true);
  });

  it("IPv6 forms that embed an IPv4 address are judged as that address", () => {
    const lo = policy([], ["127.0.0.0/8"]);
    for (const host of ["::127.0.0.1", "64:ff9b::127.0.0.1", "2002:7f00:1::1"]) {
      expect(decide(lo, host, [])).toMatchObject({ allowed: false, reason: expect.stringContaining('denied by denyOut "127.0.0.0/8"') });
    }
    const one = policy(["1.2.3.4"], ["0.0.0.0/0"]);
    expect(decide(one, "64:ff9b::1.2.3.4", [])).toMatchObject({ allowed: true, rule: "1.2.3.4" });
    expect(decide(one, "64:ff9b::1.2.3.5", []).allowed).toBe(false);
  });

  it("IPv6 forms whose IPv4 address depends on a translator (NAT64 local-use, SIIT, Teredo) are never destinations", () => {
    for (const p of [policy(["0.0.0.0/0"], []), policy(["::/0"], [])]) {
      for (const host of ["64:ff9b:1::7f00:1", "::ffff:0:7f00:1", "2001:0:4136:e378:8000:63bf:80ff:fffe"]) {
        expect(decide(p, host, [])).toMatchObject({ allowed: false, reason: expect.stringContaining("is not a destination") });
      }
    }
    expect(decide(policy(["v6.test"], ["0.0.0.0/0"]), "v6.test", ["::ffff:0:7f00:1"]).allowed).toBe(false);
    // Neighbours of those prefixes are ordinary IPv6 addresses.
    expect(decide(policy(["::/0"], []), "2001:db8::1", []).allowed).toBe(true);
    expect(decide(policy(["::/0"], []), "64:ff9b:2::1", []).allowed).toBe(true);
  });

  it("a name is refused without resolving it when no address could pass (no DNS channel under deny-all)", () => {
    const names = policy(["pypi.org", "*.pythonhosted.org"], ["0.0.0.0/0"]);
    expect(needsAddresses(names, "c2VjcmV0.exfil.example")).toBe(false);
    expect(decide(names, "c2VjcmV0.exfil.example", [])).toEqual({ allowed: false, reason: "c2vjcmv0.exfil.example is not allowed by name, and denyOut covers every address (not resolved)" });
    expect(needsAddresses(names, "pypi.org")).toBe(true);
    expect(needsAddresses(names, "files.pythonhosted.org")).toBe(true);
    expect(needsAddresses(names, "1.2.3.4")).toBe(false);
    // IPv4 covered in pieces counts as covered; a gap, or an allowOut address entry, needs the addresses.
    expect(needsAddresses(policy([], ["0.0.0.0/1", "128.0.0.0/1"]), "x.example")).toBe(false);
    expect(needsAddresses(policy([], ["1.0.0.0/8", "2.0.0.0/7", "4.0.0.0/6", "8.0.0.0/5", "16.0.0.0/4", "32.0.0.0/3", "64.0.0.0/2", "128.0.0.0/1"]), "x.example")).toBe(false);
    expect(needsAddresses(policy([], ["0.0.0.0/1", "128.0.0.0/2"]), "x.example")).toBe(true);
    expect(needsAddresses(policy(["10.0.0.0/8"], ["0.0.0.0/0"]), "x.example")).toBe(true);
    expect(needsAddresses(policy([], ["10.0.0.0/8"]), "x.example")).toBe(true);
  });

  it("a domain allowed by name is allowed at whatever it resolves to; the connection goes to a checked address", () => {
    const p = policy(["localhost", "*.example.com"], ["0.0.0.0/0"]);
    expect(decide(p, "LOCALHOST.", ["::1", "127.0.0.1"])).toEqual({ allowed: true, addresses: ["0:0:0:0:0:0:0:1", "127.0.0.1"], rule: "localhost" });
    expect(decide(p, "api.example.com", ["93.184.216.34"])).toMatchObject({ allowed: true, rule: "*.example.com" });
    expect(decide(p, "a.b.example.com", ["93.184.216.34"]).allowed).toBe(true);
    // The wildcard names subdomains only, and a suffix is not a subdomain.
    expect(decide(p, "example.com", ["93.184.216.34"]).allowed).toBe(false);
    expect(decide(p, "badexample.com", ["93.184.216.34"]).allowed).toBe(false);
  });

  it("a name not allowed by name is judged by each address; a denied address is never the one used", () => {
    const p = policy(["9.9.9.9"], ["203.0.113.0/24"]);
    expect(decide(p, "mixed.test", ["203.0.113.1", "1.1.1.1", "203.0.113.2", "9.9.9.9"])).toEqual({ allowed: true, addresses: ["1.1.1.1", "9.9.9.9"] });
    expect(decide(p, "inside.test", ["203.0.113.1", "203.0.113.2"])).toEqual({ allowed: false, reason: 'inside.test (203.0.113.1) is denied by denyOut "203.0.113.0/24"' });
    expect(decide(p, "nowhere.test", [])).toEqual({ allowed: false, reason: "nowhere.test did not resolve to any address" });
  });

  it("an IP literal host is judged as itself, whatever addresses are passed", () => {
    const p = policy([], ["127.0.0.0/8"]);
    expect(decide(p, "127.0.0.1", ["1.1.1.1"]).allowed).toBe(false);
  });

  it("rejects what E2B rejects, naming each bad entry", () => {
    expect(policyErrors({ allowOut: ["example.com", "10.0.0.0/8", "::1"], denyOut: ["0.0.0.0/0"] })).toEqual([]);
    expect(policyErrors({ allowOut: ["10.0.0.0/40", "bad host!"], denyOut: ["example.com", "1.2.3"] })).toEqual([
      'allowOut: "10.0.0.0/40" is not a valid IP address or CIDR block',
      'allowOut: "bad host!" is not an IP address, a CIDR block or a domain name',
      'denyOut: "example.com" is a domain; denyOut takes IP addresses and CIDR blocks only',
      'denyOut: "1.2.3" is not a valid IP address or CIDR block',
    ]);
    expect(() => compilePolicy({ allowOut: [], denyOut: ["example.com"] })).toThrow(/denyOut takes IP addresses and CIDR blocks only/);
  });
});

describe("what the proxy refuses whatever the rules say (host-reach.ts)", () => {
  afterEach(() => void vi.useRealTimers());
  const hostAddresses = () => ["127.0.0.1", "192.0.2.10", "10.88.0.1", "2001:db8::5", "fe80::1"];
  const agent = refuseHost({ subnets: ["10.88.0.0/16"], interfaces: hostAddresses });
  const everything = policy(["0.0.0.0/0", "127.0.0.1", "192.0.2.10", "169.254.169.254", "10.88.0.0/16", "*.example.com"], []);

  it("rules that allow the host, its loopback, link-local or other sandboxes open none of them", () => {
    const reason = (host: string, resolved: string[] = []) => {
      const v = decide(everything, host, resolved, agent);
      return v.allowed ? "allowed" : v.reason;
    };
    expect(reason("127.0.0.1")).toBe("127.0.0.1 is loopback, never reached through the proxy (a sandbox's own loopback is not proxied; the proxy's would be the host's)");
    for (const host of ["127.9.9.9", "[::1]", "::ffff:127.0.0.1", "::127.0.0.1", "64:ff9b::127.0.0.1"]) expect(reason(host), host).toContain("is loopback");
    for (const host of ["169.254.169.254", "fe80::2", "[fe80::1%eth0]"]) expect(reason(host), host).toContain("is link-local");
    for (const host of ["192.0.2.10", "2001:db8::5", "::ffff:192.0.2.10"]) expect(reason(host), host).toContain("is an address of the agent's host");
    expect(reason("10.88.0.1")).toContain("is an address of the agent's host");
    expect(reason("10.88.200.3")).toBe("10.88.200.3 is in the sandbox network 10.88.0.0/16 (other sandboxes), never reached through the proxy");
    expect(reason("10.89.0.1")).toBe("10.89.0.1 is in the private range 10.0.0.0/8, reached only when allowOut names an address or block inside it");
    expect(reason("192.0.2.11")).toBe("allowed");
    // A name allowed by name passes only at its other addresses.
    expect(reason("api.example.com", ["127.0.0.1"])).toBe("api.example.com (127.0.0.1) is loopback, never reached through the proxy (a sandbox's own loopback is not proxied; the proxy's would be the host's)");
    expect(decide(everything, "api.example.com", ["10.88.0.9", "203.0.113.5", "192.0.2.10"], agent)).toEqual({ allowed: true, addresses: ["203.0.113.5"], rule: "*.example.com" });
  });

  it("the host's other bridges' networks (containers, VMs) are refused like its own addresses", () => {
    const withContainers = refuseHost({ subnets: ["10.88.0.0/16"], hostNets: ["172.17.0.0/16"], interfaces: () => [] });
    const v = decide(everything, "172.17.0.2", [], withContainers);
    expect(v).toEqual({ allowed: false, reason: "172.17.0.2 is in 172.17.0.0/16, a network of the host's own containers or VMs, never reached through the proxy" });
    expect(decide(everything, "198.18.0.2", [], withContainers).allowed).toBe(true);
    expect(() => refuseHost({ hostNets: ["nope"] })).toThrow(/host network "nope" is not an address block/);
  });

  it("domain rules still match by name, with the refusals applied to what the name resolves to", () => {
    const names = policy(["api.example.com", "*.pythonhosted.org"], ["0.0.0.0/0"]);
    expect(decide(names, "api.example.com", ["198.51.100.6"], agent)).toEqual({ allowed: true, addresses: ["198.51.100.6"], rule: "api.example.com" });
    expect(decide(names, "files.pythonhosted.org", ["198.51.100.7"], agent)).toMatchObject({ allowed: true, rule: "*.pythonhosted.org" });
    expect(decide(names, "other.example.com", ["198.51.100.6"], agent).allowed).toBe(false);
    expect(decide(names, "files.pythonhosted.org", ["192.0.2.10"], agent)).toMatchObject({ allowed: false, reason: expect.stringContaining("is an address of the agent's host") });
  });

  it("private ranges (LAN, VPC, CGNAT, ULA) pass only when allowOut names an address or block inside them", () => {
    const reason = (p: ReturnType<typeof policy>, host: string, resolved: string[] = []) => {
      const v = decide(p, host, resolved, agent);
      return v.allowed ? `allowed by ${v.rule}` : v.reason;
    };
    const broad = policy(["0.0.0.0/0", "*.corp.example", "::/0"], []);
    for (const [host, range] of [["10.1.2.3", "10.0.0.0/8"], ["172.16.0.9", "172.16.0.0/12"], ["172.31.255.1", "172.16.0.0/12"], ["192.168.1.1", "192.168.0.0/16"], ["100.64.0.1", "100.64.0.0/10"], ["fd12::1", "fc00::/7"], ["::ffff:192.168.1.1", "192.168.0.0/16"], ["64:ff9b::10.1.2.3", "10.0.0.0/8"]]) {
      expect(reason(broad, host!), host).toContain(`is in the private range ${range}`);
    }
    // Neither ALL_TRAFFIC nor a domain allowed by name reaches a private address it resolves to.
    expect(reason(broad, "db.corp.example", ["10.1.2.3", "198.51.100.6"])).toBe("allowed by *.corp.example");
    expect(decide(broad, "db.corp.example", ["10.1.2.3", "198.51.100.6"], agent)).toMatchObject({ addresses: ["198.51.100.6"] });
    expect(reason(broad, "db.corp.example", ["10.1.2.3"])).toContain("db.corp.example (10.1.2.3) is in the private range 10.0.0.0/8");
    // Just outside the ranges: the internet.
    for (const host of ["172.32.0.1", "192.169.0.1", "100.128.0.1", "11.0.0.1"]) expect(reason(broad, host), host).toBe("allowed by 0.0.0.0/0");
    // Named inside a range: opened, for that address or block only, over a denyOut too.
    const named = policy(["10.1.2.3", "192.168.7.0/24", "fd00:1::/32"], ["0.0.0.0/0"]);
    expect(reason(named, "10.1.2.3")).toBe("allowed by 10.1.2.3");
    expect(reason(named, "10.1.2.4")).toContain("is in the private range 10.0.0.0/8");
    expect(reason(named, "192.168.7.200")).toBe("allowed by 192.168.7.0/24");
    expect(reason(named, "fd00:1::5")).toBe("allowed by fd00:1::/32");
    expect(reason(named, "db.internal", ["192.168.7.9"])).toBe("allowed by 192.168.7.0/24");
    // A block wider than the range is not a block inside it.
    expect(reason(policy(["10.0.0.0/7"], []), "10.1.2.3")).toContain("is in the private range 10.0.0.0/8");
    expect(reason(policy(["10.0.0.0/8"], []), "10.1.2.3")).toBe("allowed by 10.0.0.0/8");
  });

  it("the sidecar refuses loopback and link-local only: its host addresses are its pod's", () => {
    expect(refuseLocal(parseIp("127.0.0.1")!)).toContain("is loopback");
    expect(refuseLocal(parseIp("169.254.1.1")!)).toContain("is link-local");
    expect(refuseLocal(parseIp("10.88.0.1")!)).toBeUndefined();
    expect(refuseLocal(parseIp("192.0.2.10")!)).toBeUndefined();
  });

  it("reads the host's addresses again at most once a second, so one it gains is refused soon after", () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    const addresses = ["192.0.2.10"];
    let reads = 0;
    const refuse = refuseHost({ interfaces: () => (reads++, addresses) });
    const ip = parseIp("203.0.113.9")!;
    expect(refuse(ip)).toBeUndefined();
    addresses.push("203.0.113.9");
    for (let i = 0; i < 100; i++) refuse(ip);
    expect(reads).toBe(1);
    vi.advanceTimersByTime(1000);
    expect(refuse(ip)).toContain("is an address of the agent's host");
    expect(reads).toBe(2);
  });

  it("refuses a sandbox subnet that is not an address block", () => {
    expect(() => refuseHost({ subnets: ["10.88.0.0/40"] })).toThrow('sandbox subnet "10.88.0.0/40" is not an address block');
  });
});
