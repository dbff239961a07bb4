import { Code, ConnectError, type HandlerContext } from "@connectrpc/connect";
import type { CloseStdinRequest } from "../../../schema/envd/gen/process/process_pb.js";
import { sandboxOf } from "../request-context.ts";
import { selectProcess } from "./select.ts";

export function closeStdin(req: CloseStdinRequest, ctx: HandlerContext) {
  const handle = selectProcess(sandboxOf(ctx).processes, req.process?.selector, { live: true });
  try {
    handle.closeStdin();
  } catch (err) {
    throw new ConnectError((err as Error).message, Code.FailedPrecondition);
  }
  return {};
}
