// The agent's pulls from a pod (its runtime's spans, its traffic sidecar's audit records) go to an
// address the tenant's code can answer on (root in the pod can take either port). A redirect in
// that answer must not move the pull: following it would send the agent's GET, from the agent's
// network position, to a host the tenant picked, with the sandbox's envd token (`x-access-token`
// survives a cross-origin redirect in undici) or the pull token (`authorization` survives a
// same-origin one). Each "pod" here is a loopback server answering 307; the target it names counts
// what reaches it.
import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { PodSpanCollector } from "../../../../controllers/agent/pod-spans.ts";
import { PodAuditCollector } from "../../../../controllers/drivers/kubernetes/pod-audit.ts";

const reached: { path: string; headers: IncomingHttpHeaders }[] = [];
let target: Server;
let targetUrl: string;
let pod: Server;
let podUrl: string;
let samePod: Server;
let samePodUrl: string;

const listen = async (s: Server) => {
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
  return `http://127.0.0.1:${(s.address() as AddressInfo).port}`;
};
const answer = (req: { url?: string; headers: IncomingHttpHeaders }, res: import("node:http").ServerResponse) => {
  reached.push({ path: req.url ?? "", headers: req.headers });
  res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ spans: [], records: [], dropped: 0 }));
};

beforeAll(async () => {
  target = createServer(answer);
  targetUrl = await listen(target);
  // This pod sends the pull to another host.
  pod = createServer((_req, res) => res.writeHead(307, { location: `${targetUrl}/admin/whatever` }).end());
  podUrl = await listen(pod);
  // This one keeps it within its own origin (where `authorization` is kept), on a path it picked.
  samePod = createServer((req, res) => (req.url?.startsWith("/landed") ? answer(req, res) : res.writeHead(307, { location: "/landed" }).end()));
  samePodUrl = await listen(samePod);
});
afterAll(() => {
  pod.close();
  samePod.close();
  target.close();
});
beforeEach(() => {
  reached.length = 0;
});

describe("a pod's answer cannot move the agent's pull elsewhere", () => {
  it("the runtime spans pull does not follow a redirect, and the envd token goes nowhere else", async () => {
    const agent = new PodSpanCollector({ runtimeOf: () => ({ url: podUrl, token: "envd-secret" }), forward: () => {} });
    agent.handed("sbx-redirect", `00-${"1".padStart(32, "0")}-${"1".padStart(16, "0")}-01`);
    const r = await agent.pull("sbx-redirect");
    expect(r.error).toBeDefined();
    expect(reached).toEqual([]);
    agent.stop();
  });

  it("the audit pull follows neither a cross-origin nor a same-origin redirect with its token", async () => {
    for (const base of [podUrl, samePodUrl]) {
      const sink: unknown[] = [];
      const agent = new PodAuditCollector({ sandboxes: () => ["sbx-a"], targetOf: () => ({ url: base, token: "pull-secret" }), sink: (x) => sink.push(x) });
      const r = await agent.pull("sbx-a");
      expect(r.error).toBeDefined();
      expect(reached).toEqual([]);
      expect(sink).toEqual([]);
    }
  });
});
