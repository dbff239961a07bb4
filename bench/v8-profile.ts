// A V8 CPU profile of workerd's isolate over its inspector (workerd --inspector-addr), for the
// benchmarks' EDGE_BENCH_PROFILE / E2E_BENCH_EDGE_PROFILE: open the file in Chrome DevTools.

/** Starts V8's sampling profiler in the edge isolate over the DevTools protocol. */
export async function startProfiler(port: number): Promise<{ stop(): Promise<unknown> }> {
  const targets = (await (await fetch(`http://127.0.0.1:${port}/json/list`)).json()) as { webSocketDebuggerUrl: string }[];
  const ws = new WebSocket(targets[0]!.webSocketDebuggerUrl);
  await new Promise((ok, fail) => {
    ws.addEventListener("open", ok);
    ws.addEventListener("error", fail);
  });
  const pending = new Map<number, (result: unknown) => void>();
  ws.addEventListener("message", (ev) => {
    const msg = JSON.parse(String(ev.data)) as { id?: number; result?: unknown };
    if (msg.id !== undefined) pending.get(msg.id)?.(msg.result);
  });
  let id = 0;
  const call = (method: string, params: object = {}) =>
    new Promise<any>((ok) => {
      pending.set(++id, ok);
      ws.send(JSON.stringify({ id, method, params }));
    });
  await call("Profiler.enable");
  await call("Profiler.setSamplingInterval", { interval: 250 });
  await call("Profiler.start");
  return {
    async stop() {
      const { profile } = await call("Profiler.stop");
      ws.close();
      return profile;
    },
  };
}
