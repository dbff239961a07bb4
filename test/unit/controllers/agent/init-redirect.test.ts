// The agent's POST /init to a pod's runtime carries the sandbox's access token and env, and the
// tenant's code can answer on the runtime's port (root in the pod). A 307 there must not move the
// POST to a host the tenant picked (a request forgery from the agent's network position that would
// also hand that host the token): the redirect is a failed init. The "pod" is a loopback server
// answering 307; the target it names counts what reaches it. And the answer is the tenant's data: a
// refusal's body becomes the sandbox's Ready message, so only its first bytes are read.
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { INIT_ERROR_MAX_BYTES, initRemote } from "../../../../controllers/agent/reconciler.ts";
import type { Intent } from "../../../../schema/protocol/index.ts";

let reached = 0;
let target: Server;
let pod: Server;
let podUrl: string;
let chatty: Server;
let chattyUrl: string;

const listen = async (s: Server) => {
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
  return `http://127.0.0.1:${(s.address() as AddressInfo).port}`;
};

beforeAll(async () => {
  target = createServer((req, res) => {
    reached++;
    req.resume();
    res.end("{}");
  });
  const targetUrl = await listen(target);
  pod = createServer((req, res) => {
    req.resume();
    res.writeHead(307, { location: `${targetUrl}/admin/whatever` }).end();
  });
  podUrl = await listen(pod);
  // A runtime port answering every /init with a 500 and 8 MiB of text.
  chatty = createServer((req, res) => {
    req.resume();
    res.writeHead(500, { "content-type": "text/plain" });
    res.end("x".repeat(8 << 20));
  });
  chattyUrl = await listen(chatty);
});
afterAll(() => {
  target.close();
  pod.close();
  chatty.close();
});

describe("initRemote", () => {
  it("treats a runtime's redirect as a failed init and sends nothing to where it points", async () => {
    const intent = { sandboxId: "sbx1", envdAccessToken: "secret-token", envVars: { A: "1" }, issuedAt: Date.now() } as unknown as Intent;
    await expect(initRemote(podUrl, intent)).rejects.toThrow(/HTTP 307/);
    expect(reached).toBe(0);
  });

  it("keeps only the first bytes of a runtime's refusal in the error", async () => {
    const intent = { sandboxId: "sbx2", envdAccessToken: "secret-token", envVars: {}, issuedAt: Date.now() } as unknown as Intent;
    const err = await initRemote(chattyUrl, intent).then(
      () => undefined,
      (e: unknown) => e as Error,
    );
    expect(err?.message).toMatch(/HTTP 500 x+$/);
    expect(err!.message.length).toBeLessThanOrEqual(INIT_ERROR_MAX_BYTES + 200);
  });
});
