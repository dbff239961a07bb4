// A real OpenTelemetry Collector for the tracing tests: built from Go modules by
// tools/otelcol/build.sh (OTLP receiver + file exporter; cached outside the clone), listening for
// OTLP/HTTP on a free loopback port and writing what it receives to a file: OTLP JSON lines, or
// with `format: "proto"` (the benches: see `CollectorFormat`) OTLP protobuf messages, each after
// its length (4 bytes, big-endian), as the file exporter frames them.
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { protoFields } from "../../lib/tracing/otlp-proto.ts";
import { freePort } from "../../scripts/lib/sqld.ts";

const ROOT = resolve(import.meta.dirname, "../..");

export interface ReceivedSpan {
  traceId: string;
  spanId: string;
  parentSpanId: string;
  name: string;
  service: string;
  scope: string;
  attributes: Record<string, unknown>;
  /** Start and end, in ms since the epoch (the collector writes them in ns). */
  startMs: number;
  endMs: number;
}

export interface Collector {
  /** OTLP/HTTP base URL (spans go to /v1/traces). */
  endpoint: string;
  /** The collector process (its CPU is part of what tracing costs: bench/edge-ab.ts). */
  pid: number;
  spans(): ReceivedSpan[];
  stop(): Promise<void>;
}

/** The collector's binary (built on first use: minutes, then cached). */
export function collectorBinary(): string {
  return execFileSync("bash", [join(ROOT, "tools/otelcol/build.sh")], { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] }).trim();
}

/**
 * How the file exporter writes what it received. "json" (the tests' default: a file one can read)
 * turns every span back into OTLP JSON, which is most of the collector's CPU per span and nothing
 * a deployment does: there the collector forwards spans to a backend as OTLP protobuf. "proto"
 * writes them as protobuf, the encoding a deployment's exporter spends (the benches: notes s22-trace).
 */
export type CollectorFormat = "json" | "proto";

