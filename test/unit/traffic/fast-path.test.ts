// The proxy's side of the kernel's fast path (README.md, "The kernel's fast path"): which
// redirected connections put their destination on it, for how long, and what a rule change does.
// The kernel's side (the nft set in a sandbox's namespace) is in
// test/controllers/drivers/local/egress-fast.test.ts.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { taggedHarness } from "../../support/tagged-get.ts";
import { TrafficProxy } from "../../../controllers/traffic/proxy.ts";
import { compilePolicy, type CompiledPolicy } from "../../../controllers/traffic/policy.ts";
import { FAST_PATH_CAP_S } from "../../../controllers/traffic/redirected.ts";
import { ANSWER_TTL_S } from "../../../controllers/traffic/dns-wire.ts";

const nothing = () => undefined;

describe("the proxy's fast path", () => {
  let h: Awaited<ReturnType<typeof taggedHarness>>;
  const admitted: string[] = [];
  const flushed: string[] = [];
  const rules = new Map<string, CompiledPolicy>([
    ["byaddr", compilePolicy({ allowOut: ["127.0.0.1"], denyOut: ["0.0.0.0/0"] })],
    ["byname", compilePolicy({ allowOut: ["*.allowed.test"], denyOut: ["0.0.0.0/0"] })],
    ["inspected", compilePolicy({ allowOut: ["127.0.0.1"], denyOut: ["0.0.0.0/0"] })],
  ]);

  beforeAll(async () => {
    h = await taggedHarness(
      () =>
        new TrafficProxy({
          refuse: nothing,
          policyFor: (tag) => rules.get(tag) ?? "no rules",
          resolve: async (name) => (name.endsWith("allowed.test") ? ["127.0.0.1"] : Promise.reject(Object.assign(new Error("nx"), { code: "ENOTFOUND" }))),
          // L7 policy applies to `inspected` only: its connections are the handler's (here: answered by it).
          l7: { wants: (s) => s === "inspected", handle: (c) => c.client.end("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nL7") },
          fastPath: {
            admit: (s, ip, p, seconds) => void admitted.push(`${s} ${ip}:${p} ${seconds}`),
            flush: (s, endOpen) => void flushed.push(`${s} ${endOpen}`),
          },
        }),
    );
  });

  afterAll(() => h.close());

  const redirected = (tag: string, host: string) => h.get(tag, host);

  it("an allowed connection without L7 puts its destination on the fast path: by its address up to the cap, by a name for the name's TTL", async () => {
    expect(await redirected("byaddr", "127.0.0.1")).toContain("hello 127.0.0.1");
    expect(admitted).toEqual([`byaddr 127.0.0.1:${h.port} ${FAST_PATH_CAP_S}`]);
    expect(await redirected("byname", "api.allowed.test")).toContain("hello api.allowed.test");
    expect(admitted.at(-1)).toBe(`byname 127.0.0.1:${h.port} ${ANSWER_TTL_S}`);
  });

  it("a refused connection, or one L7 policy could inspect, does not", async () => {
    const before = admitted.length;
    expect(await redirected("byname", "api.other.test")).toContain("403 Forbidden");
    expect(await redirected("inspected", "127.0.0.1")).toContain("L7");
    expect(admitted.length).toBe(before);
  });

  it("a rule change empties the sandbox's set, and ends its fast-path connections when the new rules deny one of its destinations", async () => {
    flushed.length = 0;
    h.proxy.revalidate("byname"); // rules unchanged: emptied, open connections kept
    rules.set("byaddr", compilePolicy({ allowOut: ["127.0.0.2"], denyOut: ["0.0.0.0/0"] }));
    h.proxy.revalidate("byaddr");
    expect(flushed).toEqual(["byname false", "byaddr true"]);
    // Nothing was put on it since: nothing to empty.
    h.proxy.revalidate("byaddr");
    expect(flushed.length).toBe(2);
  });
});
