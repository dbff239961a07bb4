// The edge Worker: the E2B control plane (functions/api/, behind X-API-KEY), the admin API, and
// the agent link. Every error is E2B's JSON `{code, message}` (api-error.ts); an E2B route we do
// not serve is a 501 (api/unserved.ts), any other unknown route a JSON 404 before authentication.
import { Hono } from "hono";
import { agentLink } from "./agent-link.ts";
import { notFound, onError } from "./api-error.ts";
import { gateway } from "./gateway/gateway.ts";
import { adminClusters } from "./api/admin-clusters.ts";
import { adminTeamClusters } from "./api/admin-team-clusters.ts";
import { adminMetrics, measureRequests } from "./api/admin-metrics.ts";
import { adminQuotas } from "./api/admin-quotas.ts";
import { adminTemplates } from "./api/admin-templates.ts";
import { adminUpdateOps } from "./api/admin-update-ops.ts";
import { adminAutoscalers } from "./api/admin-autoscalers.ts";
import { adminTrafficPolicies } from "./api/admin-traffic-policies.ts";
import { adminSecurityProfiles } from "./api/admin-security-profiles.ts";
import { adminSandboxes } from "./api/admin-sandboxes.ts";
import { apiKeys } from "./api/api-keys.ts";
import { sandboxes } from "./api/sandboxes.ts";
import { secretsApi } from "./api/secrets.ts";
import { snapshots } from "./api/snapshots.ts";
import { teams } from "./api/teams.ts";
import { templates } from "./api/templates.ts";
import { templateBuilds } from "./api/template-builds.ts";
import { unserved } from "./api/unserved.ts";
import { consoleApp } from "./console/console.tsx";
import { requireApiKey } from "./auth/middleware.ts";
import type { AppEnv } from "./env.ts";
import { traceRequests, traced } from "./tracing.ts";
export { SandboxGroupDO } from "../durable-objects/sandbox/sandbox-group-do.ts";
export { SandboxIndexDO } from "../durable-objects/sandbox/sandbox-index-do.ts";
export { PoolDO } from "../durable-objects/pool/pool-do.ts";
export { ClusterDO } from "../durable-objects/cluster/cluster-do.ts";
export { TeamQuotaDO } from "../durable-objects/quota/team-quota-do.ts";
export { EdgeMetricsDO } from "../durable-objects/metrics/metrics-do.ts";
export { UpdateOpsDO } from "../durable-objects/ops/update-ops-do.ts";
export { ProbeDO } from "../durable-objects/probes/probe-do.ts";

const app = new Hono<AppEnv>();
app.onError(onError);
app.notFound(notFound);

// Data-plane requests (E2b-Sandbox-Id header or {port}-{id}.{domain} host) never reach the
// control plane: the gateway answers them, including envd's own /health.
app.use("*", gateway());
app.use("*", traceRequests());
app.use("*", measureRequests());
app.get("/health", (c) => c.json({ ok: true }));
app.route("/", agentLink);

// Authentication is attached to the control-plane paths only, so an unknown path is a 404.
const authenticated = ["/sandboxes", "/sandboxes/*", "/v2/sandboxes", "/v2/sandboxes/*", "/api-keys", "/api-keys/*", "/teams", "/templates", "/templates/*", "/v2/templates", "/v2/templates/*", "/v3/templates", "/snapshots", "/secrets", "/secrets/*", "/admin/*"];
for (const path of authenticated) app.use(path, traced("auth.api_key", requireApiKey()));
app.route("/", sandboxes);
app.route("/", snapshots);
app.route("/", secretsApi);
app.route("/", apiKeys);
app.route("/", teams);
// Before `templates`: DELETE /templates/tags is not a template's id.
app.route("/", templateBuilds);
app.route("/", templates);
app.route("/", adminTemplates);
app.route("/", adminAutoscalers);
app.route("/", adminTrafficPolicies);
app.route("/", adminSecurityProfiles);
app.route("/", adminSandboxes);
app.route("/", adminClusters);
app.route("/", adminTeamClusters);
app.route("/", adminMetrics);
app.route("/", adminQuotas);
app.route("/", adminUpdateOps);
// The operator console: its own session cookie, not X-API-KEY (functions/console/).
app.route("/", consoleApp);
// Last: E2B routes none of the above serves answer 501, not 404 (api/unserved.ts).
app.route("/", unserved);

export default app;
