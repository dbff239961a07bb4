// One sandbox's DNS cannot starve another's: the proxy's lookups go through a queue per sandbox,
// taken in turn (controllers/traffic/lookup-queue.ts). The host's resolver is modelled as
// getaddrinfo on libuv's pool is: two lookups at a time, first come first served; names under
// hang.test never answer (an authoritative server that drops queries).
import { mkdtempSync, rmSync } from "node:fs";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, expect, it } from "vitest";
import { LookupQueue } from "../../../controllers/traffic/lookup-queue.ts";
import { compilePolicy } from "../../../controllers/traffic/policy.ts";
import { TrafficProxy } from "../../../controllers/traffic/proxy.ts";

let proxy: TrafficProxy;
let dir = "";
const hanging: (() => void)[] = [];

/** Two at a time, in arrival order, like getaddrinfo on libuv's default pool. */
function poolResolver(): (host: string) => Promise<string[]> {
  let running = 0;
  const waiting: (() => void)[] = [];
  const next = () => {
    if (running >= 2 || waiting.length === 0) return;
    running++;
    waiting.shift()!();
  };
  return (host) =>
    new Promise<string[]>((resolve) => {
      waiting.push(() => {
        const done = () => {
          running--;
          resolve(["192.0.2.10"]);
          next();
        };
        if (host.endsWith(".hang.test")) hanging.push(done);
        else setImmediate(done);
      });
      next();
    });
}

beforeAll(async () => {
  proxy = new TrafficProxy({ refuse: () => undefined, resolve: poolResolver(), policyFor: () => compilePolicy({ allowOut: ["*.test"], denyOut: ["0.0.0.0/0"] }) });
  dir = mkdtempSync(join(tmpdir(), "dns-turns-"));
  await proxy.listenTagged(join(dir, "p.sock"));
});

afterAll(async () => {
  for (const h of hanging.splice(0)) h();
  await proxy?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

function query(name: string): Buffer {
  const labels = name.split(".").map((l) => Buffer.concat([Buffer.from([l.length]), Buffer.from(l)]));
  const msg = Buffer.concat([Buffer.from([0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]), ...labels, Buffer.from([0, 0, 1, 0, 1])]);
  return Buffer.concat([Buffer.from([msg.length >> 8, msg.length & 255]), msg]);
}

/** Queries of `sandbox` over its redirected TCP port 53; resolves with the first answer's rcode,
 * or "none" when nothing came within `ms`. */
function ask(sandbox: string, names: string[], ms: number): Promise<number | "none"> {
  return new Promise((resolve) => {
    const s = connect(join(dir, "p.sock"), () => s.write(Buffer.concat([Buffer.from(`${sandbox} 10.0.0.53 53\n`), ...names.map(query)])));
    const t = setTimeout(() => resolve("none"), ms);
    s.on("data", (c: Buffer) => (clearTimeout(t), resolve(c[5]! & 0xf))).on("error", () => {});
  });
}

it("answers a sandbox's query while another sandbox's lookups hang, filling the host resolver's slots", async () => {
  void ask("flooder", Array.from({ length: 8 }, (_, i) => `n${i}.hang.test`), 5000);
  await new Promise((r) => setTimeout(r, 50));
  expect(await ask("neighbour", ["api.test"], 2000)).toBe(0);
});

it("lets one sandbox's lookups through in turn with others', and refuses past its queue at once", async () => {
  const q = new LookupQueue({ slots: 2, perSandbox: 1, queued: 2 });
  const order: string[] = [];
  const gates: Record<string, () => void> = {};
  const job = (who: string) => () => new Promise<string>((r) => ((order.push(who), (gates[who] = () => r(who)))));
  const a = [q.run("a", job("a1")), q.run("a", job("a2")), q.run("a", job("a3"))];
  await expect(q.run("a", job("a4"))).rejects.toMatchObject({ code: "EBUSY" });
  const b = q.run("b", job("b1"));
  const c = q.run("c", job("c1"));
  await Promise.resolve();
  expect(order).toEqual(["a1", "b1"]);
  gates.a1!();
  gates.b1!();
  await Promise.all([a[0], b]);
  // a's next waited its turn behind c, which had none yet.
  expect(order).toEqual(["a1", "b1", "c1", "a2"]);
  gates.c1!();
  gates.a2!();
  await Promise.all([c, a[1]]);
  const tick = () => new Promise((r) => setTimeout(r, 0));
  await tick();
  gates.a3!();
  expect(await a[2]).toBe("a3");
  await tick();
  expect(q.size).toEqual({ running: 0, waiting: 0 });
});
