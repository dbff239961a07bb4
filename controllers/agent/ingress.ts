// The cluster ingress: the only way in from the edge's gateway. It serves nothing but requests the
// edge signed (schema/ingress/signature.ts) for one sandbox and one port, and hands them to the
// embedded agent-runtime (envd port) or to a user port inside the sandbox. Streams pass through
// unbuffered in both directions.
import { createServer, request as httpRequest, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { SIGNATURE_HEADER, ingressKey, isUnnamedSignedFileRequest, verifyIngress } from "../../schema/ingress/signature.ts";
import { SANDBOX_ID_PATTERN } from "../../schema/protocol/ids.ts";
import type { Runtime } from "../runtime/runtime.ts";

export const ENVD_PORT = 49983;

export interface IngressOptions {
  clusterToken: string;
  runtime: Runtime;
  /** Where a user port of a sandbox is reachable from this host, or undefined when it is not. */
  userPortTarget(sandboxId: string, port: number): { host: string; port: number } | undefined;
  /** The runtime URL of a sandbox whose runtime runs elsewhere (a pod); undefined: embedded. */
  remoteRuntime?(sandboxId: string): string | undefined;
  now?: () => number;
}

function deny(res: ServerResponse, status: number, message: string): void {
  const body = JSON.stringify({ code: status, message });
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(body) }).end(body);
}

export async function createIngress(opts: IngressOptions): Promise<Server> {
  const key = await ingressKey(opts.clusterToken);
  const now = opts.now ?? Date.now;

  const server = createServer((req, res) => {
    void handle(req, res).catch((err: unknown) => {
      if (!res.headersSent) deny(res, 502, `ingress: ${(err as Error).message}`);
      else res.destroy();
    });
  });

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const named = req.headers["e2b-sandbox-id"];
    const port = Number(req.headers["e2b-sandbox-port"] ?? ENVD_PORT);
    // Unnamed requests are the SDK's signed file URLs: the runtime finds the sandbox by signature.
    const unnamed = named === undefined && isUnnamedSignedFileRequest(req.method ?? "GET", new URL(req.url ?? "/", "http://ingress"));
    const sandboxId = unnamed ? "" : named;
    if (typeof sandboxId !== "string" || (sandboxId !== "" && !SANDBOX_ID_PATTERN.test(sandboxId)) || !Number.isInteger(port) || port < 1 || port > 65535) {
      return deny(res, 400, "missing or invalid E2b-Sandbox-Id / E2b-Sandbox-Port");
    }
    const signature = req.headers[SIGNATURE_HEADER];
    const verdict = await verifyIngress(key, typeof signature === "string" ? signature : undefined, { sandboxId, port, method: req.method ?? "GET", pathAndQuery: req.url ?? "/" }, now());
    if (!verdict.ok) return deny(res, 401, `request not signed by the edge (${verdict.reason})`);
    delete req.headers[SIGNATURE_HEADER];

    const remote = sandboxId ? opts.remoteRuntime?.(sandboxId) : undefined;
    if (port === ENVD_PORT && !remote) return opts.runtime.handler(req, res);

    const remoteUrl = port === ENVD_PORT && remote ? new URL(remote) : undefined;
    const target = remoteUrl ? { host: remoteUrl.hostname, port: Number(remoteUrl.port || ENVD_PORT) } : opts.userPortTarget(sandboxId, port);
    if (!target) return deny(res, 502, `port ${port} of sandbox ${sandboxId} is not reachable`);
    const upstream = httpRequest({ host: target.host, port: target.port, method: req.method, path: req.url, headers: req.headers });
    upstream.on("response", (up) => {
      res.writeHead(up.statusCode ?? 502, up.headers);
      up.pipe(res);
    });
    upstream.on("error", (err) => {
      if (!res.headersSent) deny(res, 502, `port ${port} of sandbox ${sandboxId}: ${err.message}`);
      else res.destroy(err);
    });
    res.on("close", () => upstream.destroy());
    req.pipe(upstream);
  }

  return server;
}
