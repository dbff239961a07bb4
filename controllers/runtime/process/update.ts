import { Code, ConnectError, type HandlerContext } from "@connectrpc/connect";
import type { UpdateRequest } from "../../../schema/envd/gen/process/process_pb.js";
import { sandboxOf } from "../request-context.ts";
import { selectProcess } from "./select.ts";

export function update(req: UpdateRequest, ctx: HandlerContext) {
  const handle = selectProcess(sandboxOf(ctx).processes, req.process?.selector, { live: true });
  const size = req.pty?.size;
  if (size) {
    if (!handle.isPty) throw new ConnectError(`process ${handle.pid} has no pty`, Code.FailedPrecondition);
    if (!size.cols || !size.rows) throw new ConnectError("pty size needs cols and rows", Code.InvalidArgument);
    handle.resize(size.cols, size.rows);
  }
  return {};
}
