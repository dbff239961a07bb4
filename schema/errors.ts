// Error codes of the control plane. Every route error is an `ApiError(code, message)`; the one
// onError renders E2B's body `{code: <http status>, message}` with the status from this map.
// Durable Objects return these codes in typed refusals (`{ok:false, error}`) instead of throwing.

export const ErrorCode = {
  badRequest: "bad_request",
  unauthorized: "unauthorized",
  forbidden: "forbidden",
  notFound: "not_found",
  sandboxNotFound: "sandbox_not_found",
  templateNotFound: "template_not_found",
  conflict: "conflict",
  alreadyPaused: "already_paused",
  notPaused: "not_paused",
  payloadTooLarge: "payload_too_large",
  unsupportedMediaType: "unsupported_media_type",
  capacityUnavailable: "sandbox_capacity_unavailable",
  placementTimeout: "sandbox_placement_timeout",
  createFailed: "sandbox_create_failed",
  /** A resume the agent failed: the sandbox is paused again, its files kept, and may be resumed
   * again (409, as E2B answers a resume its sandbox's own state prevents, with an `error_code`). */
  resumeFailed: "sandbox_resume_failed",
  notImplemented: "not_implemented",
  /** A team quota would be passed (E2B's 429). */
  quotaExceeded: "quota_exceeded",
  /** The team's quota could not be read or written: the create is refused, never let through. */
  quotaUnavailable: "quota_unavailable",
  /** The sandbox's agent is not connected, or did not answer in time (retry). */
  agentUnavailable: "agent_unavailable",
  internal: "internal_server_error",
} as const;

export type ErrorCode = (typeof ErrorCode)[keyof typeof ErrorCode];

/** HTTP status per code; `satisfies` keeps the map exhaustive when a code is added. */
export const errorStatus = {
  bad_request: 400,
  unauthorized: 401,
  forbidden: 403,
  not_found: 404,
  sandbox_not_found: 404,
  template_not_found: 404,
  conflict: 409,
  already_paused: 409,
  not_paused: 409,
  payload_too_large: 413,
  unsupported_media_type: 415,
  sandbox_capacity_unavailable: 503,
  sandbox_placement_timeout: 504,
  sandbox_create_failed: 500,
  sandbox_resume_failed: 409,
  not_implemented: 501,
  quota_exceeded: 429,
  quota_unavailable: 503,
  agent_unavailable: 503,
  internal_server_error: 500,
} as const satisfies Record<ErrorCode, number>;

/** Codes E2B also sends as the machine-readable `error_code` field. */
export const semanticErrorCodes: ReadonlySet<ErrorCode> = new Set<ErrorCode>([
  ErrorCode.capacityUnavailable,
  ErrorCode.placementTimeout,
  ErrorCode.createFailed,
  ErrorCode.resumeFailed,
]);

/** A refusal carried across a DO RPC boundary (never thrown there). */
export interface Refusal {
  code: ErrorCode;
  message: string;
}

/**
 * A refusal thrown within one side of a boundary: by routes, by the operations routes and
 * Durable Objects share (`durable-objects/operations/`), and by the parsers in `schema/api/`.
 * The edge renders it once (`functions/api-error.ts`); an operation hands it across an RPC as a
 * `Refusal`.
 */
export class ApiError extends Error {
  readonly code: ErrorCode;
  constructor(code: ErrorCode, message: string) {
    super(message);
    this.name = "ApiError";
    this.code = code;
  }

  /** A typed refusal from a Durable Object, raised at the route. */
  static from(refusal: Refusal): ApiError {
    return new ApiError(refusal.code, refusal.message);
  }

  toRefusal(): Refusal {
    return { code: this.code, message: this.message };
  }
}

/** E2B's not-found message; the same for a missing sandbox and another key's sandbox. */
export function sandboxNotFoundMessage(id: string): string {
  return `Sandbox "${id}" doesn't exist or you don't have access to it`;
}
