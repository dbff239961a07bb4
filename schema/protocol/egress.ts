import { z } from "zod";

/**
 * A sandbox's egress rules as the agent enforces them (from the E2B create's `network`).
 * Entries are IPs, CIDRs or domain names; `0.0.0.0/0` (E2B's ALL_TRAFFIC) matches everything.
 * As in E2B, an `allowOut` match wins over a `denyOut` match.
 */
export const EgressPolicySchema = z.object({
  allowOut: z.array(z.string().min(1)).max(100).default([]),
  denyOut: z.array(z.string().min(1)).max(100).default([]),
});
export type EgressPolicy = z.infer<typeof EgressPolicySchema>;

/** The rules an E2B `network` config asks for; null when it restricts nothing. */
export function egressOf(network: { allowOut?: string[]; denyOut?: string[] } | null | undefined): EgressPolicy | null {
  const allowOut = network?.allowOut ?? [];
  const denyOut = network?.denyOut ?? [];
  return allowOut.length || denyOut.length ? { allowOut, denyOut } : null;
}
