// The syntax of envd's v1 file URL signature (`sandbox.downloadUrl()`/`uploadUrl()`: "v1_" and an
// unpadded base64 SHA-256, optionally `signature_expiration` in Unix seconds), checked without
// hashing. An unnamed signed request (no sandbox id) is matched against every sandbox's token
// (controllers/runtime/runtime.ts `bySignature`): the gateway and the runtime refuse one that
// cannot be any sandbox's before that pass, so junk costs O(1), not O(sandboxes).

const SIGNATURE = /^v1_[A-Za-z0-9+/]{43}$/;
/** Decimal seconds, at most 11 digits (the year 5138): the SDKs write `floor(now) + seconds`. */
const EXPIRATION = /^[0-9]{1,11}$/;

/**
 * Why `signature` and `expiration` (the query's values) cannot have been made by any token, or
 * undefined when they might. The messages are the runtime's own for the same refusals. A missing
 * expiration is not refused: the SDKs' signed URLs have none unless asked (`useSignatureExpiration`).
 */
export function fileSignatureRefusal(signature: string | null, expiration: string | null, nowS: number): string | undefined {
  if (signature === null || !SIGNATURE.test(signature)) return "invalid signature";
  if (expiration === null) return undefined;
  if (!EXPIRATION.test(expiration)) return "invalid signature expiration";
  if (Number(expiration) < nowS) return "signature is already expired";
  return undefined;
}
