import type { HandlerContext } from "@connectrpc/connect";
import { sandboxOf } from "../request-context.ts";

export function list(_req: unknown, ctx: HandlerContext) {
  const processes = sandboxOf(ctx).processes.live().map((p) => ({ pid: p.pid, tag: p.tag, config: p.config }));
  return { processes };
}
