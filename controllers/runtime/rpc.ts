// envd's Connect services (process, filesystem) as one request handler. Loaded on first use by
// runtime.ts: their protobuf descriptors take tens of milliseconds to build, and a pod's runtime
// must answer /health (its readiness) before that; `listen` starts the load right after.
import { createContextValues } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import type { IncomingMessage, ServerResponse } from "node:http";
import { filesystemService } from "./filesystem/service.ts";
import { processService } from "./process/service.ts";
import { serveStart, servesStart } from "./process/start-stream.ts";
import { logger } from "../lib/log.ts";
import { MAX_TIMER_MS } from "./event-stream.ts";
import { sandboxKey } from "./request-context.ts";
import { RPC_OPTIONS } from "./rpc-options.ts";
import type { RuntimeSandbox } from "./sandbox.ts";

const LOG = logger("runtime");

/** `leanStart: false`: Start through Connect too (test/runtime/start-stream.test.ts compares the two). */
export function rpcHandler(sandboxOf: (req: IncomingMessage) => RuntimeSandbox | undefined, opts: { leanStart?: boolean } = {}): (req: IncomingMessage, res: ServerResponse) => void {
  const connect = connectNodeAdapter({
    routes: (router) => {
      processService(router);
      filesystemService(router);
    },
    contextValues: (req) => createContextValues().set(sandboxKey, sandboxOf(req as IncomingMessage)),
    ...RPC_OPTIONS,
  });
  return (req, res) => {
    holdDeadlineInTimerRange(req);
    // An SDK's command: its own lean transport (process/start-stream.ts), same wire.
    const sbx = sandboxOf(req);
    if (sbx && opts.leanStart !== false && servesStart(req, (req.url ?? "").split("?", 1)[0]!)) {
      // Detached from runtime.ts's serve() and its catch: a throw here must not be an unhandled
      // rejection, which ends the agent and every sandbox it serves.
      return void serveStart(req, res, sbx).catch((err: unknown) => {
        LOG.error("Start's stream failed", { sandboxId: sbx.id, error: String(err) });
        res.destroy();
      });
    }
    connect(req, res);
  };
}

/** Node fires a timer past 2^31-1 ms (~24.8 days) at once, and Connect's deadline and start.ts's
 * kill are timers: a Python `commands.run(timeout=30 days)` would have its command killed at
 * once (envd runs it). Such a deadline is held at the longest a timer waits, for both
 * transports; Connect's own format check still sees the header as sent otherwise. */
function holdDeadlineInTimerRange(req: IncomingMessage): void {
  const t = req.headers["connect-timeout-ms"];
  if (typeof t === "string" && /^\d{1,10}$/.test(t) && Number(t) > MAX_TIMER_MS) req.headers["connect-timeout-ms"] = String(MAX_TIMER_MS);
}
