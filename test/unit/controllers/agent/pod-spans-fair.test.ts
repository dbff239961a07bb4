// The agent's pulls of pod runtime spans (controllers/agent/pod-spans.ts) are shared fairly: with
// more busy sandboxes than pulls at once, every one gets its turn within a couple of rounds, and a
// request that will never have a span (unsampled, or never delivered) is not kept waited for.
// The pods are one loopback server answering an empty buffer, as a runtime with nothing to report.
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from "vitest";
import { PodSpanCollector } from "../../../../controllers/agent/pod-spans.ts";

let pod: Server;
let url: string;
const asked: string[] = [];

beforeAll(async () => {
  pod = createServer((req, res) => {
    asked.push(String(req.headers["e2b-sandbox-id"]));
    res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ spans: [], dropped: 0 }));
  });
  await new Promise<void>((r) => pod.listen(0, "127.0.0.1", r));
  url = `http://127.0.0.1:${(pod.address() as AddressInfo).port}`;
});
afterAll(() => pod.close());
// The collector's own once-a-second timer is held still: the rounds below are the test's.
beforeEach(() => {
  vi.useFakeTimers({ toFake: ["setInterval", "clearInterval"] });
  asked.length = 0;
});
afterEach(() => vi.useRealTimers());

const hex = (n: number, seed: number) => seed.toString(16).padStart(n, "0");
const traceparent = (i: number, round: number, flags = "01") => `00-${hex(32, i + 1)}-${hex(16, round * 1000 + i + 1)}-${flags}`;

describe("pod span pulls", () => {
  it("with 20 busy sandboxes and 16 pulls at once, each is pulled within two rounds", async () => {
    const agent = new PodSpanCollector({ runtimeOf: () => ({ url }), forward: () => {} });
    const ids = Array.from({ length: 20 }, (_, i) => `sbx-fair-${i}`);
    const pulled = new Set<string>();
    for (let round = 0; round < 2; round++) {
      // Every sandbox served a request since the last round.
      ids.forEach((id, i) => agent.handed(id, traceparent(i, round)));
      for (const id of await agent.tick()) pulled.add(id);
    }
    expect([...pulled].sort()).toEqual([...ids].sort());
    expect(new Set(asked)).toEqual(new Set(ids));
    agent.stop();
  });

  it("keeps no parent for an unsampled request, nor for one that never reached the runtime", async () => {
    const agent = new PodSpanCollector({ runtimeOf: () => ({ url }), forward: () => {} });
    agent.handed("sbx-unsampled", traceparent(1, 0, "00"));
    expect(agent.waiting("sbx-unsampled")).toBe(0);
    agent.handed("sbx-failed", traceparent(2, 0));
    agent.forget("sbx-failed", traceparent(2, 0));
    expect(agent.waiting("sbx-failed")).toBe(0);
    // Neither is pulled for.
    expect(await agent.tick()).toEqual([]);
    expect(asked).toEqual([]);
    agent.stop();
  });
});
