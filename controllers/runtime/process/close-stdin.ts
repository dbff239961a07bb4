import { Code, ConnectError, type HandlerContext } from "@connectrpc/connect";
import type { CloseStdinRequest } from "../../../schema/envd/gen/process/process_pb.js";
import { sandboxOf } from "../request-context.ts";

export function closeStdin(req: CloseStdinRequest, ctx: HandlerContext) {
  const handle = sandboxOf(ctx).processes.get(req.process?.selector, { live: true });
  try {
    handle.closeStdin();
  } catch (err) {
    throw new ConnectError((err as Error).message, Code.FailedPrecondition);
  }
  return {};
}
