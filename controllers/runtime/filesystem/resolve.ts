// Request path → (sandbox path, host path) for the acting user: `~` and relative paths resolve
// under the user's home, as envd's ExpandAndResolve.
import type { HandlerContext } from "@connectrpc/connect";
import { sandboxOf, userOf } from "../request-context.ts";
import type { RuntimeSandbox } from "../sandbox.ts";
import type { SandboxUser } from "../sandbox-view.ts";
import { fsError } from "../fs-errors.ts";
import { checkAccess, type Want } from "../user-access.ts";

export interface Resolved {
  sbx: RuntimeSandbox;
  user: SandboxUser;
  path: string;
  host: string;
}

/** `want` is checked against the acting user's rights (user-access.ts). */
export function resolveRequestPath(ctx: HandlerContext, path: string, opts: { followFinal?: boolean; want?: Want } = {}): Resolved {
  const sbx = sandboxOf(ctx);
  const user = userOf(ctx, sbx);
  const p = sbx.resolvePath(path, user);
  try {
    const host = sbx.view.toHost(p, opts);
    checkAccess(sbx.view, user, host, opts.want ?? "reach");
    return { sbx, user, path: p, host };
  } catch (err) {
    throw fsError(err, p);
  }
}
