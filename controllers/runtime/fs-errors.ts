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

/** EOVERFLOW on a create: the file system belongs to a user namespace that does not map the
 * runtime's uid (on the local driver, one mounted inside the sandbox's: bwrap's /dev, a mount the
 * sandbox's root made), so the kernel refuses it any create (fs/namei.c may_create). Not the
 * client's mistake, but nothing the runtime can do there either: a clear refusal instead of an
 * internal error. Only for creates: elsewhere EOVERFLOW means what it says (a value too large),
 * and the Kubernetes runtime, which shares this file, has no such mounts to explain. */
export function createRefused(err: unknown): boolean {
  return (err as NodeJS.ErrnoException).code === "EOVERFLOW";
}

export function createRefusedMessage(action: string, sandboxPath: string): string {
  return `cannot ${action} '${sandboxPath}': the file system there was mounted in a user namespace where the files API cannot create; create it with a command`;
}

/** `creating`: the action makes a name (a directory, a move's target), so EOVERFLOW is createRefused. */
export function fsError(err: unknown, sandboxPath: string, action = "access", creating = false): ConnectError {
  if (err instanceof ConnectError) return err;
  if (err instanceof PathOutsideSandboxError) return new ConnectError(err.message, Code.PermissionDenied);
  if (err instanceof SandboxGoneError) return new ConnectError(err.message, Code.Unavailable);
  if (err instanceof PermissionDeniedError) return new ConnectError(`cannot ${action} '${sandboxPath}': permission denied`, Code.PermissionDenied);
  const code = (err as NodeJS.ErrnoException).code ?? "";
  if (code === "ENOENT") return new ConnectError(`path '${sandboxPath}' does not exist`, Code.NotFound);
  if (creating && createRefused(err)) return new ConnectError(createRefusedMessage(action, sandboxPath), Code.PermissionDenied);
  const reason = (err as Error).message?.replace(/^\w+: /, "").replace(/, \w+ '.*'$/, "") ?? String(err);
  return new ConnectError(`cannot ${action} '${sandboxPath}': ${reason}`, CODES[code] ?? Code.Internal);
}
