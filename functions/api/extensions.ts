// OpenKruise's `e2b.agents.kruise.io/*` metadata extensions (openkruise-agents.md §3.4): read
// from create metadata and removed from it. Keys under the reserved prefixes that this edge does
// not implement are refused with 400 rather than silently ignored.
import { ApiError } from "../api-error.ts";

const EXT = "e2b.agents.kruise.io/";
const RESERVED = [EXT, "agents.kruise.io/"];
/** OpenKruise extensions that depend on Pods/CSI and have no meaning on this edge yet. */
const UNSUPPORTED = new Set([
  "image",
  "cpu-request",
  "cpu-limit",
  "csi-volume-config",
  "csi-volume-name",
  "csi-mount-point",
  "csi-subpath",
  "reserve-failed-sandbox",
  "reserve-failed-sandbox-for",
  "return-sandbox-ip",
  "sandbox-name",
  "sandbox-generate-name",
]);
const FOREVER_MS = 100 * 365 * 24 * 3600 * 1000;

export interface CreateExtensions {
  /** User metadata without the extension keys. */
  metadata: Record<string, string>;
  /** From `label:<k>` metadata keys (kept in metadata too): labels on the sandbox. */
  labels: Record<string, string>;
  neverTimeout: boolean;
  /** Paused retention; null keeps paused sandboxes forever (the default). */
  pausedRetentionMs: number | null;
  skipInitRuntime: boolean;
  createOnNoStock: boolean;
  /** Bound on waiting for the cluster to take the sandbox, in ms (undefined: the default). */
  waitReadyMs?: number;
}

export function parseCreateExtensions(input: Record<string, string> = {}): CreateExtensions {
  const out: CreateExtensions = { metadata: {}, labels: {}, neverTimeout: false, pausedRetentionMs: null, skipInitRuntime: false, createOnNoStock: true };
  for (const [key, value] of Object.entries(input)) {
    if (key.startsWith(EXT)) {
      applyExtension(out, key.slice(EXT.length), value, key);
      continue;
    }
    rejectReserved(key);
    out.metadata[key] = value;
    if (key.startsWith("label:")) {
      const label = key.slice("label:".length);
      if (!/^([a-z0-9]([-a-z0-9.]*[a-z0-9])?\/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$/.test(label)) {
        throw new ApiError("bad_request", `metadata key "${key}": "${label}" is not a valid label name`);
      }
      rejectReserved(label);
      out.labels[label] = value;
    }
  }
  return out;
}

/** Metadata keys (create and list filters) must not use the reserved prefixes. */
export function rejectReserved(key: string): void {
  if (RESERVED.some((p) => key.startsWith(p))) throw new ApiError("bad_request", `metadata key "${key}" uses a reserved prefix`);
}

function applyExtension(out: CreateExtensions, name: string, value: string, key: string): void {
  switch (name) {
    case "never-timeout":
      out.neverTimeout = bool(value, key);
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
  throw new ApiError("bad_request", `metadata "${key}" must be "true" or "false"`);
}

const UNIT_MS: Record<string, number> = { ns: 1e-6, us: 1e-3, "µs": 1e-3, ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/** Go's time.ParseDuration subset: "90s", "1h30m", "1.5h". */
export function goDuration(value: string, key: string): number {
  const parts = [...value.matchAll(/(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)/g)];
  if (parts.length === 0 || parts.map((p) => p[0]).join("") !== value) throw new ApiError("bad_request", `metadata "${key}": "${value}" is not a duration like 30m or 2h`);
  return Math.round(parts.reduce((ms, p) => ms + Number(p[1]) * UNIT_MS[p[2]!]!, 0));
}
