import type { HandlerContext } from "@connectrpc/connect";
import type { ConnectRequest } from "../../../schema/envd/gen/process/process_pb.js";
import { sandboxOf } from "../request-context.ts";
import { processEvents } from "./event-stream.ts";
import { selectProcess } from "./select.ts";

/** Re-attaches to a process: `start`, then live output (no replay), or the retained `end`. */
export async function* connect(req: ConnectRequest, ctx: HandlerContext) {
  const handle = selectProcess(sandboxOf(ctx).processes, req.process?.selector);
  yield* processEvents(ctx, handle);
}
