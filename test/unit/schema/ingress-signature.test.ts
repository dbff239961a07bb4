import { describe, expect, it } from "vitest";
import { ingressKey, signIngress, verifyIngress, SIGNATURE_TTL_S, type SignedTarget, type VerifyResult } from "../../../schema/ingress/signature.ts";
import { ingressVerifier } from "../../../controllers/agent/ingress-verify.ts";

const target = { sandboxId: "abc123", port: 49983, method: "POST", pathAndQuery: "/process.Process/Start" };
const now = 1_790_000_000_000;

type Verify = (header: string | undefined, t: SignedTarget, nowMs: number) => Promise<VerifyResult>;
// The same cases for WebCrypto's check and the agent's synchronous Node one (what the ingress runs).
const verifiers: [string, (token: string) => Promise<Verify>][] = [
  ["verifyIngress (WebCrypto)", async (token) => { const key = await ingressKey(token); return (h, t, n) => verifyIngress(key, h, t, n); }],
  ["ingressVerifier (the agent's, node:crypto)", async (token) => { const v = ingressVerifier(token); return async (h, t, n) => v(h, t, n); }],
];

describe.each(verifiers)("ingress signature: %s", (_name, verifierFor) => {
  it("verifies what the edge signed", async () => {
    const sig = await signIngress(await ingressKey("cluster-token"), target, now);
    expect(await (await verifierFor("cluster-token"))(sig, target, now)).toEqual({ ok: true });
  });

  it("rejects another sandbox, port, method or path", async () => {
    const verify = await verifierFor("cluster-token");
    const sig = await signIngress(await ingressKey("cluster-token"), target, now);
    for (const other of [
      { ...target, sandboxId: "abc124" },
      { ...target, port: 8080 },
      { ...target, method: "GET" },
      { ...target, pathAndQuery: "/files?path=/etc/passwd" },
    ]) {
      expect(await verify(sig, other, now)).toEqual({ ok: false, reason: "mismatch" });
    }
  });

  it("rejects a signature made with another cluster's token", async () => {
    const sig = await signIngress(await ingressKey("other-token"), target, now);
    expect(await (await verifierFor("cluster-token"))(sig, target, now)).toEqual({ ok: false, reason: "mismatch" });
  });

  it("rejects missing, malformed and expired signatures", async () => {
    const verify = await verifierFor("cluster-token");
    expect(await verify(undefined, target, now)).toEqual({ ok: false, reason: "missing" });
    expect(await verify("v1.x.y", target, now)).toEqual({ ok: false, reason: "malformed" });
    const sig = await signIngress(await ingressKey("cluster-token"), target, now);
    expect(await verify(sig, target, now + (SIGNATURE_TTL_S + 1) * 1000)).toEqual({ ok: false, reason: "expired" });
  });
});
