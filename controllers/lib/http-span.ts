// The end of an HTTP hop's server span, for the agent's tracing (tracing.ts, the SDK's spans) and
// a pod runtime's (../runtime/pod-tracing.ts, the edge's recorder, no SDK): one place for both,
// without either loading the other's machinery.
import type { ServerResponse } from "node:http";
import { SpanStatusCode, type Span } from "@opentelemetry/api";

/** Ends `span` when the answer is done (a stream's end included), with its status code; a 5xx or
 * an answer cut before its end is an error. */
export function endWithResponse(span: Span, res: ServerResponse): void {
  res.once("close", () => {
    span.setAttribute("http.response.status_code", res.statusCode);
    if (res.statusCode >= 500 || !res.writableFinished) span.setStatus({ code: SpanStatusCode.ERROR, message: res.writableFinished ? `status ${res.statusCode}` : "cut before its end" });
    span.end();
  });
}
