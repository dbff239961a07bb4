import { describe, expect, it } from "vitest";
import { ingressKey, signIngress, verifyIngress, SIGNATURE_TTL_S } from "../../../schema/ingress/signature.ts";

const target = { sandboxId: "abc123", port: 49983, method: "POST", pathAndQuery: "/process.Process/Start" };
const now = 1_790_000_000_000;

describe("ingress signature", () => {
  it("verifies what the edge signed", async () => {
    const key = await ingressKey("cluster-token");
    const sig = await signIngress(key, target, now);
    expect(await verifyIngress(key, sig, target, now)).toEqual({ ok: true });
  });

  it("rejects another sandbox, port, method or path", async () => {
    const key = await ingressKey("cluster-token");
    const sig = await signIngress(key, target, now);
    for (const other of [
      { ...target, sandboxId: "abc124" },
      { ...target, port: 8080 },
      { ...target, method: "GET" },
      { ...target, pathAndQuery: "/files?path=/etc/passwd" },
    ]) {
      expect(await verifyIngress(key, sig, other, now)).toEqual({ ok: false, reason: "mismatch" });
    }
  });

  it("rejects a signature made with another cluster's token", async () => {
    const sig = await signIngress(await ingressKey("other-token"), target, now);
    expect(await verifyIngress(await ingressKey("cluster-token"), sig, target, now)).toEqual({ ok: false, reason: "mismatch" });
  });

  it("rejects missing, malformed and expired signatures", async () => {
    const key = await ingressKey("cluster-token");
    expect(await verifyIngress(key, undefined, target, now)).toEqual({ ok: false, reason: "missing" });
    expect(await verifyIngress(key, "v1.x.y", target, now)).toEqual({ ok: false, reason: "malformed" });
    const sig = await signIngress(key, target, now);
    expect(await verifyIngress(key, sig, target, now + (SIGNATURE_TTL_S + 1) * 1000)).toEqual({ ok: false, reason: "expired" });
  });
});
