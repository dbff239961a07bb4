// A pod runtime's spans. In a pod (the kubernetes driver's sidecar) the runtime is its own process,
// out of reach of the agent's tracer: with OTEL_EXPORTER_OTLP_ENDPOINT on its container (the driver
// sets it from the agent's --otlp-endpoint) each request is a server span, a child of the
// traceparent the agent's ingress hands on (so it joins the request's trace), exported to that
// collector about once a second. The spans are the edge's own recorder's (lib/tracing/
// span-recorder.ts: the API's Span, the exporter's ReadableSpan, no SDK), sent by the OTLP/HTTP
// exporter; cli.ts loads this module only when the endpoint is set.
import type { IncomingMessage, ServerResponse } from "node:http";
import { SpanKind } from "@opentelemetry/api";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-http";
import { resourceFromAttributes } from "@opentelemetry/resources";
import type { ReadableSpan } from "@opentelemetry/sdk-trace";
import { EdgeSpan, parseTraceparent, traceparentOf, type SpanSink } from "../../lib/tracing/span-recorder.ts";
import { endWithResponse } from "../lib/http-span.ts";

/** The scope of the runtime's spans, as the agent's embedded runtime names its own (RUNTIME_SCOPE). */
const SCOPE = "agent-runtime";
const FLUSH_MS = 1_000;
/** Past this many waiting spans (a collector that does not answer) new ones are dropped. */
const MAX_BUFFERED = 4096;

export interface PodTracing {
  /** The runtime's `traceRequest` hook (runtime.ts). */
  traceRequest(name: string, req: IncomingMessage, res: ServerResponse, attributes: Record<string, string>): void;
  /** Exports what is buffered (before the process exits). */
  flush(): Promise<void>;
}

/** `endpoint`: the collector's OTLP/HTTP base URL (spans go to /v1/traces). */
export function podTracing(endpoint: string, serviceName = "agent-runtime"): PodTracing {
  const exporter = new OTLPTraceExporter({ url: `${endpoint.replace(/\/$/, "")}/v1/traces` });
  let spans: ReadableSpan[] = [];
  const sink: SpanSink = {
    resource: resourceFromAttributes({ "service.name": serviceName }),
    scope: { name: SCOPE },
    onEnd: (span) => void (spans.length < MAX_BUFFERED && spans.push(span)),
  };
  const flush = async () => {
    if (!spans.length) return;
    const batch = spans;
    spans = [];
    await new Promise<void>((done) => exporter.export(batch, () => done()));
  };
  // Not holding the process open: SIGTERM's handler flushes before the exit.
  setInterval(() => void flush(), FLUSH_MS).unref();
  return {
    flush,
    traceRequest(name, req, res, attributes) {
      const given = req.headers.traceparent;
      const span = new EdgeSpan(sink, name, SpanKind.SERVER, attributes, typeof given === "string" ? parseTraceparent(given) : undefined);
      // The request's traceparent becomes this span's, so what it is handed to is its child.
      if (span.isRecording()) req.headers.traceparent = traceparentOf(span.spanContext());
      endWithResponse(span, res);
    },
  };
}