export async function startCollector(dir: string, { format = "json" }: { format?: CollectorFormat } = {}): Promise<Collector> {
  const bin = collectorBinary();
  const port = await freePort();
  const out = join(dir, format === "proto" ? "traces.pb" : "traces.jsonl");
  const config = join(dir, "otelcol.yaml");
  writeFileSync(
    config,
    [
      "receivers:",
      "  otlp:",
      "    protocols:",
      "      http:",
      `        endpoint: 127.0.0.1:${port}`,
      "exporters:",
      "  file:",
      `    path: ${out}`,
      "    flush_interval: 100ms",
      `    format: ${format}`,
      "service:",
      "  telemetry:",
      "    metrics:",
      "      level: none",
      "  pipelines:",
      "    traces:",
      "      receivers: [otlp]",
      "      exporters: [file]",
      "",
    ].join("\n"),
  );
  const child: ChildProcess = spawn(bin, ["--config", config], { stdio: ["ignore", "ignore", "pipe"] });
  let stderr = "";
  child.stderr!.on("data", (b) => (stderr = (stderr + String(b)).slice(-4000)));
  const endpoint = `http://127.0.0.1:${port}`;
  for (let i = 0; ; i++) {
    if (child.exitCode !== null) throw new Error(`otelcol exited: ${stderr}`);
    const up = await fetch(`${endpoint}/v1/traces`, { method: "POST", headers: { "content-type": "application/json" }, body: "{}" }).then((r) => r.ok, () => false);
    if (up) break;
    if (i > 100) throw new Error(`otelcol did not listen on ${endpoint}: ${stderr}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    endpoint,
    pid: child.pid!,
    spans: () => (!existsSync(out) ? [] : format === "proto" ? readProtoFile(readFileSync(out)) : readFileSync(out, "utf8").split("\n").filter(Boolean).flatMap(parseLine)),
    async stop() {
      const exited = new Promise((r) => child.once("exit", r));
      child.kill("SIGTERM");
      await exited;
    },
  };
}

interface OtlpValue {
  stringValue?: string;
  intValue?: string | number;
  boolValue?: boolean;
}
interface OtlpAttr {
  key: string;
  value: OtlpValue;
}

function attrs(list: OtlpAttr[] | undefined): Record<string, unknown> {
  return Object.fromEntries((list ?? []).map((a) => [a.key, a.value.stringValue ?? a.value.intValue ?? a.value.boolValue]));
}

function parseLine(line: string): ReceivedSpan[] {
  const req = JSON.parse(line) as { resourceSpans?: { resource?: { attributes?: OtlpAttr[] }; scopeSpans?: { scope?: { name?: string }; spans?: { traceId: string; spanId: string; parentSpanId?: string; name: string; attributes?: OtlpAttr[]; startTimeUnixNano?: string; endTimeUnixNano?: string }[] }[] }[] };
  const out: ReceivedSpan[] = [];
  for (const rs of req.resourceSpans ?? []) {
    const service = String(attrs(rs.resource?.attributes)["service.name"] ?? "");
    for (const ss of rs.scopeSpans ?? []) {
      for (const s of ss.spans ?? []) out.push({ traceId: s.traceId, spanId: s.spanId, parentSpanId: s.parentSpanId ?? "", name: s.name, service, scope: ss.scope?.name ?? "", attributes: attrs(s.attributes), startMs: nanosToMs(s.startTimeUnixNano), endMs: nanosToMs(s.endTimeUnixNano) });
    }
  }
  return out;
}

function nanosToMs(ns: string | undefined): number {
  return ns ? Number(BigInt(ns) / 1_000_000n) : 0;
}

/** The file exporter's protobuf file: TracesData messages, each after its length; a message the exporter has not flushed whole yet is left for the next read. */
function readProtoFile(file: Uint8Array): ReceivedSpan[] {
  const out: ReceivedSpan[] = [];
  const view = new DataView(file.buffer, file.byteOffset, file.byteLength);
  for (let pos = 0; pos + 4 <= file.length; ) {
    const n = view.getUint32(pos);
    if (pos + 4 + n > file.length) break;
    out.push(...readTracesData(file.subarray(pos + 4, pos + 4 + n)));
    pos += 4 + n;
  }
  return out;
}

/** Only the length-delimited fields of a message, by number (repeated ones in order). */
function messages(data: Uint8Array, field: number): Uint8Array[] {
  const out: Uint8Array[] = [];
  for (const [f, wire, value] of protoFields(data)) if (f === field && wire === 2) out.push(value as Uint8Array);
  return out;
}

const text = (b: Uint8Array | undefined) => (b ? new TextDecoder().decode(b) : "");
const hexOf = (b: Uint8Array | undefined) => (b ? Buffer.from(b).toString("hex") : "");

/** TracesData { resource_spans (1): { resource (1): { attributes (1) }, scope_spans (2): { scope (1): { name (1) }, spans (2) } } }, read as the JSON lines are. */
function readTracesData(data: Uint8Array): ReceivedSpan[] {
  const out: ReceivedSpan[] = [];
  for (const rs of messages(data, 1)) {
    const resource = messages(rs, 1)[0];
    const service = String(resource ? (protoAttrs(resource, 1)["service.name"] ?? "") : "");
    for (const ss of messages(rs, 2)) {
      const scope = messages(ss, 1)[0];
      const scopeName = scope ? text(messages(scope, 1)[0]) : "";
      for (const span of messages(ss, 2)) {
        const f: Record<number, Uint8Array> = {};
        for (const [n, wire, value] of protoFields(span)) if (wire !== 0 && n !== 9) f[n] = value as Uint8Array;
        out.push({ traceId: hexOf(f[1]), spanId: hexOf(f[2]), parentSpanId: hexOf(f[4]), name: text(f[5]), service, scope: scopeName, attributes: protoAttrs(span, 9), startMs: fixed64Ms(f[7]), endMs: fixed64Ms(f[8]) });
      }
    }
  }
  return out;
}

/** KeyValue attributes in field `field`: strings, booleans and integers as the JSON lines give them (an int64 as its decimal string). */
function protoAttrs(data: Uint8Array, field: number): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const kv of messages(data, field)) {
    const key = text(messages(kv, 1)[0]);
    const any = messages(kv, 2)[0];
    let value: unknown;
    for (const [n, , v] of any ? protoFields(any) : []) {
      if (n === 1) value = text(v as Uint8Array);
      else if (n === 2) value = v === 1;
      else if (n === 3) value = String(v);
    }
    out[key] = value;
  }
  return out;
}

function fixed64Ms(b: Uint8Array | undefined): number {
  if (!b) return 0;
  const v = new DataView(b.buffer, b.byteOffset, 8);
  return Number((v.getBigUint64(0, true) / 1_000_000n));
}
