// agent-runtime standalone (entry: main.ts): serves the host itself as one sandbox (a Kubernetes
// pod sidecar, or a machine you want to drive with the e2b SDK).
//   node controllers/runtime/main.ts [--port 49983] [--host 0.0.0.0] [--socket /path.sock]
//        [--user root] [--workdir DIR] [--access-token TOKEN] [--interpreter-port 49999]
// --interpreter-port: also serve E2B's code interpreter API on that port (a pod of a template with
// the interpreter's kernels; the agent's ingress sends a pod's 49999 to the pod like any port).
// Env: RUNTIME_ACCESS_TOKEN (same as --access-token; /init may set or rotate it later).
// OTEL_EXPORTER_OTLP_ENDPOINT: a collector's OTLP/HTTP base URL; each request is then a span of its
// caller's trace (pod-tracing.ts), exported by the runtime itself.
// RUNTIME_TRACING=agent: the same spans kept for the agent to collect (agent-spans.ts); the
// kubernetes driver sets it with the agent's --pod-runtime-tracing.
import { createServer } from "node:http";
import { parseArgs } from "node:util";
import { HostView } from "./host-view.ts";
import { closeInheritedFds } from "../lib/inherited-fds.ts";
import { createRuntime } from "./runtime.ts";
import { ENVD_VERSION } from "./version.ts";

/** Runs the standalone runtime with `args` (the command line after the script: main.ts, or the
 * startup snapshot's main function, snapshot.ts). */
export async function main(args: string[]): Promise<void> {
  // The commands it starts would inherit them (controllers/lib/inherited-fds.ts).
  closeInheritedFds();
  const { values } = parseArgs({
    args,
    options: {
      port: { type: "string", default: "49983" },
      host: { type: "string", default: "0.0.0.0" },
      socket: { type: "string" },
      user: { type: "string" },
      workdir: { type: "string" },
      "access-token": { type: "string" },
      // The pod's CSI node plugin (dynamic mounts, POST /v1/storage/mounts).
      "csi-socket": { type: "string" },
      "interpreter-port": { type: "string" },
    },
  });

  const port = Number(values.port);
  if (!values.socket && !(Number.isInteger(port) && port >= 0 && port < 65536)) {
    console.error(`invalid --port ${values.port}`);
    process.exit(2);
  }
  const interpreterPort = values["interpreter-port"] === undefined ? undefined : Number(values["interpreter-port"]);
  if (interpreterPort !== undefined && !(Number.isInteger(interpreterPort) && interpreterPort >= 0 && interpreterPort < 65536)) {
    console.error(`invalid --interpreter-port ${values["interpreter-port"]}`);
    process.exit(2);
  }
  const otlpEndpoint = process.env.OTEL_EXPORTER_OTLP_ENDPOINT;
  if (otlpEndpoint && !/^https?:\/\/[^\s]+$/.test(otlpEndpoint)) {
    console.error(`OTEL_EXPORTER_OTLP_ENDPOINT must be an http(s) URL, not ${JSON.stringify(otlpEndpoint)}`);
    process.exit(2);
  }
  // Loaded only when configured: off, the runtime starts without compiling the exporter.
  const tracing = otlpEndpoint ? (await import("./pod-tracing.ts")).podTracing(otlpEndpoint) : undefined;
  const forAgent = !tracing && process.env.RUNTIME_TRACING === "agent" ? (await import("./agent-spans.ts")) : undefined;
  const kept = forAgent?.agentSpans();
  const runtime = createRuntime({
    traceRequest: tracing?.traceRequest ?? kept?.traceRequest,
    agentSpans: kept && forAgent ? { path: forAgent.RUNTIME_SPANS_PATH, take: kept.take } : undefined,
    csiSocket: values["csi-socket"] ?? process.env.CSI_ENDPOINT?.replace(/^unix:\/\//, ""),
    single: {
      view: new HostView(),
      options: {
        defaultUser: values.user,
        defaultWorkdir: values.workdir,
        accessToken: values["access-token"] ?? process.env.RUNTIME_ACCESS_TOKEN,
      },
    },
  });
  const server = await runtime.listen(values.socket ? { socket: values.socket } : { port, host: values.host });
  const addr = server.address();
  const where = typeof addr === "string" ? addr : `http://${addr?.address}:${addr?.port}`;
  console.log(`agent-runtime (envd ${ENVD_VERSION}) listening on ${where}`);
  if (interpreterPort !== undefined) {
    const interpreter = createServer({ keepAliveTimeout: 65_000 }, runtime.interpreter);
    await new Promise<void>((resolve, reject) => interpreter.once("error", reject).listen(interpreterPort, values.host, resolve));
    const at = interpreter.address();
    console.log(`code interpreter listening on http://${typeof at === "object" && at ? `${at.address}:${at.port}` : at}`);
  }

  for (const sig of ["SIGINT", "SIGTERM"] as const) {
    process.once(sig, () => void runtime.close().then(() => tracing?.flush()).then(() => process.exit(0)));
  }
}
