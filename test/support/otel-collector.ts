// A real OpenTelemetry Collector for the tracing tests: built from Go modules by
// tools/otelcol/build.sh (OTLP receiver + file exporter; cached outside the clone), listening for
// OTLP/HTTP on a free loopback port and writing what it receives as OTLP JSON lines to a file.
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
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

export async function startCollector(dir: string): Promise<Collector> {
  const bin = collectorBinary();
  const port = await freePort();
  const out = join(dir, "traces.jsonl");
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
    spans: () => (existsSync(out) ? readFileSync(out, "utf8").split("\n").filter(Boolean).flatMap(parseLine) : []),
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
