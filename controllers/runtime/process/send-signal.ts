import { Code, ConnectError, type HandlerContext } from "@connectrpc/connect";
import { Signal, type SendSignalRequest } from "../../../schema/envd/gen/process/process_pb.js";
import { sandboxOf } from "../request-context.ts";

export function sendSignal(req: SendSignalRequest, ctx: HandlerContext) {
  const handle = sandboxOf(ctx).processes.get(req.process?.selector, { live: true });
  if (req.signal === Signal.SIGKILL) handle.signal("SIGKILL");
  else if (req.signal === Signal.SIGTERM) handle.signal("SIGTERM");
  else throw new ConnectError(`invalid signal: ${req.signal}`, Code.Unimplemented);
  return {};
}
