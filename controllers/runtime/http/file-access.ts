// What GET and POST /files share: the signature-or-token check, the user, and the path.
import type { IncomingMessage } from "node:http";
import type { RuntimeSandbox } from "../sandbox.ts";
import type { SandboxUser } from "../sandbox-view.ts";
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

/** The user's path on the host, after checking `want` against the user's rights. */
export function hostPathFor(sbx: RuntimeSandbox, user: SandboxUser, rawPath: string, want: Want): { path: string; host: string } {
  const path = sbx.resolvePath(rawPath, user);
  let host: string;
  try {
    host = sbx.view.toHost(path);
  } catch (err) {
    throw new HttpError(403, (err as Error).message);
  }
  try {
    checkAccess(sbx.view, user, host, want);
  } catch (err) {
    if (!(err instanceof PermissionDeniedError)) throw err;
    throw new HttpError(403, `error opening file '${path}': permission denied`);
  }
  return { path, host };
}
