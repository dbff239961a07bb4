import { Code, ConnectError, type HandlerContext } from "@connectrpc/connect";
import { Signal, type SendSignalRequest } from "../../../schema/envd/gen/process/process_pb.js";
import { sandboxOf } from "../request-context.ts";
import { selectProcess } from "./select.ts";

/** How long a SIGKILL answer waits for the process to be gone (reaped), so that `kill -0 <pid>`
 * right after `kill` fails as it does on E2B; a process stuck in the kernel answers anyway. */
const REAP_WAIT_MS = 2_000;

export async function sendSignal(req: SendSignalRequest, ctx: HandlerContext) {
  const handle = selectProcess(sandboxOf(ctx).processes, req.process?.selector, { live: true });
  if (req.signal === Signal.SIGKILL) {
    handle.signal("SIGKILL");
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([handle.exited(), new Promise((r) => (timer = setTimeout(r, REAP_WAIT_MS)))]);
    clearTimeout(timer);
  } else if (req.signal === Signal.SIGTERM) handle.signal("SIGTERM");
  else throw new ConnectError(`invalid signal: ${req.signal}`, Code.Unimplemented);
  return {};
}
