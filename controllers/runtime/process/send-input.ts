import { Code, ConnectError, type HandlerContext } from "@connectrpc/connect";
import type { ProcessInput, SendInputRequest } from "../../../schema/envd/gen/process/process_pb.js";
import { sandboxOf } from "../request-context.ts";
import type { ProcessHandle } from "./process-handle.ts";
import { selectProcess } from "./select.ts";

/** Writes stdin to a pipe process or bytes to a pty; crossing the two is a client mistake. */
export function writeInput(handle: ProcessHandle, input: ProcessInput | undefined): void {
  const which = input?.input;
  if (!which?.case) throw new ConnectError("input is required", Code.InvalidArgument);
  if (handle.end) throw new ConnectError(`process ${handle.pid} has exited`, Code.FailedPrecondition);
  try {
    if (which.case === "pty") {
      if (!handle.isPty) throw new Error("process has no pty, send stdin instead");
      handle.writePty(which.value);
    } else {
      if (handle.isPty) throw new Error("process uses a pty, send pty input instead");
      if (!handle.hasStdin) throw new Error("stdin is not enabled for this process");
      handle.writeStdin(which.value);
    }
  } catch (err) {
    throw new ConnectError((err as Error).message, Code.FailedPrecondition);
  }
}

export function sendInput(req: SendInputRequest, ctx: HandlerContext) {
  writeInput(selectProcess(sandboxOf(ctx).processes, req.process?.selector, { live: true }), req.input);
  return {};
}
