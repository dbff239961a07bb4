// process.Process: wiring only, one file per RPC.
import type { ConnectRouter } from "@connectrpc/connect";
import { Process } from "../../../schema/envd/gen/process/process_pb.js";
import { closeStdin } from "./close-stdin.ts";
import { connect } from "./connect.ts";
import { list } from "./list.ts";
import { sendInput } from "./send-input.ts";
import { sendSignal } from "./send-signal.ts";
import { start } from "./start.ts";
import { streamInput } from "./stream-input.ts";
import { update } from "./update.ts";

export function processService(router: ConnectRouter): void {
  router.service(Process, { start, connect, list, sendInput, streamInput, sendSignal, update, closeStdin });
}
