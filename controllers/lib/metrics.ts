// The agent's Prometheus metrics (prom-client), in one registry that `/metrics` exposes
// (controllers/agent/metrics-server.ts). Neutral ground like the work queue: the agent, the drivers
// and the traffic proxy count here without importing each other.
//
// Names follow controller-runtime and client-go where OpenKruise's controllers (built on them)
// publish the same thing (`workqueue_depth`, `controller_runtime_reconcile_time_seconds`); the
// rest are `sandbox_agent_*`. Labels are bounded sets (a state, a queue's name, a verb, a
// resource, a decision): never a sandbox id. Hot paths only increment or observe; gauges whose
// value lives elsewhere (sandbox states, queue depths, processes) are read when scraped.
import { Counter, Gauge, Histogram, Registry } from "prom-client";

export const registry = new Registry();

/** Reconcile passes by queue, in seconds (controller-runtime's name and buckets' spirit). */
export const reconcileTime = new Histogram({
  name: "controller_runtime_reconcile_time_seconds",
  help: "Length of time per reconciliation per controller.",
  labelNames: ["controller"] as const,
  buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
  registers: [registry],
});

export const reconcileTotal = new Counter({
  name: "controller_runtime_reconcile_total",
  help: "Total number of reconciliations per controller.",
  labelNames: ["controller", "result"] as const,
  registers: [registry],
});

/** Named work queues whose depth a scrape reads (a queue registers itself when given a name). */
const queues = new Map<string, { depth: number }>();

export function trackQueue(name: string, queue: { depth: number }): void {
  queues.set(name, queue);
}

new Gauge({
  name: "workqueue_depth",
  help: "Current depth of workqueue (keys waiting or being worked on).",
  labelNames: ["name"] as const,
  registers: [registry],
  collect() {
    this.reset();
    for (const [name, q] of queues) this.set({ name }, q.depth);
  },
});

/** Where a scrape reads the sandboxes by state (the reconciler's last observations). */
let sandboxStates: () => Iterable<[{ state: string; owner: string }, number]> = () => [];

export function observeSandboxStates(read: typeof sandboxStates): void {
  sandboxStates = read;
}

new Gauge({
  name: "sandbox_agent_sandboxes",
  help: "Sandboxes of this agent by observed state and owner (pool: a warm member; sandbox: claimed or created for a user).",
  labelNames: ["state", "owner"] as const,
  registers: [registry],
  collect() {
    this.reset();
    for (const [labels, n] of sandboxStates()) this.set(labels, n);
  },
});

let runtimeProcesses: () => number = () => 0;

export function observeRuntimeProcesses(read: () => number): void {
  runtimeProcesses = read;
}

new Gauge({
  name: "sandbox_agent_runtime_processes",
  help: "Live processes started through the embedded runtime (commands and PTYs) across its sandboxes.",
  registers: [registry],
  collect() {
    this.set(runtimeProcesses());
  },
});

/** Requests to the Kubernetes API server, by Kubernetes verb and resource (kube-api.ts). */
export const kubeApiRequests = new Counter({
  name: "sandbox_agent_kube_api_requests_total",
  help: "Requests the agent made to the Kubernetes API server, by verb and resource.",
  labelNames: ["verb", "resource"] as const,
  registers: [registry],
});

/** Egress verdicts of the traffic proxy (controllers/traffic/proxy.ts). */
export const egressDecisions = new Counter({
  name: "sandbox_egress_decisions_total",
  help: "Egress connections and requests the traffic proxy allowed or denied.",
  labelNames: ["decision"] as const,
  registers: [registry],
});

/** Egress refusals by what refused them (controllers/traffic/governed.ts `source`: TrafficPolicy,
 * GlobalTrafficPolicy, e2b, default, floor; `rules`: E2B's rules alone, policy.ts; `dns`: a name
 * refused): a bounded label, never a policy, sandbox or host name (those go to the log line). */
export const egressDenials = new Counter({
  name: "sandbox_egress_denied_total",
  help: "Egress connections and DNS names the traffic proxy refused, by what refused them.",
  labelNames: ["source"] as const,
  registers: [registry],
});

/** Requests the traffic-proxy's L7 handler inspected (controllers/traffic/l7/handler.ts), by
 * whether it sent them on or answered them itself (blocked, rate limited, a denied MCP tool). Each
 * one's record is in the sandbox's network audit (schema/api/network-audit.ts). */
export const egressL7Requests = new Counter({
  name: "sandbox_egress_l7_requests_total",
  help: "HTTP(S) requests the traffic proxy inspected, by verdict (forwarded or refused).",
  labelNames: ["verdict"] as const,
  registers: [registry],
});

/** Spans the agent pulled from pod runtimes (controllers/agent/pod-spans.ts), by outcome:
 * forwarded to the collector, refused (not a span the agent handed that sandbox), dropped by the
 * runtime itself (its buffer was full), or a pull that failed (error: counts pulls, not spans). */
export const podSpansTotal = new Counter({
  name: "sandbox_agent_pod_spans_total",
  help: "Spans pulled from pod runtimes, by outcome (forwarded, refused, dropped; error counts failed pulls).",
  labelNames: ["outcome"] as const,
  registers: [registry],
});

/** L7 audit records the kubernetes driver pulled from pods' sidecars (kubernetes/pod-audit.ts):
 * kept (handed to the sandbox's network audit), or dropped by the sidecar (its buffer was full). */
export const podAuditRecords = new Counter({
  name: "sandbox_agent_pod_audit_records_total",
  help: "Network audit records pulled from pod sidecars, by outcome (kept, dropped by the sidecar).",
  labelNames: ["outcome"] as const,
  registers: [registry],
});

/** Audit pulls that took nothing, by reason: the request failed (unreachable, timeout, refused,
 * too large), the answer was not JSON, or not audit records. */
export const podAuditPullFailures = new Counter({
  name: "sandbox_agent_pod_audit_pull_failures_total",
  help: "Audit pulls from pod sidecars that took nothing, by reason (request, not_json, invalid).",
  labelNames: ["reason"] as const,
  registers: [registry],
});

/** Driver and runtime steps of a reconcile pass (ensure, destroy, snapshotFs, register, init), in seconds. */
export const driverStepTime = new Histogram({
  name: "sandbox_agent_driver_step_seconds",
  help: "Length of time per driver or runtime step of a reconcile pass, by step and result.",
  labelNames: ["step", "result"] as const,
  buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 120],
  registers: [registry],
});

/** Steps under way, by step: how many reconcile passes wait on each driver step at once. */
export const driverStepsInFlight = new Gauge({
  name: "sandbox_agent_driver_steps_in_flight",
  help: "Driver or runtime steps under way, by step.",
  labelNames: ["step"] as const,
  registers: [registry],
});

/** Runs one step, timed and counted in flight. */
export async function timeStep<T>(step: "ensure" | "destroy" | "snapshotFs" | "register" | "init", work: () => T | Promise<T>): Promise<T> {
  driverStepsInFlight.inc({ step });
  const end = driverStepTime.startTimer({ step });
  let result = "error";
  try {
    const out = await work();
    result = "ok";
    return out;
  } finally {
    end({ result });
    driverStepsInFlight.dec({ step });
  }
}
