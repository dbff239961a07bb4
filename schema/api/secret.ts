// E2B's secrets API shapes (openapi.yml `NewSecret`, `SecretUpdate`, `Secret`, `SecretMetadata`)
// and how a transform rule names a secret (`${e2b.secrets.<name>}`, the SDK's `Secret.fill`).
// A secret's value is write-only: no response shape has a field for it.
import { z } from "zod";
import { boundedRecord } from "./sandbox.ts";

/** A secret's id is `sec_` and 24 hex digits; names may not take that prefix. */
export const SECRET_ID_PREFIX = "sec_";
export const SECRET_ID_PATTERN = /^sec_[0-9a-f]{24}$/;
/** Bytes of one secret value (a token, a key file): enough for a PEM private key. */
export const MAX_SECRET_VALUE_BYTES = 16 * 1024;
export const MAX_SECRET_METADATA_ENTRIES = 32;
export const MAX_SECRET_METADATA_KEY_BYTES = 128;
export const MAX_SECRET_METADATA_VALUE_BYTES = 1024;
export const MAX_SECRET_METADATA_BYTES = 8192;
/** Secrets a team keeps (each up to 16 KiB sealed): a 429 past it. */
export const MAX_TEAM_SECRETS = 200;
/** Versions of a secret kept (only the current one is ever read): an update prunes older ones. */
export const SECRET_VERSIONS_KEPT = 5;

const utf8 = (s: string) => new TextEncoder().encode(s).length;

/** Stored lower-cased, as E2B's canonical form. */
export const SecretName = z
  .string()
  .min(1)
  .max(128)
  .regex(/^[a-zA-Z0-9_-]+$/, "name must be 1-128 characters of [a-zA-Z0-9_-]")
  .transform((s) => s.toLowerCase())
  .refine((s) => !s.startsWith(SECRET_ID_PREFIX), `name may not start with "${SECRET_ID_PREFIX}" (reserved for secret identifiers)`);

export const SecretValue = z
  .string()
  .min(1, "value must not be empty")
  .refine((s) => utf8(s) <= MAX_SECRET_VALUE_BYTES, `value is at most ${MAX_SECRET_VALUE_BYTES} bytes`);

export const SecretMetadata = boundedRecord(
  z.string().refine((k) => utf8(k) <= MAX_SECRET_METADATA_KEY_BYTES, `metadata keys are at most ${MAX_SECRET_METADATA_KEY_BYTES} bytes`),
  z.string().refine((v) => utf8(v) <= MAX_SECRET_METADATA_VALUE_BYTES, `metadata values are at most ${MAX_SECRET_METADATA_VALUE_BYTES} bytes`),
  MAX_SECRET_METADATA_ENTRIES,
  "metadata entries",
).refine(
  (m) => Object.entries(m).reduce((n, [k, v]) => n + utf8(k) + utf8(v), 0) <= MAX_SECRET_METADATA_BYTES,
  `metadata is at most ${MAX_SECRET_METADATA_BYTES} bytes in total`,
);

export const NewSecret = z.object({ name: SecretName, value: SecretValue, metadata: SecretMetadata.nullish() });
export const SecretUpdate = z.object({ value: SecretValue, metadata: SecretMetadata.nullish() });

export const ListSecretsQuery = z.object({
  limit: z.coerce.number().pipe(z.int().min(1).max(100)).default(100),
  nextToken: z.string().min(1).max(200).optional(),
});

/** What every read answers: metadata, never the value. */
export interface Secret {
  secretID: string;
  name: string;
  currentVersion: number;
  metadata: Record<string, string>;
  createdAt: string;
  updatedAt: string;
}

/** The placeholders a transform's header value names, e.g. `Bearer ${e2b.secrets.gh}` → ["gh"]. */
export function secretRefs(value: string): string[] {
  return [...value.matchAll(/\$\{e2b\.secrets\.([^{}]*)\}/g)].map((m) => m[1]!.toLowerCase());
}
