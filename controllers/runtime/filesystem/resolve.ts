// Request path → (sandbox path, pinned host path) for the acting user: `~` and relative paths
// resolve under the user's home, as envd's ExpandAndResolve.
import type { HandlerContext } from "@connectrpc/connect";
import { sandboxOf, userOf } from "../request-context.ts";
import type { RuntimeSandbox } from "../sandbox.ts";
import type { PinOptions, SandboxUser } from "../sandbox-view.ts";
import { fsError } from "../fs-errors.ts";
import { pinPath, type PinnedPath } from "../pinned-path.ts";
import { checkAccess, type Want } from "../user-access.ts";

export interface Resolved {
  sbx: RuntimeSandbox;
  user: SandboxUser;
  /** The request's path as the sandbox names it (links not resolved). */
  path: string;
  /** Held open until the operation ends: pinned-path.ts. */
  pinned: PinnedPath;
}

/** `want` is checked against the acting user's rights (user-access.ts). The caller closes
 * `pinned` (withRequestPath does). */
export function resolveRequestPath(ctx: HandlerContext, path: string, opts: PinOptions & { want?: Want } = {}): Resolved {
  const sbx = sandboxOf(ctx);
  const user = userOf(ctx, sbx);
  const p = sbx.resolvePath(path, user);
  let pinned: PinnedPath | undefined;
  try {
    pinned = pinPath(sbx.view, p, opts);
    checkAccess(sbx.view, user, pinned.sandboxPath, opts.want ?? "reach");
    return { sbx, user, path: p, pinned };
  } catch (err) {
    pinned?.close();
    throw fsError(err, p);
  }
}

/** resolveRequestPath for the length of `op`. */
export async function withRequestPath<T>(ctx: HandlerContext, path: string, opts: PinOptions & { want?: Want }, op: (r: Resolved) => Promise<T>): Promise<T> {
  const r = resolveRequestPath(ctx, path, opts);
  try {
    return await op(r);
  } finally {
    r.pinned.close();
  }
}
