// envd's Connect services (process, filesystem) as one request handler. Loaded on first use by
// runtime.ts: their protobuf descriptors take tens of milliseconds to build, and a pod's runtime
// must answer /health (its readiness) before that; `listen` starts the load right after.
import { createContextValues } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import type { IncomingMessage, ServerResponse } from "node:http";
import { filesystemService } from "./filesystem/service.ts";
import { processService } from "./process/service.ts";
import { sandboxKey } from "./request-context.ts";
import type { RuntimeSandbox } from "./sandbox.ts";

export function rpcHandler(sandboxOf: (req: IncomingMessage) => RuntimeSandbox | undefined): (req: IncomingMessage, res: ServerResponse) => void {
  return connectNodeAdapter({
    routes: (router) => {
      processService(router);
      filesystemService(router);
    },
    contextValues: (req) => createContextValues().set(sandboxKey, sandboxOf(req as IncomingMessage)),
    jsonOptions: { ignoreUnknownFields: true },
  });
}
