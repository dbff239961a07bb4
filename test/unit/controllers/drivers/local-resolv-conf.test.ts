// The resolvers a local sandbox gets: the host's, unless they are a loopback stub that a sandbox
// in its own network namespace cannot reach.
import { describe, expect, it } from "vitest";
import { resolvConf } from "../../../../controllers/drivers/local/layout.ts";

const STUB = "nameserver 127.0.0.53\noptions edns0 trust-ad\nsearch .\n";
const UPSTREAM = "nameserver 10.0.0.2\nnameserver 2001:db8::53\n";

describe("local sandbox resolv.conf", () => {
  it("keeps the host's file when it names a reachable server", () => {
    expect(resolvConf("nameserver 10.255.255.53\n", () => UPSTREAM)).toBe("nameserver 10.255.255.53\n");
  });

  it("replaces systemd-resolved's loopback stub by the upstream servers it lists", () => {
    expect(resolvConf(STUB, () => UPSTREAM)).toBe(UPSTREAM);
  });

  it("keeps the stub when there is no usable upstream list (names then do not resolve inside)", () => {
    expect(resolvConf(STUB, () => undefined)).toBe(STUB);
    expect(resolvConf(STUB, () => "nameserver 127.0.0.1\n")).toBe(STUB);
  });
});
