// OpenKruise's `e2b.agents.kruise.io/*` metadata extensions (openkruise-agents.md §3.4): read
// from create metadata and removed from it. Keys under the reserved prefixes that this edge does
// not implement are refused with 400 rather than silently ignored. The rest of the metadata is
// also what the sandbox's cluster objects carry, as upstream writes it: `label:<k>` as label k,
// every key that is a valid annotation key as an annotation (others stay E2B metadata only, as
// E2B takes any key); a label or annotation the API server would refuse is a 400 here.
import { parseQuantity } from "../crd/quantity.ts";
import { annotationsProblem, isQualifiedName, isReservedKey, labelProblem } from "../crd/user-metadata.ts";
import type { InplaceUpdate } from "../protocol/intent.ts";
import { ApiError } from "../errors.ts";
import { AutoPausePolicy } from "./auto-pause.ts";

const EXT = "e2b.agents.kruise.io/";
/** Where `return-sandbox-ip` puts the sandbox's address in its metadata (upstream's key). */
export const SANDBOX_IP_KEY = `${EXT}sandbox-ip`;
/** OpenKruise extensions that depend on Pods/CSI and have no meaning on this edge yet. */
const UNSUPPORTED = new Set([
  "csi-volume-config",
  "csi-volume-name",
  "csi-mount-point",
  "csi-subpath",
  "reserve-failed-sandbox",
  "reserve-failed-sandbox-for",
  "sandbox-name",
  "sandbox-generate-name",
]);
const FOREVER_MS = 100 * 365 * 24 * 3600 * 1000;

export interface CreateExtensions {
  /** User metadata without the extension keys. */
  metadata: Record<string, string>;
  /** From `label:<k>` metadata keys (kept in metadata too): labels on the sandbox. */
  labels: Record<string, string>;
  /** The metadata entries whose key is a valid annotation key: annotations on the sandbox. */
  annotations: Record<string, string>;
  neverTimeout: boolean;
  /** Paused retention; null keeps paused sandboxes forever (the default). */
  pausedRetentionMs: number | null;
  skipInitRuntime: boolean;
  createOnNoStock: boolean;
  /** Bound on waiting for the cluster to take the sandbox, in ms (undefined: the default). */
  waitReadyMs?: number;
  /** `image`, `cpu-limit` / `cpu-request`: the claimed member changed in place (CPU in cores:
   * the limit, else the request, as the driver sets both). Undefined when none was given. */
  inplaceUpdate?: InplaceUpdate;
  /** `return-sandbox-ip`: the sandbox's metadata shows its IP address (SANDBOX_IP_KEY). */
  returnSandboxIp?: boolean;
  /** `auto-pause-policy` (JSON, schema/api/auto-pause.ts): pause when a probe says idle. */
  autoPausePolicy?: AutoPausePolicy;
}

export function parseCreateExtensions(input: Record<string, string> = {}): CreateExtensions {
  const out: CreateExtensions = { metadata: {}, labels: {}, annotations: {}, neverTimeout: false, pausedRetentionMs: null, skipInitRuntime: false, createOnNoStock: true };
  const cpu: { limit?: number; request?: number } = {};
  for (const [key, value] of Object.entries(input)) {
    if (key.startsWith(EXT)) {
      applyExtension(out, cpu, key.slice(EXT.length), value, key);
      continue;
    }
    rejectReserved(key);
    out.metadata[key] = value;
    if (key.startsWith("label:")) {
      const label = key.slice("label:".length);
      const problem = labelProblem(label, value);
      if (problem) throw new ApiError("bad_request", `metadata key "${key}": ${problem}`);
      out.labels[label] = value;
    } else if (isQualifiedName(key)) {
      out.annotations[key] = value;
    }
  }
  const tooBig = annotationsProblem(out.annotations);
  if (tooBig) throw new ApiError("bad_request", `metadata: ${tooBig} (the sandbox's annotations)`);
  if (cpu.limit !== undefined && cpu.request !== undefined && cpu.request > cpu.limit) {
    throw new ApiError("bad_request", `metadata "${EXT}cpu-request" (${cpu.request}) must not exceed "${EXT}cpu-limit" (${cpu.limit})`);
  }
  const cpuCount = cpu.limit ?? cpu.request;
  if (cpuCount !== undefined) out.inplaceUpdate = { ...out.inplaceUpdate, cpuCount };
  return out;
}

/** The same checks for an in-place update that arrives typed (a SandboxClaim's `inplaceUpdate`). */
export function checkInplaceUpdate(u: InplaceUpdate, what: string): InplaceUpdate {
  if (u.image !== undefined && !isDockerReference(u.image)) throw new ApiError("bad_request", `${what}: "${u.image}" is not a docker image reference`);
  if (u.cpuCount !== undefined && !(u.cpuCount >= 0.001 && u.cpuCount <= MAX_CPU)) throw new ApiError("bad_request", `${what}: CPU ${u.cpuCount} is not within 1m..${MAX_CPU}`);
  return u;
}

