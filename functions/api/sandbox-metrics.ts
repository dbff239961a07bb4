// GET /sandboxes/{id}/metrics and GET /sandboxes/metrics. E2B keeps a time series; we ask the
// sandbox's runtime (envd's GET /metrics, through the cluster ingress, signed by the edge) for its
// current sample and answer it as a one-point series. A sandbox that is not running has no points
// (E2B records none for paused time) and is never woken for this.
import type { Context } from "hono";
import { MAX_LIST_LIMIT } from "../../schema/api/limits.ts";
import { parseEnvdMetrics } from "../../schema/envd/http.ts";
import { sandboxNotFoundMessage } from "../../schema/errors.ts";
import { SANDBOX_ID_PATTERN } from "../../schema/protocol/ids.ts";
import { ApiError } from "../api-error.ts";
import type { AppEnv, Env } from "../env.ts";
import { edgeFetch, readBoundedText } from "../gateway/ingress-client.ts";
import { ENVD_PORT } from "../gateway/target.ts";
import type { Access } from "../../durable-objects/sandbox/state.ts";
import { accessOf, sandboxHandle } from "./stubs.ts";

/** E2B's SandboxMetric. */
export interface SandboxMetric {
  timestamp: string;
  timestampUnix: number;
  cpuCount: number;
  cpuUsedPct: number;
  memUsed: number;
  memTotal: number;
  memCache: number;
  diskUsed: number;
  diskTotal: number;
}

const RUNTIME_TIMEOUT_MS = 5_000;
/** envd's answer is ~200 bytes; a (pod's, tenant-controlled) runtime's longer one is not read on. */
const MAX_METRICS_BYTES = 16 << 10;

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** The current sample of sandbox `id` as the caller may see it: null when the sandbox is not the
 * caller's (or does not exist), [] when it is not running or its runtime does not answer. */
async function sample(env: Env, id: string, access: Access): Promise<SandboxMetric[] | null> {
  if (!SANDBOX_ID_PATTERN.test(id)) return null;
  const stub = sandboxHandle(env, id);
  const info = await stub.info(access);
  if (!info.ok) return null;
  if (info.sandbox.state !== "running") return [];
  const found = await stub.route();
  if (!found.ok || found.route.phase !== "Running") return [];
  const res = await edgeFetch(env, {
    cluster: found.route.cluster,
    sandboxId: id,
    port: ENVD_PORT,
    method: "GET",
    pathAndQuery: "/metrics",
    accessToken: found.route.envdAccessToken,
    timeoutMs: RUNTIME_TIMEOUT_MS,
  });
  if (!res?.ok) {
    await res?.body?.cancel();
    return [];
  }
  // A bad answer (too long, not JSON, not the shape) is no sample, not a 500.
  const m = parseEnvdMetrics(parseJson(await readBoundedText(res, MAX_METRICS_BYTES)));
  if (!m) return [];
  return [
    {
      timestamp: new Date(m.ts * 1000).toISOString(),
      timestampUnix: m.ts,
      cpuCount: m.cpu_count,
      cpuUsedPct: m.cpu_used_pct,
      memUsed: m.mem_used,
      memTotal: m.mem_total,
      memCache: m.mem_cache ?? 0,
      diskUsed: m.disk_used,
      diskTotal: m.disk_total,
    },
  ];
}

function unixQuery(c: Context<AppEnv>, name: string): number | undefined {
  const raw = c.req.query(name);
  if (raw === undefined || raw === "") return undefined;
  if (!/^\d{1,12}$/.test(raw)) throw new ApiError("bad_request", `Invalid query: ${name} must be a unix time in seconds`);
  return Number(raw);
}

function access(c: Context<AppEnv>): Access {
  return accessOf(c.get("caller"));
}

export async function sandboxMetricsRoute(c: Context<AppEnv>): Promise<Response> {
  const id = c.req.param("id") ?? "";
  const start = unixQuery(c, "start");
  const end = unixQuery(c, "end");
  if (start !== undefined && end !== undefined && start > end) throw new ApiError("bad_request", "Invalid query: start is after end");
  const points = await sample(c.env, id, access(c));
  if (points === null) throw new ApiError("sandbox_not_found", sandboxNotFoundMessage(id));
  // The sample is "now"; a window that ends before it (or starts after it) holds no points.
  const inWindow = points.filter((p) => (start === undefined || p.timestampUnix >= start) && (end === undefined || p.timestampUnix <= end + 1));
  return c.json(inWindow);
}

/** Latest sample per sandbox; ids the caller cannot see, or without a sample, are left out. */
export async function manySandboxMetricsRoute(c: Context<AppEnv>): Promise<Response> {
  const raw = c.req.query("sandbox_ids") ?? "";
  const ids = [...new Set(raw.split(",").map((s) => s.trim()).filter(Boolean))];
  if (ids.length === 0) throw new ApiError("bad_request", "Invalid query: sandbox_ids is required");
  if (ids.length > MAX_LIST_LIMIT) throw new ApiError("bad_request", `Invalid query: at most ${MAX_LIST_LIMIT} sandbox_ids`);
  const who = access(c);
  const results = await Promise.all(ids.map(async (id) => [id, await sample(c.env, id, who)] as const));
  const sandboxes: Record<string, SandboxMetric> = {};
  for (const [id, points] of results) if (points?.[0]) sandboxes[id] = points[0];
  return c.json({ sandboxes });
}
