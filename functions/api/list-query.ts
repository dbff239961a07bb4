// `GET /v2/sandboxes` query parsing, as upstream does: the SDK triple-encodes `metadata`
// (URLSearchParams of encodeURIComponent'd pairs, then openapi-fetch again); the framework
// decodes once, then the whole string, split on & and =, and each key and value once more.
import { MAX_METADATA_FILTERS, MAX_METADATA_KEY_BYTES, MAX_METADATA_QUERY_LENGTH, MAX_METADATA_VALUE_BYTES } from "../../schema/api/limits.ts";
import { ListSandboxesQuery } from "../../schema/api/sandbox.ts";
import { ApiError } from "../api-error.ts";
import { parseOr400 } from "../body.ts";
import type { Cursor } from "../../durable-objects/store/sandbox-index.ts";
import { rejectReserved } from "../../schema/api/extensions.ts";

export function parseMetadataQuery(raw: string | undefined): [string, string][] {
  if (!raw) return [];
  if (raw.length > MAX_METADATA_QUERY_LENGTH) throw new ApiError("bad_request", `Invalid metadata filter: longer than ${MAX_METADATA_QUERY_LENGTH} characters`);
  const whole = unescape(raw, "metadata");
  const pairs: [string, string][] = [];
  for (const part of whole.split("&")) {
    if (part === "") continue;
    if (pairs.length === MAX_METADATA_FILTERS) throw new ApiError("bad_request", `Invalid metadata filter: at most ${MAX_METADATA_FILTERS} key=value pairs`);
    const eq = part.indexOf("=");
    if (eq <= 0) throw new ApiError("bad_request", `Invalid metadata filter "${part.slice(0, 64)}": expected key=value`);
    const key = unescape(part.slice(0, eq), "metadata key");
    const value = unescape(part.slice(eq + 1), "metadata value");
    if (key.length > MAX_METADATA_KEY_BYTES) throw new ApiError("bad_request", `Invalid metadata filter: keys are at most ${MAX_METADATA_KEY_BYTES} characters`);
    if (value.length > MAX_METADATA_VALUE_BYTES) throw new ApiError("bad_request", `Invalid metadata filter: values are at most ${MAX_METADATA_VALUE_BYTES} characters`);
    rejectReserved(key);
    pairs.push([key, value]);
  }
  return pairs;
}

/** Go's url.QueryUnescape: `+` is a space, bad escapes are errors. */
function unescape(s: string, what: string): string {
  try {
    return decodeURIComponent(s.replaceAll("+", " "));
  } catch {
    throw new ApiError("bad_request", `Invalid ${what}: bad percent-encoding`);
  }
}

export function parseListQuery(q: Record<string, string>) {
  const state = q.state === undefined ? undefined : [...new Set(q.state.split(",").filter((s) => s !== ""))];
  const parsed = parseOr400(ListSandboxesQuery, { ...q, state }, "query");
  return {
    states: parsed.state && parsed.state.length > 0 ? parsed.state : ["running", "paused"],
    order: parsed.order,
    limit: parsed.limit,
    template: parsed.template,
    startedAfter: parsed.startedAfter === undefined ? undefined : Date.parse(parsed.startedAfter),
    after: parsed.nextToken === undefined ? undefined : decodeCursor(parsed.nextToken),
    metadata: parseMetadataQuery(q.metadata),
  };
}

export function encodeCursor(c: Cursor): string {
  return btoa(`${c.startedAt}__${c.id}`).replaceAll("+", "-").replaceAll("/", "_").replace(/=+$/, "");
}

export function decodeCursor(token: string): Cursor {
  let text: string;
  try {
    text = atob(token.replaceAll("-", "+").replaceAll("_", "/"));
  } catch {
    throw new ApiError("bad_request", "Invalid nextToken");
  }
  const m = /^(-?\d+)__([a-z0-9]+)$/.exec(text);
  if (!m) throw new ApiError("bad_request", "Invalid nextToken");
  return { startedAt: Number(m[1]), id: m[2]! };
}
