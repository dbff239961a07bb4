// OpenKruise's `e2b.agents.kruise.io/return-sandbox-ip` extension (issue 11.6), through the real
// e2b SDK against the whole local system: a sandbox created with it shows its own IP address in
// its metadata (`e2b.agents.kruise.io/sandbox-ip`), in the create answer and in getInfo(); the
// address is the one the sandbox itself has; the key cannot be set by a user; without the
// extension nothing is added.
import { Sandbox } from "e2b";
import { afterAll, describe, expect, it } from "vitest";
import { e2b } from "./sdk.ts";

const RETURN_IP = "e2b.agents.kruise.io/return-sandbox-ip";
const SANDBOX_IP = "e2b.agents.kruise.io/sandbox-ip";
const created: Sandbox[] = [];
afterAll(async () => {
  await Promise.all(created.map((s) => s.kill().catch(() => false)));
});

/** The sandbox's own IPv4 address on its eth0, as `ip` inside it says. */
async function ownAddress(sbx: Sandbox): Promise<string> {
  const r = await sbx.commands.run("ip -4 -o addr show dev eth0");
  return r.stdout.match(/inet (\d+\.\d+\.\d+\.\d+)\//)![1]!;
}

describe("return-sandbox-ip", () => {
  it("metadata shows the sandbox's own address: in getInfo() and the create answer", async () => {
    const sbx = await Sandbox.create({ ...e2b(), metadata: { [RETURN_IP]: "true", plain: "x" } });
    created.push(sbx);
    const own = await ownAddress(sbx);
    const info = await sbx.getInfo();
    expect(info.metadata).toEqual({ plain: "x", [SANDBOX_IP]: own });
    // The create answer itself, as OpenKruise's gateway gives it.
    const { apiUrl, apiKey } = e2b();
    const res = await fetch(`${apiUrl}/sandboxes`, {
      method: "POST",
      headers: { "x-api-key": apiKey, "content-type": "application/json" },
      body: JSON.stringify({ templateID: "base", metadata: { [RETURN_IP]: "true" } }),
    });
    expect(res.status).toBe(201);
    const body = (await res.json()) as { sandboxID: string; metadata?: Record<string, string> };
    const second = await Sandbox.connect(body.sandboxID, e2b());
    created.push(second);
    expect(body.metadata).toEqual({ [SANDBOX_IP]: await ownAddress(second) });
    expect(await ownAddress(second)).not.toBe(own);
  });

  it("without it nothing is added; a user cannot set the key; a value other than a bool is a 400 naming it", async () => {
    const sbx = await Sandbox.create({ ...e2b(), metadata: { plain: "y" } });
    created.push(sbx);
    expect((await sbx.getInfo()).metadata).toEqual({ plain: "y" });
    await expect(Sandbox.create({ ...e2b(), metadata: { [SANDBOX_IP]: "10.0.0.1" } })).rejects.toThrow(/sandbox-ip/);
    await expect(Sandbox.create({ ...e2b(), metadata: { [RETURN_IP]: "yes" } })).rejects.toThrow(/return-sandbox-ip" must be "true" or "false", not "yes"/);
  });
});
