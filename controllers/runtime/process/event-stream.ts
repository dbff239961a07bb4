// The event stream shared by Start and Connect: `start{pid}` first, then output as it arrives,
// keepalives while quiet, and `end` last.
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { ProcessEventSchema } from "../../../schema/envd/gen/process/process_pb.js";
import { withKeepalive } from "../event-stream.ts";
import type { RpcContext } from "../request-context.ts";
import type { ProcessHandle, ProcessOutput } from "./process-handle.ts";

type ProcessEvent = MessageInitShape<typeof ProcessEventSchema>;

export function toProcessEvent(ev: ProcessOutput): ProcessEvent {
  if (ev.type === "end") return { event: { case: "end", value: ev.end } };
  return { event: { case: "data", value: { output: { case: ev.stream, value: ev.data } } } };
}

export async function* processEvents(ctx: RpcContext, handle: ProcessHandle): AsyncGenerator<{ event: ProcessEvent }> {
  yield { event: { event: { case: "start", value: { pid: handle.pid } } } };
  const source = {
    subscribe: (push: (ev: ProcessOutput, end?: boolean) => void) => handle.subscribe((ev) => push(ev, ev.type === "end")),
    hold: () => handle.hold(),
    sizeOf: (ev: ProcessOutput) => (ev.type === "data" ? ev.data.length : 0),
  };
  for await (const ev of withKeepalive<ProcessOutput | "keepalive">(ctx, source, () => "keepalive")) {
    yield { event: ev === "keepalive" ? { event: { case: "keepalive", value: {} } } : toProcessEvent(ev) };
  }
}
