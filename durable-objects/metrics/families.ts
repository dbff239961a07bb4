// The edge's metric families: one name, type and help text each, used by the counting hooks and by
// /admin/metrics' renderer. Labels are bounded (a route pattern, a method, a status, an E2B error
// code, a stage, an object and method name): never a sandbox, team or key id.
export const EDGE = {
  httpRequests: "edge_http_requests_total",
  httpDuration: "edge_http_request_duration_ms",
  errors: "edge_errors_total",
  creates: "edge_sandbox_creates_total",
  claims: "edge_pool_claims_total",
  wakeups: "edge_sandbox_wakeups_total",
  createStage: "edge_create_stage_duration_ms",
  doCall: "edge_do_call_duration_ms",
} as const;

export const FAMILIES: Record<string, { type: "counter" | "histogram"; help: string }> = {
  [EDGE.httpRequests]: { type: "counter", help: "Control-plane requests by route pattern, method and HTTP status." },
  [EDGE.httpDuration]: { type: "histogram", help: "Control-plane request latency in milliseconds by route pattern and method." },
  [EDGE.errors]: { type: "counter", help: "Error responses by E2B error code." },
  [EDGE.creates]: { type: "counter", help: "Sandbox creates by result (ok, or the refusal's error code)." },
  [EDGE.claims]: { type: "counter", help: "Pool claims by stock: warm (a ready member) or cold (a new sandbox)." },
  [EDGE.wakeups]: { type: "counter", help: "Paused sandboxes resumed, by what woke them (gateway traffic or an E2B connect)." },
  [EDGE.createStage]: { type: "histogram", help: "Create latency per stage in milliseconds (template, claim, start)." },
  [EDGE.doCall]: { type: "histogram", help: "Durable Object call latency in milliseconds by object and method." },
};
