// Bodies of envd's plain HTTP API (envd.yaml) that the runtime parses. Plain checks instead of
// zod: the runtime runs in every sandbox, and loading zod costs ~14 MB of RSS there.

/** POST /init. Unknown fields (volumeMounts, hyperloopIP, caBundle, …) are accepted and ignored. */
export interface InitRequest {
  accessToken?: string;
  envVars?: Record<string, string>;
  defaultUser?: string;
  defaultWorkdir?: string;
  /** RFC 3339; orders competing inits. */
  timestamp?: string;
}

const RFC3339 = /^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$/;

export function parseInitRequest(body: unknown): { ok: true; value: InitRequest } | { ok: false; error: string } {
  if (typeof body !== "object" || body === null || Array.isArray(body)) return { ok: false, error: "body must be a JSON object" };
  const b = body as Record<string, unknown>;
  const value: InitRequest = {};
  for (const key of ["accessToken", "defaultUser", "defaultWorkdir", "timestamp"] as const) {
    const v = b[key];
    if (v === undefined || v === null) continue;
    if (typeof v !== "string") return { ok: false, error: `${key} must be a string` };
    value[key] = v;
  }
  if (value.timestamp !== undefined && !(RFC3339.test(value.timestamp) && !Number.isNaN(Date.parse(value.timestamp)))) {
    return { ok: false, error: "timestamp must be an RFC 3339 date-time" };
  }
  if (b.envVars !== undefined && b.envVars !== null) {
    const env = b.envVars;
    if (typeof env !== "object" || Array.isArray(env) || Object.values(env).some((v) => typeof v !== "string")) {
      return { ok: false, error: "envVars must be an object of strings" };
    }
    value.envVars = env as Record<string, string>;
  }
  return { ok: true, value };
}

/** GET /metrics (envd's Metrics), as the runtime answers it. */
export interface EnvdMetrics {
  ts: number;
  cpu_count: number;
  cpu_used_pct: number;
  mem_used: number;
  mem_total: number;
  mem_cache?: number;
  disk_used: number;
  disk_total: number;
}

/** Unix seconds at most this (the year 5138): past it a Date cannot be rendered. */
const MAX_TS = 99_999_999_999;

/** envd's Metrics from an answer the edge read (a pod's runtime is the tenant's, on Kubernetes):
 * every figure a finite number ≥ 0, `ts` whole seconds; undefined for anything else. */
export function parseEnvdMetrics(body: unknown): EnvdMetrics | undefined {
  if (typeof body !== "object" || body === null || Array.isArray(body)) return undefined;
  const b = body as Record<string, unknown>;
  const figure = (v: unknown): v is number => typeof v === "number" && Number.isFinite(v) && v >= 0;
  const required = ["ts", "cpu_count", "cpu_used_pct", "mem_used", "mem_total", "disk_used", "disk_total"] as const;
  if (!required.every((k) => figure(b[k]))) return undefined;
  if (!Number.isInteger(b.ts) || (b.ts as number) > MAX_TS) return undefined;
  if (b.mem_cache !== undefined && !figure(b.mem_cache)) return undefined;
  const m: EnvdMetrics = { ts: 0, cpu_count: 0, cpu_used_pct: 0, mem_used: 0, mem_total: 0, disk_used: 0, disk_total: 0 };
  for (const k of required) m[k] = b[k] as number;
  if (b.mem_cache !== undefined) m.mem_cache = b.mem_cache as number;
  return m;
}

/** The error body of every plain HTTP endpoint. */
export interface EnvdHttpError {
  code: number;
  message: string;
}
