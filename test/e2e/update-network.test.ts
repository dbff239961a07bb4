// `sbx.updateNetwork(...)` (PUT /sandboxes/{id}/network) through the real SDK and the whole
// system: a running sandbox's egress rules are replaced (omitted fields cleared, as E2B does) and
// apply to its next request, while its processes keep running: the local driver moves it between
// its own veth and the traffic-proxy without restarting it. A namespace on this machine stands in
// for the internet (outside-net.ts).
import { Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startOutside, type Outside } from "../support/outside-net.ts";
import { e2b } from "./sdk.ts";

let a: Outside;
let b: Outside;
const created: Sandbox[] = [];

beforeAll(async () => {
  a = await startOutside();
  b = await startOutside();
});

afterAll(async () => {
  await Promise.all(created.map((s) => s.kill().catch(() => false)));
  a?.stop();
  b?.stop();
});

async function run(sbx: Sandbox, cmd: string): Promise<string> {
  const r = await sbx.commands.run(cmd).catch((err: { stdout?: string }) => err);
  return (r.stdout ?? "").trim();
}

describe("updateNetwork", () => {
  it("replaces a running sandbox's rules: deny all, then allow one address, then back to the plain network, with its processes running throughout", async () => {
    const sbx = await Sandbox.create(e2b());
    created.push(sbx);
    // A process started before any change, counting while it runs.
    const ticker = await sbx.commands.run("while true; do echo tick >> /tmp/ticks; sleep 0.1; done", { background: true });
    const inside = () => run(sbx, "pgrep -of 'echo tick'");
    const pid = await inside();
    expect(pid).toMatch(/^\d+$/);
    /** The same process, still listed by envd: a restarted sandbox would have neither. */
    const alive = async () => (await inside()) === pid && (await sbx.commands.list()).some((p) => p.pid === ticker.pid);
    const ticks = async () => Number(await run(sbx, "wc -l < /tmp/ticks"));
    /** Ticks went on since the last call: the process kept running, not only exists. */
    let last = 0;
    const kept = async () => {
      const before = last;
      for (const deadline = Date.now() + 3000; Date.now() < deadline && last <= before; await new Promise((r) => setTimeout(r, 150))) last = await ticks();
      return (await alive()) && last > before;
    };
    const curl = (ip: string) => run(sbx, `curl -s -m 5 http://${ip}/`);
    const direct = (ip: string) => run(sbx, `env -u HTTP_PROXY -u http_proxy curl -s -m 3 http://${ip}/; echo " $?"`);
    expect(await kept()).toBe(true);

    // No rules: straight out through its own veth, no proxy.
    expect(await run(sbx, 'echo "[$HTTP_PROXY]"')).toBe("[]");
    expect(await curl(a.ip)).toBe(`outside saw ${a.hostIp}`);

    await sbx.updateNetwork({ denyOut: ["0.0.0.0/0"] });
    expect(await curl(a.ip)).toBe(`traffic-proxy: egress denied: ${a.ip} is denied by denyOut "0.0.0.0/0"`);
    // Without proxy variables too: the redirect in its namespace brings curl to the proxy.
    expect(await direct(a.ip)).toBe(`traffic-proxy: egress denied: ${a.ip} is denied by denyOut "0.0.0.0/0"\n 0`);
    expect(await kept()).toBe(true);

    await sbx.updateNetwork({ allowOut: [a.ip], denyOut: ["0.0.0.0/0"] });
    expect(await curl(a.ip)).toBe(`outside saw ${a.hostIp}`);
    expect(await curl(b.ip)).toBe(`traffic-proxy: egress denied: ${b.ip} is denied by denyOut "0.0.0.0/0"`);
    expect(await kept()).toBe(true);

    // Omitted fields are cleared: the plain network again.
    await sbx.updateNetwork({});
    expect(await run(sbx, 'echo "[$HTTP_PROXY]"')).toBe("[]");
    expect(await direct(a.ip)).toBe(`outside saw ${a.hostIp} 0`);
    expect(await direct(b.ip)).toBe(`outside saw ${b.hostIp} 0`);
    expect(await kept()).toBe(true);
  });

  it("refuses rules the proxy could not enforce, naming the entry, and leaves the sandbox's network as it was", async () => {
    const sbx = await Sandbox.create({ ...e2b(), network: { allowOut: [a.ip], denyOut: ["0.0.0.0/0"] } });
    created.push(sbx);
    await expect(sbx.updateNetwork({ denyOut: ["example.com"] })).rejects.toThrow(/example\.com/);
    expect(await run(sbx, `curl -s -m 5 http://${a.ip}/`)).toBe(`outside saw ${a.hostIp}`);
    expect(await run(sbx, `curl -s -m 5 http://${b.ip}/`)).toMatch(/^traffic-proxy: egress denied/);
  });
});
