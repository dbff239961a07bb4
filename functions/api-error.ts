// One renderer for every route: E2B's `{code, message}` body with the HTTP status from
// schema/errors.ts, where `ApiError` lives so that the operations and parsers beneath the routes
// throw it too. Anything that is not an ApiError is a bug: logged, plain 500.
import type { Context } from "hono";
import { ApiError, errorStatus, semanticErrorCodes, type ErrorCode } from "../schema/errors.ts";
import { edgeLogger } from "../durable-objects/tracing/edge-log.ts";

const LOG = edgeLogger("api");

export { ApiError };

export function errorResponse(code: ErrorCode, message: string): Response {
  const status = errorStatus[code];
  const body: { code: number; message: string; error_code?: string } = { code: status, message };
  if (semanticErrorCodes.has(code)) body.error_code = code;
  return Response.json(body, { status });
}

export function onError(err: Error, _c: Context): Response {
  if (err instanceof ApiError) return errorResponse(err.code, err.message);
  LOG.error("unhandled error", { error: err });
  return errorResponse("internal_server_error", "Internal server error");
}

export function notFound(c: Context): Response {
  return errorResponse("not_found", `Route ${c.req.method} ${new URL(c.req.url).pathname} not found`);
}
