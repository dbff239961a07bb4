// Network settings a client chooses at create time, through the real SDK: no internet access at
// all, and user ports that require the sandbox's traffic token.
import { Sandbox } from "e2b";
import { afterAll, describe, expect, it } from "vitest";
import { e2b, sleep } from "./sdk.ts";

const created: Sandbox[] = [];
afterAll(async () => {
  await Promise.all(created.map((s) => s.kill().catch(() => false)));
});

/** Whether a TCP connect from inside the sandbox to the edge's own port on the host succeeds. */
async function reachHost(sbx: Sandbox): Promise<boolean> {
  const port = new URL(e2b().apiUrl).port;
  const probe = `python3 -c 'import socket; s=socket.socket(); s.settimeout(2); print(s.connect_ex(("127.0.0.1", ${port})))'`;
  return (await sbx.commands.run(probe)).stdout.trim() === "0";
}

describe("network", () => {
  it("allowInternetAccess:false leaves the sandbox without any network, while the default has it", async () => {
    const open = await Sandbox.create(e2b());
    const closed = await Sandbox.create({ ...e2b(), allowInternetAccess: false });
    created.push(open, closed);
    expect(await reachHost(open)).toBe(true);
    expect(await reachHost(closed)).toBe(false);
    expect((await Sandbox.getInfo(closed.sandboxId, e2b())).allowInternetAccess).toBe(false);
  });

  it("allowPublicTraffic:false makes user ports require the traffic access token", async () => {
    const sbx = await Sandbox.create({ ...e2b(), network: { allowPublicTraffic: false } });
    created.push(sbx);
    expect(sbx.trafficAccessToken).toMatch(/^[0-9a-f]+$/);
    await sbx.files.write("/home/user/www/index.html", "private page");
    await sbx.commands.run("cd /home/user/www && python3 -m http.server 8001 >/dev/null 2>&1", { background: true });
    const { apiUrl } = e2b();
    const headers = { "e2b-sandbox-id": sbx.sandboxId, "e2b-sandbox-port": "8001" };

    const denied = await fetch(`${apiUrl}/index.html`, { headers });
    expect(denied.status).toBe(401);
    expect(await denied.json()).toMatchObject({ code: 401 });

    let res: Response | undefined;
    const deadline = Date.now() + 10_000;
    while (Date.now() < deadline) {
      res = await fetch(`${apiUrl}/index.html`, { headers: { ...headers, "e2b-traffic-access-token": sbx.trafficAccessToken! } });
      if (res.status === 200) break;
      await sleep(200);
    }
    expect(res?.status).toBe(200);
    expect(await res!.text()).toBe("private page");
  });
});
