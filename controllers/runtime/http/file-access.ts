// What GET and POST /files share: the signature-or-token check, the user, and the path.
import type { IncomingMessage } from "node:http";
import type { RuntimeSandbox } from "../sandbox.ts";
import { pinPath, type PinnedPath } from "../pinned-path.ts";
import { SandboxGoneError, type PinOptions, type SandboxUser } from "../sandbox-view.ts";
import { checkAccess, PermissionDeniedError, type Want } from "../user-access.ts";
import { HttpError } from "./respond.ts";
import { checkFileAccess, type FileOperation } from "./signature.ts";

export interface FileTarget {
  user: SandboxUser;
  /** The raw `path` query value ('' when absent). */
  rawPath: string;
}

export function authorizeFiles(req: IncomingMessage, sbx: RuntimeSandbox, url: URL, op: FileOperation): FileTarget {
  const q = url.searchParams;
  const rawPath = q.get("path") ?? "";
  const username = q.get("username");
  const header = req.headers["x-access-token"];
  const denied = checkFileAccess({
    token: sbx.accessToken,
    headerToken: Array.isArray(header) ? header[0] : header,
    checkHeaderToken: (t) => sbx.checkToken(t),
    path: rawPath,
    op,
    username,
    signature: q.get("signature"),
    expiration: q.get("signature_expiration"),
  });
  if (denied) throw new HttpError(401, denied);
  const name = username || sbx.defaultUser;
  const user = sbx.view.lookupUser(name);
  if (!user) throw new HttpError(401, `error looking up user '${name}': user: unknown user ${name}`);
  return { user, rawPath };
}

/** The user's path, pinned (pinned-path.ts; the caller closes it), after checking `want` against
 * the user's rights. */
export function hostPathFor(sbx: RuntimeSandbox, user: SandboxUser, rawPath: string, want: Want, opts: PinOptions = {}): { path: string; pinned: PinnedPath } {
  const path = sbx.resolvePath(rawPath, user);
  let pinned: PinnedPath;
  try {
    pinned = pinPath(sbx.view, path, opts);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    // A file where a directory should be: nothing to read there, nowhere to write (envd's answers).
    if (code === "ENOENT" || (code === "ENOTDIR" && !opts.create)) throw new HttpError(404, `path '${path}' does not exist`);
    if (code === "ELOOP" || code === "ENOTDIR") throw new HttpError(400, `path '${path}' is not a valid file path`);
    // The router answers it as a dead sandbox (502), not as a path the user may not reach.
    if (err instanceof SandboxGoneError) throw err;
    throw new HttpError(403, (err as Error).message);
  }
  try {
    checkAccess(sbx.view, user, pinned.sandboxPath, want);
  } catch (err) {
    pinned.close();
    if (!(err instanceof PermissionDeniedError)) throw err;
    throw new HttpError(403, `error opening file '${path}': permission denied`);
  }
  return { path, pinned };
}
