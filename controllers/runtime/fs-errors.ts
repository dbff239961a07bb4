// One place that turns a filesystem failure into the Connect code the SDK maps: a missing path is
// not_found (FileNotFoundError), a client mistake is never internal.
import { Code, ConnectError } from "@connectrpc/connect";
import { PathOutsideSandboxError, SandboxGoneError } from "./sandbox-view.ts";
import { PermissionDeniedError } from "./user-access.ts";

const CODES: Record<string, Code> = {
  ENOENT: Code.NotFound,
  ENOTDIR: Code.InvalidArgument,
  EISDIR: Code.InvalidArgument,
  EINVAL: Code.InvalidArgument,
  ENAMETOOLONG: Code.InvalidArgument,
  ELOOP: Code.InvalidArgument,
  ENOTEMPTY: Code.FailedPrecondition,
  EEXIST: Code.AlreadyExists,
  EACCES: Code.PermissionDenied,
  EPERM: Code.PermissionDenied,
  EROFS: Code.PermissionDenied,
  ENOSPC: Code.ResourceExhausted,
  EDQUOT: Code.ResourceExhausted,
};

export function fsError(err: unknown, sandboxPath: string, action = "access"): ConnectError {
  if (err instanceof ConnectError) return err;
  if (err instanceof PathOutsideSandboxError) return new ConnectError(err.message, Code.PermissionDenied);
  if (err instanceof SandboxGoneError) return new ConnectError(err.message, Code.Unavailable);
  if (err instanceof PermissionDeniedError) return new ConnectError(`cannot ${action} '${sandboxPath}': permission denied`, Code.PermissionDenied);
  const code = (err as NodeJS.ErrnoException).code ?? "";
  if (code === "ENOENT") return new ConnectError(`path '${sandboxPath}' does not exist`, Code.NotFound);
  const reason = (err as Error).message?.replace(/^\w+: /, "").replace(/, \w+ '.*'$/, "") ?? String(err);
  return new ConnectError(`cannot ${action} '${sandboxPath}': ${reason}`, CODES[code] ?? Code.Internal);
}
