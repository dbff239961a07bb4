// A pod runtime's spans kept for its agent to collect (RUNTIME_TRACING=agent, set by the kubernetes
// driver with the agent's --pod-runtime-tracing). Each request is a server span, the child of the
// traceparent the agent's ingress handed on, as with a collector of its own (pod-tracing.ts); but
// nothing leaves the pod on the runtime's initiative: the agent GETs RUNTIME_SPANS_PATH with the
// sandbox's access token over the connection it opens to the pod (as its ingress does), so a
// governed pod needs no exemption from its traffic-proxy, the collector's address is never given to
// the pod, and the agent checks what it is handed (controllers/agent/pod-spans.ts). At most
// MAX_RUNTIME_SPANS wait between two pulls; more are counted as dropped. No OpenTelemetry module
// is loaded (the recorder needs none: see lib/tracing/span-recorder.ts).
import type { IncomingMessage, ServerResponse } from "node:http";
import { SpanKind, type AttributeValue } from "@opentelemetry/api";
import type { Resource } from "@opentelemetry/resources";
import type { ReadableSpan } from "@opentelemetry/sdk-trace";
import { MAX_RUNTIME_SPAN_ATTRIBUTES, MAX_RUNTIME_SPANS, RUNTIME_SPANS_PATH } from "../../schema/protocol/runtime-spans-limits.ts";
import type { RuntimeSpan, RuntimeSpans } from "../../schema/protocol/runtime-spans.ts";
import { EdgeSpan, parseTraceparent, traceparentOf, type SpanSink } from "../../lib/tracing/span-recorder.ts";
import { endWithResponse } from "../lib/http-span.ts";

export interface AgentSpans {
  /** The runtime's `traceRequest` hook (runtime.ts). */
  traceRequest(name: string, req: IncomingMessage, res: ServerResponse, attributes: Record<string, string>): void;
  /** What waits, handed over once (the answer to RUNTIME_SPANS_PATH). */
  take(): RuntimeSpans;
}

export { RUNTIME_SPANS_PATH };

function toMs([s, ns]: [number, number]): number {
  return s * 1000 + Math.round(ns / 1e6);
}

export function agentSpans(): AgentSpans {
  let spans: RuntimeSpan[] = [];
  let dropped = 0;
  const sink: SpanSink = {
    // Never exported from here: the agent names the resource (the sandbox) when it forwards.
    resource: { attributes: {} } as unknown as Resource,
    scope: { name: "agent-runtime" },
    onEnd(span: ReadableSpan) {
      const parent = span.parentSpanContext;
      // Only a child of a handed traceparent can be forwarded (the agent's rule): a root span
      // (a request the ingress did not trace) is not kept.
      if (!parent) return;
      if (spans.length >= MAX_RUNTIME_SPANS) return void dropped++;
      const attributes: Record<string, string | number | boolean> = {};
      let n = 0;
      for (const [k, v] of Object.entries(span.attributes)) {
        if (n++ >= MAX_RUNTIME_SPAN_ATTRIBUTES) break;
        if (typeof v === "string" || typeof v === "number" || typeof v === "boolean") attributes[k] = typeof v === "string" ? v.slice(0, 256) : (v as AttributeValue as number | boolean);
      }
      const ctx = span.spanContext();
      spans.push({ traceId: ctx.traceId, spanId: ctx.spanId, parentSpanId: parent.spanId, name: span.name.slice(0, 128), startMs: toMs(span.startTime), endMs: toMs(span.endTime), status: span.status.code, attributes });
    },
  };
  return {
    take() {
      const out = { spans, dropped };
      spans = [];
      dropped = 0;
      return out;
    },
    traceRequest(name, req, res, attributes) {
      const given = req.headers.traceparent;
      const span = new EdgeSpan(sink, name, SpanKind.SERVER, attributes, typeof given === "string" ? parseTraceparent(given) : undefined);
      if (span.isRecording()) req.headers.traceparent = traceparentOf(span.spanContext());
      endWithResponse(span, res);
    },
  };
}
