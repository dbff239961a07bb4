// The v1 file URL signature, as the SDK's getSignature and envd's generateSignature compute it:
// "v1_" + base64(sha256("<path>:<read|write>:<username>:<token>[:<expiration>]")), unpadded.
// node:crypto is loaded at first use, not at start-up (~6 ms of CPU before /health answers).
const crypto = () => process.getBuiltinModule("node:crypto");

export type FileOperation = "read" | "write";

export function fileSignature(path: string, op: FileOperation, username: string, token: string, expiration?: number): string {
  const raw = expiration === undefined ? `${path}:${op}:${username}:${token}` : `${path}:${op}:${username}:${token}:${expiration}`;
  return `v1_${crypto().createHash("sha256").update(raw).digest("base64").replace(/=+$/, "")}`;
}

/** Whether `signature` was made with `token` for this path, operation, user and expiration. */
export function signatureMatches(token: string, signature: string, path: string, op: FileOperation, username: string | null, expiration: number | undefined): boolean {
  const expected = Buffer.from(fileSignature(path, op, username ?? "", token, expiration));
  const given = Buffer.from(signature);
  return given.length === expected.length && crypto().timingSafeEqual(given, expected);
}

/** Returns an error message, or undefined when access is allowed. Mirrors envd's validateSigning:
 * no token means open; a token header must match; otherwise the signature must match and, when
 * it carries an expiration, not be past it. */
export function checkFileAccess(opts: {
  token: string | undefined;
  headerToken: string | undefined;
  checkHeaderToken: (t: string) => boolean;
  path: string;
  op: FileOperation;
  username: string | null;
  signature: string | null;
  expiration: string | null;
  nowS?: number;
}): string | undefined {
  if (!opts.token) return undefined;
  if (opts.headerToken) return opts.checkHeaderToken(opts.headerToken) ? undefined : "access token present in header but does not match";
  if (!opts.signature) return "missing signature query parameter";
  let exp: number | undefined;
  if (opts.expiration !== null) {
    exp = Number(opts.expiration);
    if (!Number.isInteger(exp)) return "invalid signature expiration";
  }
  if (!signatureMatches(opts.token, opts.signature, opts.path, opts.op, opts.username, exp)) return "invalid signature";
  if (exp !== undefined && exp < (opts.nowS ?? Math.floor(Date.now() / 1000))) return "signature is already expired";
  return undefined;
}
