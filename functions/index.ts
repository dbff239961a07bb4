// The edge Worker: the E2B control plane (functions/api/, behind X-API-KEY), the admin API, and
// the agent link. Every error is E2B's JSON `{code, message}` (api-error.ts); unknown routes are
// a JSON 404 before any authentication.
import { Hono } from "hono";
import { agentLink } from "./agent-link.ts";
import { notFound, onError } from "./api-error.ts";
import { gateway } from "./gateway/gateway.ts";
import { adminClusters } from "./api/admin-clusters.ts";
import { adminTemplates } from "./api/admin-templates.ts";
import { apiKeys } from "./api/api-keys.ts";
import { sandboxes } from "./api/sandboxes.ts";
import { teams } from "./api/teams.ts";
import { templates } from "./api/templates.ts";
import { createSandbox } from "./api/sandbox-create.ts";
import { authenticate, requireApiKey } from "./auth/middleware.ts";
import type { AppEnv, Env } from "./env.ts";
import { gatewayTarget } from "./gateway/target.ts";
export { SandboxGroupDO } from "../durable-objects/sandbox/sandbox-group-do.ts";
export { SandboxIndexDO } from "../durable-objects/sandbox/index-writer-do.ts";
export { PoolDO } from "../durable-objects/pool/pool-do.ts";
export { ClusterDO } from "../durable-objects/cluster/cluster-do.ts";

const app = new Hono<AppEnv>();
app.onError(onError);
app.notFound(notFound);

// Data-plane requests (E2b-Sandbox-Id header or {port}-{id}.{domain} host) never reach the
// control plane: the gateway answers them, including envd's own /health.
app.use("*", gateway());
app.get("/health", (c) => c.json({ ok: true }));
app.route("/", agentLink);

// Authentication is attached to the control-plane paths only, so an unknown path is a 404.
const authenticated = ["/sandboxes", "/sandboxes/*", "/v2/sandboxes", "/v2/sandboxes/*", "/api-keys", "/api-keys/*", "/teams", "/templates", "/templates/*", "/snapshots", "/admin/*"];
for (const path of authenticated) app.use(path, requireApiKey());
app.route("/", sandboxes);
app.route("/", apiKeys);
app.route("/", teams);
app.route("/", templates);
app.route("/", adminTemplates);
app.route("/", adminClusters);

/**
 * POST /sandboxes and /v2/sandboxes, the hottest route, skip Hono's router, middleware chain and
 * context (~3 % of the edge's CPU per create) and run the same steps as the app does for them:
 * not a data-plane request (else the gateway), the key, the route's handler, errors as the app
 * renders them. Everything else goes through the app.
 */
const CREATE_PATHS: Record<string, "v1" | "v2" | undefined> = { "/sandboxes": "v1", "/v2/sandboxes": "v2" };

async function createDirect(req: Request, env: Env, ctx: ExecutionContext, version: "v1" | "v2"): Promise<Response> {
  try {
    return await createSandbox(req, env, await authenticate(req, env, ctx), version);
  } catch (err) {
    return onError(err instanceof Error ? err : new Error(String(err)));
  }
}

export default {
  fetch(req: Request, env: Env, ctx: ExecutionContext): Response | Promise<Response> {
    if (req.method === "POST") {
      const version = CREATE_PATHS[pathOf(req.url)];
      if (version && !gatewayTarget(req.headers, req.headers.get("host"))) return createDirect(req, env, ctx, version);
    }
    return app.fetch(req, env, ctx);
  },
} satisfies ExportedHandler<Env>;

/** The path of an absolute URL without parsing it all (as Hono's router does). */
function pathOf(url: string): string {
  const start = url.indexOf("/", url.indexOf("://") + 3);
  if (start < 0) return "/";
  const q = url.indexOf("?", start);
  return q < 0 ? url.slice(start) : url.slice(start, q);
}
