// Plain HTTP replies: JSON bodies and envd's `{code, message}` error shape.
import type { IncomingMessage, ServerResponse } from "node:http";
import type { RuntimeSandbox } from "../sandbox.ts";

export type HttpHandler = (req: IncomingMessage, res: ServerResponse, sbx: RuntimeSandbox, url: URL) => Promise<void> | void;

export function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { "content-type": "application/json; charset=utf-8", "content-length": Buffer.byteLength(text) });
  res.end(text);
}

/** envd's answer to a request without the sandbox's access token (the SDKs match on the 401). */
export const UNAUTHORIZED = "unauthorized access, please provide a valid access token or method signing if supported";

/** The `X-Access-Token` a request presented (the first, if it repeats the header). */
export function presentedToken(req: IncomingMessage): string | undefined {
  const header = req.headers["x-access-token"];
  return Array.isArray(header) ? header[0] : header;
}

/** `close`: the connection ends after the answer (Node would otherwise read the rest of an unread
 * request body to keep the connection alive). */
export function sendError(res: ServerResponse, code: number, message: string, close = false): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  if (close) res.setHeader("connection", "close");
  sendJson(res, code, { code, message });
}

/** Thrown by handlers for a reply that is not a 2xx; the router renders it. `close`: the request's
 * body is left unread, so the connection must end with the answer (sendError). */
export class HttpError extends Error {
  readonly status: number;
  readonly close: boolean;
  constructor(status: number, message: string, opts: { close?: boolean } = {}) {
    super(message);
    this.status = status;
    this.close = opts.close ?? false;
  }
}

/** The most of a refused upload read (and dropped) so the client sees the answer: a server that
 * answers and closes while the client still sends makes it report EPIPE / "fetch failed"
 * instead of the error. Past this (or the declared length, when smaller) the connection is
 * closed after the answer. */
export const DRAIN_MAX_BYTES = 1024 ** 3;

/** Reads and drops the rest of `req`'s body, bounded by DRAIN_MAX_BYTES. */
export async function drainUpload(req: IncomingMessage, res: ServerResponse): Promise<void> {
  if (req.complete || req.destroyed) return;
  const declared = Number(req.headers["content-length"]);
  const limit = Number.isFinite(declared) && declared >= 0 ? Math.min(declared, DRAIN_MAX_BYTES) : DRAIN_MAX_BYTES;
  let seen = 0;
  await new Promise<void>((resolve) => {
    const done = () => {
      req.off("data", onData);
      req.off("end", done);
      req.off("close", done);
      resolve();
    };
    const onData = (chunk: Buffer) => {
      seen += chunk.length;
      if (seen >= limit && !req.complete) {
        res.setHeader("connection", "close");
        req.pause();
        done();
      }
    };
    req.on("data", onData);
    req.once("end", done);
    req.once("close", done);
    req.resume();
  });
}
