// A cluster's agent token and the ingress key derived from it (schema/protocol/cluster-token.ts):
// what the edge computes is what the operator's CLI prints, and a signature the edge makes for one
// cluster's sandbox is refused by another cluster's ingress.
import { createHmac } from "node:crypto";
import { describe, expect, it } from "vitest";
import { ingressVerifier } from "../../../controllers/agent/ingress-verify.ts";
import { ingressKey, signIngress } from "../../../schema/ingress/signature.ts";
import { CLUSTER_ID, clusterTokenFor } from "../../../schema/protocol/cluster-token.ts";

const target = { sandboxId: "abc123", port: 49983, method: "GET", pathAndQuery: "/health" };

describe("cluster tokens", () => {
  it("are HMAC-SHA256(root, \"cluster:\" + id) in hex: one per cluster, never the root", async () => {
    const a = await clusterTokenFor("root-secret", "a");
    expect(a).toBe(createHmac("sha256", "root-secret").update("cluster:a").digest("hex"));
    expect(await clusterTokenFor("root-secret", "b")).not.toBe(a);
    expect(await clusterTokenFor("other-root", "a")).not.toBe(a);
    expect(a).not.toContain("root-secret");
  });

  it("key each cluster's ingress: cluster a's ingress refuses what the edge signed for cluster b", async () => {
    const [a, b] = [await clusterTokenFor("root-secret", "a"), await clusterTokenFor("root-secret", "b")];
    const now = Date.now();
    const forB = await signIngress(await ingressKey(b), target, now);
    expect(ingressVerifier(b)(forB, target, now)).toEqual({ ok: true });
    expect(ingressVerifier(a)(forB, target, now)).toEqual({ ok: false, reason: "mismatch" });
  });

  it("cluster ids are 1-63 of [a-z0-9-]", () => {
    for (const ok of ["local", "a", "eu-west-1", "x".repeat(63)]) expect(CLUSTER_ID.test(ok)).toBe(true);
    for (const bad of ["", "A", "a_b", "a/b", "x".repeat(64), "a\n"]) expect(CLUSTER_ID.test(bad)).toBe(false);
  });
});
