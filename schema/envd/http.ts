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

/** The error body of every plain HTTP endpoint. */
export interface EnvdHttpError {
  code: number;
  message: string;
}
