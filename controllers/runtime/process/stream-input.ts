import { Code, ConnectError, type HandlerContext } from "@connectrpc/connect";
import type { StreamInputRequest } from "../../../schema/envd/gen/process/process_pb.js";
import { sandboxOf } from "../request-context.ts";
import type { ProcessHandle } from "./process-handle.ts";
import { writeInput } from "./send-input.ts";
import { selectProcess } from "./select.ts";

/** Client-streamed input: a `start` naming the process, then data in order. */
export async function streamInput(reqs: AsyncIterable<StreamInputRequest>, ctx: HandlerContext) {
  const sbx = sandboxOf(ctx);
  let handle: ProcessHandle | undefined;
  for await (const req of reqs) {
    const ev = req.event;
    if (ev.case === "start") handle = selectProcess(sbx.processes, ev.value.process?.selector, { live: true });
    else if (ev.case === "data") {
      if (!handle) throw new ConnectError("the first message must be start", Code.InvalidArgument);
      writeInput(handle, ev.value.input);
    }
  }
  return {};
}
