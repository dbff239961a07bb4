// The proxy's side of the kernel's fast path (README.md, "The kernel's fast path"): which
// redirected connections put their destination on it, for how long, and what a rule change does.
// The kernel's side (the nft set in a sandbox's namespace) is in
// test/controllers/drivers/local/egress-fast.test.ts.
import { spawn } from "node:child_process";
import { connect, type Socket } from "node:net";
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { taggedGet, taggedHarness } from "../../support/tagged-get.ts";
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
    ["twice", compilePolicy({ allowOut: ["127.0.0.1"], denyOut: ["0.0.0.0/0"] })],
    ["late", compilePolicy({ allowOut: ["127.0.0.1"], denyOut: ["0.0.0.0/0"] })],
  ]);
  /** Sandboxes whose connection the proxy has judged (L7Hook.wants is asked right after). */
  const judged: string[] = [];

  beforeAll(async () => {
    h = await taggedHarness(
      () =>
        new TrafficProxy({
          refuse: nothing,
          policyFor: (tag) => rules.get(tag) ?? "no rules",
          resolve: async (name) => (name.endsWith("allowed.test") ? ["127.0.0.1"] : Promise.reject(Object.assign(new Error("nx"), { code: "ENOTFOUND" }))),
          // L7 policy applies to `inspected` only: its connections are the handler's (here: answered by it).
          l7: { wants: (s) => (judged.push(s), s === "inspected"), handle: (c) => c.client.end("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nL7") },
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

  it("a connection still connecting when a rule change comes does not put its destination on the fast path after it", async () => {
    // An origin whose accept queue is full (listen backlog 0, one connection queued, none
    // accepted): the kernel drops the proxy's SYN, so its connect is pending until the origin
    // accepts (then the SYN's retransmission gets through).
    const origin = spawn("python3", ["-u", "-c", [
      "import socket, sys",
      "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(0); print(s.getsockname()[1], flush=True)",
      "sys.stdin.readline()",
      "while True:",
      "    c, _ = s.accept(); c.close()",
    ].join("\n")], { stdio: ["pipe", "pipe", "inherit"] });
    try {
      const port = Number(await new Promise<string>((r) => origin.stdout!.once("data", (c: Buffer) => r(c.toString().trim()))));
      const filler: Socket = connect(port, "127.0.0.1").on("error", () => {});
      await new Promise((r) => filler.once("connect", r));
      judged.length = 0;
      const before = admitted.length;
      const done = taggedGet(h.socketPath, "late", port, "127.0.0.1");
      while (!judged.includes("late")) await sleep(20);
      // Allowed under the old rules and connecting: now the rules change.
      rules.set("late", compilePolicy({ allowOut: ["127.0.0.2"], denyOut: ["0.0.0.0/0"] }));
      h.proxy.revalidate("late");
      origin.stdin!.write("go\n");
      await done;
      expect(admitted.slice(before)).toEqual([]);
      filler.destroy();
    } finally {
      origin.kill("SIGKILL");
    }
  });

  it("a sandbox the proxy forgets (destroyed) leaves nothing behind: its next rule change has nothing to empty", async () => {
    expect(await redirected("byname", "api.allowed.test")).toContain("hello api.allowed.test");
    flushed.length = 0;
    h.proxy.forget("byname");
    h.proxy.revalidate("byname");
    expect(flushed).toEqual([]);
  });

  it("a destination already on the fast path is not handed to the kernel again while its entry lasts (no relay command, no nft run)", async () => {
    const before = admitted.length;
    expect(await redirected("twice", "127.0.0.1")).toContain("hello 127.0.0.1");
    expect(await redirected("twice", "127.0.0.1")).toContain("hello 127.0.0.1");
    expect(admitted.slice(before)).toEqual([`twice 127.0.0.1:${h.port} ${FAST_PATH_CAP_S}`]);
  });
});
