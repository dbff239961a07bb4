// Plain HTTP replies: JSON bodies and envd's `{code, message}` error shape.
import type { IncomingMessage, ServerResponse } from "node:http";
import type { RuntimeSandbox } from "../sandbox.ts";

export type HttpHandler = (req: IncomingMessage, res: ServerResponse, sbx: RuntimeSandbox, url: URL) => Promise<void> | void;

export function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { "content-type": "application/json; charset=utf-8", "content-length": Buffer.byteLength(text) });
  res.end(text);
}

export function sendError(res: ServerResponse, code: number, message: string): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  sendJson(res, code, { code, message });
}

/** Thrown by handlers for a reply that is not a 2xx; the router renders it. */
export class HttpError extends Error {
  readonly status: number;
  constructor(status: number, message: string) {
    super(message);
    this.status = status;
  }
}
