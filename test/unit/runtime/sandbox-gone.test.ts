// A view whose sandbox stopped running under a request (the local driver's pin finds pid 1 gone:
// SandboxNotFoundError "not running") is answered as e2b answers for a dead sandbox: Connect
// `unavailable`, HTTP 502 with envd's body. The SDK turns those into its "sandbox was killed or
// timed out" error; an internal error (500) or a missing path (404) would tell it something else.
import type { AddressInfo } from "node:net";
import { Code } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { SandboxNotFoundError } from "../../../controllers/drivers/driver.ts";
import { fsError } from "../../../controllers/runtime/fs-errors.ts";
import { HostView } from "../../../controllers/runtime/host-view.ts";
import { createRuntime } from "../../../controllers/runtime/runtime.ts";

/** A view whose sandbox has gone: every path lookup says so, as the local view's pin does. */
class GoneView extends HostView {
  override toHost(): string {
    throw new SandboxNotFoundError("gone-1", "not running");
  }
}

describe("a sandbox that stopped running under a request", () => {
  it("is Connect unavailable in a files call, not internal", () => {
    const err = fsError(new SandboxNotFoundError("gone-1", "not running"), "/x", "list");
    expect([err.code, err.rawMessage]).toEqual([Code.Unavailable, "sandbox gone-1: not running"]);
    expect(fsError(Object.assign(new Error("ENOENT: no such file"), { code: "ENOENT" }), "/x").code).toBe(Code.NotFound);
  });

  it("is envd's 502 on the HTTP files route and on a code context's cwd, not a 500", async () => {
    const rt = createRuntime();
    rt.addSandbox("gone-1", new GoneView(), {});
    const server = await rt.listen({ port: 0, host: "127.0.0.1" });
    const { createServer } = await import("node:http");
    const interp = createServer(rt.interpreter);
    await new Promise<void>((r) => interp.listen(0, "127.0.0.1", r));
    try {
      const headers = { "e2b-sandbox-id": "gone-1" };
      const file = await fetch(`http://127.0.0.1:${(server.address() as AddressInfo).port}/files?path=/x&username=root`, { headers });
      expect([file.status, await file.json()]).toEqual([502, { sandboxId: "gone-1", message: "The sandbox was not found", code: 502 }]);
      const ctx = await fetch(`http://127.0.0.1:${(interp.address() as AddressInfo).port}/contexts`, {
        method: "POST",
        headers: { ...headers, "content-type": "application/json" },
        body: JSON.stringify({ language: "bash", cwd: "/tmp" }),
      });
      expect([ctx.status, await ctx.json()]).toEqual([502, { sandboxId: "gone-1", message: "The sandbox was not found", code: 502 }]);
    } finally {
      interp.close();
      await rt.close();
    }
  });
});
