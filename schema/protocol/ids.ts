import { z } from "zod";

/** Sandbox ids are `[a-z0-9]+` (E2B's alphabet); the edge mints 20 characters. E2B's proxy parses
 * hosts as `{port}-{id}.{domain}`, so an id never holds `-` or `.`. */
export const SANDBOX_ID_PATTERN = /^[a-z0-9]{1,64}$/;

export const SandboxIdSchema = z
  .string()
  .regex(SANDBOX_ID_PATTERN, "sandbox ids are 1-64 characters of [a-z0-9]")
  .brand<"SandboxId">();
export type SandboxId = z.infer<typeof SandboxIdSchema>;

const ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789";

/** Mints a fresh 20-character sandbox id (about 103 bits of randomness). */
export function newSandboxId(): SandboxId {
  let id = "";
  while (id.length < 20) {
    // Bytes ≥ 252 (= 7 × 36) would bias the alphabet, so they are skipped.
    for (const b of crypto.getRandomValues(new Uint8Array(24))) {
      if (b < 252 && id.length < 20) id += ALPHABET[b % 36];
    }
  }
  return id as SandboxId;
}

/** Snapshot ids name a directory on the agent: the edge mints 20 characters of [a-z0-9]. */
export const SNAPSHOT_ID_PATTERN = /^[a-z0-9]{1,64}$/;
export const SnapshotIdSchema = z.string().regex(SNAPSHOT_ID_PATTERN, "snapshot ids are 1-64 characters of [a-z0-9]");
