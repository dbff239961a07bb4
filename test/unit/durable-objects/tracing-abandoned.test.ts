// The isolate's armed export waits on a timer of the request or Durable Object call that armed it.
// workerd drops that timer with its context (a Durable Object reset or evicted mid-wait: the
// timer neither fires nor fails): the export it armed never runs, and before, no caller armed
// another one again, so the isolate exported no span for the rest of its life. Emulated here by
// clearing the armed timer: spans of later requests must still reach the collector. A timer taken
// for abandoned that fires late after all must leave the export armed since then as the one armed.
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { ARMED_FORGOTTEN_MS, flushEdgeTraces, startRequestSpan } from "../../../durable-objects/tracing/edge-tracing.ts";

let server: Server;
let exports = 0;
let env: { OTEL_EXPORTER_OTLP_ENDPOINT: string };

beforeAll(async () => {
  server = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      exports++;
      res.writeHead(200, { "content-type": "application/x-protobuf" }).end();
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  env = { OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${(server.address() as AddressInfo).port}` };
});
afterAll(() => new Promise<void>((r) => server.close(() => r())));

/** A traced request that ended: its span waits for the next export. */
function endedRequest(): void {
  startRequestSpan(env, "GET /sandboxes", null).span!.end();
}

describe("the edge's trace export", () => {
  it("is armed again by a later request when the one that armed it lost its timer", async () => {
    endedRequest();
    await flushEdgeTraces(); // the first export goes at once: the next must wait FLUSH_MS
    expect(exports).toBe(1);

    endedRequest();
    vi.useFakeTimers({ toFake: ["setTimeout"] });
    const armed = flushEdgeTraces();
    vi.clearAllTimers(); // the arming caller's context is gone, and its timer with it
    vi.useRealTimers();
    expect(armed).toBeDefined();

    endedRequest();
    expect(flushEdgeTraces()).toBeUndefined(); // one is armed: nothing more to hold yet
    await new Promise((r) => setTimeout(r, ARMED_FORGOTTEN_MS + 50));
    endedRequest();
    const next = flushEdgeTraces();
    expect(next).toBeDefined();
    await next;
    expect(exports).toBe(2);
  });

  it("keeps one export armed when a timer taken for abandoned fires late after all", async () => {
    endedRequest();
    await flushEdgeTraces(); // an export just ran: the next armed one waits on a timer

    endedRequest();
    let late: (() => void) | undefined;
    const spy = vi.spyOn(globalThis, "setTimeout").mockImplementationOnce(((fn: () => void) => {
      late = fn; // held back: this timer fires only when the test says so
      return 0;
    }) as unknown as typeof setTimeout);
    const first = flushEdgeTraces();
    spy.mockRestore();
    expect(first).toBeDefined();
    expect(late).toBeDefined();

    await new Promise((r) => setTimeout(r, ARMED_FORGOTTEN_MS + 50));
    endedRequest();
    await flushEdgeTraces(); // the first taken for abandoned: this one arms and exports at once
    endedRequest();
    const armed = flushEdgeTraces(); // waits FLUSH_MS on a live timer
    expect(armed).toBeDefined();

    late!(); // the first's timer fires after all: it must not clear the one armed since
    await first;
    endedRequest();
    expect(flushEdgeTraces()).toBeUndefined(); // still one armed: nothing more to hold
    await armed;
  });
});
