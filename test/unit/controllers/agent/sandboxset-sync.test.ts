// SandboxSetSync's refusal of an uncountable SandboxSet (review 26 L4): the Warning Event and
// condition are what tell the tenant why the set never reaches the edge, so a failed post of them
// is retried until it lands, and then not again for that generation.
import { describe, expect, it, vi } from "vitest";
import { SandboxSetSync, type PoolSink } from "../../../../controllers/agent/kube-sync/sandboxset-sync.ts";

const uncountable = { metadata: { name: "s", uid: "u1", generation: 1 }, spec: { replicas: 1, template: { spec: { containers: [{ name: "main" }, { name: "side" }] } } } };

describe("SandboxSetSync refusal", () => {
  it("a failed refusal post is retried until it lands, then not posted again; nothing reaches the edge", async () => {
    const sink: PoolSink = { upsert: vi.fn(async () => "applied" as const), remove: vi.fn(async () => {}), prune: vi.fn(async () => {}) };
    let changed: (obj: typeof uncountable) => void = () => {};
    const cache = { list: () => [uncountable], get: (name: string) => (name === "s" ? uncountable : undefined), onChange: (cb: typeof changed) => (changed = cb) };
    let calls = 0;
    const refused = vi.fn(async (_set: unknown, _err: Error) => {
      if (++calls === 1) throw new Error("events: 503");
    });
    const sync = new SandboxSetSync({ sandboxSets: cache as never, namespace: "team", cluster: "c", sink, refused, retryMs: 5 });
    sync.start();
    await vi.waitFor(() => expect(refused).toHaveBeenCalledTimes(2), { timeout: 2000 });
    // Landed: a later pass of the same generation (a resync's event) does not post it again.
    changed(uncountable);
    await new Promise((r) => setTimeout(r, 50));
    sync.stop();
    expect(refused).toHaveBeenCalledTimes(2);
    expect(refused.mock.calls[1]![1]).toMatchObject({ problems: expect.arrayContaining([expect.stringContaining('container "side"')]) });
    expect(sink.upsert).not.toHaveBeenCalled();
  });
});
