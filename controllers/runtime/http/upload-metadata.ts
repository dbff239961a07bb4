// X-Metadata-<key> headers → the file's metadata map, with envd's limits: printable US-ASCII,
// keys ≤ 246 bytes, ≤ 4096 bytes in all (keys counted with the "user.e2b." prefix).
import type { IncomingHttpHeaders } from "node:http";

const PREFIX = "x-metadata-";
const XATTR_PREFIX_LEN = "user.e2b.".length;
const PRINTABLE = /^[\x20-\x7e]*$/;

export function parseMetadataHeaders(headers: IncomingHttpHeaders): { metadata: Record<string, string> } | { error: string } {
  const metadata: Record<string, string> = {};
  let total = 0;
  for (const [name, raw] of Object.entries(headers)) {
    if (!name.startsWith(PREFIX)) continue;
    const key = name.slice(PREFIX.length).toLowerCase();
    // Node joins repeated headers with ", "; envd keeps only the first value.
    const value = Array.isArray(raw) ? (raw[0] ?? "") : (raw ?? "");
    if (!key || !PRINTABLE.test(key)) return { error: `invalid metadata key '${key}'` };
    if (!PRINTABLE.test(value)) return { error: `invalid metadata value for key '${key}': must be printable US-ASCII` };
    if (key.length > 255 - XATTR_PREFIX_LEN) return { error: `metadata key '${key}' is longer than ${255 - XATTR_PREFIX_LEN} bytes` };
    total += XATTR_PREFIX_LEN + key.length + value.length;
    metadata[key] = value;
  }
  if (total > 4096) return { error: "metadata exceeds 4096 bytes" };
  return { metadata };
}
