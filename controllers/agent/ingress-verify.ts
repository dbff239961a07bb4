// The agent's check of the edge's ingress signatures (schema/ingress/signature.ts), with Node's
// synchronous HMAC: WebCrypto's `verify` runs on libuv's thread pool, a hand-off to another
// thread and back for every request the ingress admits (each cell of the code interpreter, each
// envd call), which on a loaded machine is a wait for a core each way.
import { createHmac, timingSafeEqual } from "node:crypto";
import { canonicalText, INGRESS_KEY_LABEL, parseSignature, type SignedTarget, type VerifyResult } from "../../schema/ingress/signature.ts";

export type IngressVerifier = (header: string | undefined, target: SignedTarget, nowMs: number) => VerifyResult;

export function ingressVerifier(clusterToken: string): IngressVerifier {
  const key = createHmac("sha256", clusterToken).update(INGRESS_KEY_LABEL).digest();
  return (header, target, nowMs) => {
    const sig = parseSignature(header, nowMs);
    if (!sig.ok) return sig;
    // Compared as base64url text (both 43 characters): no decoding of the header's MAC.
    const want = createHmac("sha256", key).update(canonicalText(target, sig.expires)).digest("base64url");
    return timingSafeEqual(Buffer.from(want), Buffer.from(sig.mac)) ? { ok: true } : { ok: false, reason: "mismatch" };
  };
}