/** Metadata keys (create and list filters) must not use the reserved prefixes. */
export function rejectReserved(key: string): void {
  if (isReservedKey(key)) throw new ApiError("bad_request", `metadata key "${key}" uses a reserved prefix`);
}

function applyExtension(out: CreateExtensions, cpu: { limit?: number; request?: number }, name: string, value: string, key: string): void {
  switch (name) {
    case "image":
      if (!isDockerReference(value)) throw new ApiError("bad_request", `metadata "${key}": "${value}" is not a docker image reference`);
      out.inplaceUpdate = { ...out.inplaceUpdate, image: value };
      return;
    case "cpu-limit":
      cpu.limit = cpuQuantity(value, key);
      return;
    case "cpu-request":
      cpu.request = cpuQuantity(value, key);
      return;
    case "memory":
      throw new ApiError("bad_request", `metadata extension "${key}": memory cannot be changed in place, only "${EXT}cpu-request" / "${EXT}cpu-limit"`);
    case "auto-pause-policy": {
      let json: unknown;
      try {
        json = JSON.parse(value);
      } catch {
        throw new ApiError("bad_request", `metadata "${key}" is not JSON`);
      }
      const parsed = AutoPausePolicy.safeParse(json);
      if (!parsed.success) throw new ApiError("bad_request", `metadata "${key}": ${parsed.error.issues.map((i) => `${i.path.join(".") || "policy"}: ${i.message}`).join("; ")}`);
      out.autoPausePolicy = parsed.data;
      return;
    }
    case "never-timeout":
      out.neverTimeout = bool(value, key);
      return;
    case "return-sandbox-ip":
      out.returnSandboxIp = bool(value, key);
      return;
    case "skip-init-runtime":
      out.skipInitRuntime = bool(value, key);
      return;
    case "create-on-no-stock":
      out.createOnNoStock = bool(value, key);
      return;
    case "reserve-paused-sandbox-duration":
      out.pausedRetentionMs = value === "forever" ? null : Math.min(goDuration(value, key), FOREVER_MS);
      return;
    case "wait-ready-timeout-seconds":
    case "claim-timeout-seconds": {
      const s = Number(value);
      if (!Number.isInteger(s) || s < 1 || s > 600) throw new ApiError("bad_request", `metadata "${key}" must be 1..600 seconds`);
      out.waitReadyMs = Math.min(out.waitReadyMs ?? Infinity, s * 1000);
      return;
    }
    default:
      if (UNSUPPORTED.has(name)) throw new ApiError("bad_request", `metadata extension "${key}" is not supported by this server`);
      throw new ApiError("bad_request", `metadata key "${key}" uses a reserved prefix`);
  }
}

function bool(value: string, key: string): boolean {
  if (value === "true") return true;
  if (value === "false") return false;
  throw new ApiError("bad_request", `metadata "${key}" must be "true" or "false", not ${JSON.stringify(value)}`);
}

const UNIT_MS: Record<string, number> = { ns: 1e-6, us: 1e-3, "µs": 1e-3, ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/** Go's time.ParseDuration subset: "90s", "1h30m", "1.5h". */
export function goDuration(value: string, key: string): number {
  const parts = [...value.matchAll(/(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)/g)];
  if (parts.length === 0 || parts.map((p) => p[0]).join("") !== value) throw new ApiError("bad_request", `metadata "${key}": "${value}" is not a duration like 30m or 2h`);
  return Math.round(parts.reduce((ms, p) => ms + Number(p[1]) * UNIT_MS[p[2]!]!, 0));
}

// The distribution/reference grammar (what `docker pull` accepts): [domain[:port]/]path[:tag][@digest],
// path components lowercase.
const DOMAIN = String.raw`(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]+)?`;
const COMPONENT = String.raw`[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*`;
const TAG = String.raw`[\w][\w.-]{0,127}`;
const DIGEST = String.raw`[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}`;
const REFERENCE = new RegExp(`^((?:${DOMAIN}/)?${COMPONENT}(?:/${COMPONENT})*)(?::${TAG})?(?:@${DIGEST})?$`);

export function isDockerReference(value: string): boolean {
  const m = value.length <= 512 ? REFERENCE.exec(value) : null;
  return m !== null && m[1]!.length <= 255;
}

/** More cores than any node has is a typo, and a bound keeps the value finite. */
const MAX_CPU = 1024;

/** A positive Kubernetes CPU quantity ("500m", "2", "1.5", "2e0") in cores, at least 1m: the API
 * server's grammar (crd/quantity.ts), so what it would refuse (a 65-character value) is refused here. */
export function cpuQuantity(value: string, key: string): number {
  const cores = parseQuantity(value) ?? NaN;
  if (!(cores >= 0.001 && cores <= MAX_CPU)) throw new ApiError("bad_request", `metadata "${key}": "${value}" is not a positive CPU quantity like 500m or 2 (1m..${MAX_CPU})`);
  return cores;
}
