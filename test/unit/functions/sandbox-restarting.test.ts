// The gateway's answer for a sandbox whose pid 1 was not back within its hold (gateway.ts): the
// agent-unavailable "retry" shapes, never E2B's 502 (the SDK's health probe reads it as a killed
// sandbox) nor Connect `unavailable` (commands.run reports "probably not running anymore").
import { describe, expect, it } from "vitest";
import { sandboxRestarting } from "../../../functions/gateway/agent-unavailable.ts";

const req = (headers: Record<string, string>) => new Request("http://edge.test/x", { method: "POST", headers });

describe("a sandbox still starting again after the gateway's hold", () => {
  it("is told to retry in each shape the SDKs read: a Connect stream's end-stream `aborted`, a unary 409 `aborted`, plain HTTP 503 with Retry-After", async () => {
    const stream = sandboxRestarting(req({ "content-type": "application/connect+json" }), "sbx1", 15_000);
    expect(stream.status).toBe(200);
    const bytes = new Uint8Array(await stream.arrayBuffer());
    expect(bytes[0]).toBe(2); // end-stream flag
    const end = JSON.parse(new TextDecoder().decode(bytes.subarray(5)));
    expect(end).toEqual({ error: { code: "aborted", message: expect.stringMatching(/^Sandbox sbx1 is starting again: .*not back within 15 s\. Retry/) } });

    const unary = sandboxRestarting(req({ "content-type": "application/json", "connect-protocol-version": "1" }), "sbx1", 15_000);
    expect(unary.status).toBe(409);
    expect(await unary.json()).toMatchObject({ code: "aborted", message: expect.stringContaining("starting again") });

    const plain = sandboxRestarting(req({}), "sbx1", 15_000);
    expect(plain.status).toBe(503);
    expect(plain.headers.get("retry-after")).toBe("2");
    expect(await plain.json()).toMatchObject({ sandboxId: "sbx1", code: 503, message: expect.stringContaining("its files kept") });
  });

  it("one not held because too many already wait is told so, not that it waited", async () => {
    const plain = sandboxRestarting(req({}), "sbx1", "crowded");
    expect(plain.status).toBe(503);
    const { message } = (await plain.json()) as { message: string };
    expect(message).toMatch(/^Sandbox sbx1 is starting again: .*too many requests already wait for it\. Retry/);
    expect(message).not.toContain("within");
  });
});
