// Sandbox read models and index rows → the exact E2B JSON shapes (schema/api/sandbox.ts).
import type { ListedSandbox, Sandbox, SandboxDetail } from "../../schema/api/sandbox.ts";
import type { SandboxInfo } from "../../durable-objects/sandbox/info.ts";
import type { IndexRow } from "../../durable-objects/store/sandbox-index.ts";
import { SANDBOX_IP_KEY } from "../../schema/api/extensions.ts";

/** Deprecated upstream and unused by the SDKs, but required in the responses. */
const CLIENT_ID = "edge";
/** E2B shows the zero time for a sandbox without an end. */
const ZERO_TIME = "0001-01-01T00:00:00Z";

function iso(ms: number | null): string {
  return ms === null || ms < -62135596800000 + 1 ? ZERO_TIME : new Date(ms).toISOString();
}

export function renderSandbox(s: SandboxInfo, domain: string | undefined): Sandbox {
  const out: Sandbox = {
    templateID: s.templateId,
    sandboxID: s.sandboxId,
    clientID: CLIENT_ID,
    envdVersion: s.envdVersion,
    trafficAccessToken: s.trafficAccessToken,
    domain: domain ?? null,
  };
  if (s.envdAccessToken !== null) out.envdAccessToken = s.envdAccessToken;
  if (SANDBOX_IP_KEY in s.metadata) out.metadata = s.metadata;
  return out;
}

export function renderDetail(s: SandboxInfo, domain: string | undefined): SandboxDetail {
  const out: SandboxDetail = {
    templateID: s.templateId,
    sandboxID: s.sandboxId,
    clientID: CLIENT_ID,
    startedAt: iso(s.startedAt),
    endAt: iso(s.endAt),
    cpuCount: s.cpuCount,
    memoryMB: s.memoryMB,
    diskSizeMB: s.diskSizeMB,
    metadata: s.metadata,
    state: s.state === "paused" ? "paused" : "running",
    envdVersion: s.envdVersion,
    domain: domain ?? null,
    allowInternetAccess: s.allowInternetAccess,
    lifecycle: s.lifecycle,
    volumeMounts: s.volumeMounts,
  };
  if (s.envdAccessToken !== null) out.envdAccessToken = s.envdAccessToken;
  if (s.network) out.network = s.network;
  return out;
}

export function renderListed(r: IndexRow): ListedSandbox {
  return {
    templateID: r.templateId,
    sandboxID: r.id,
    clientID: CLIENT_ID,
    startedAt: iso(r.startedAt),
    endAt: iso(r.endAt),
    cpuCount: r.cpuCount,
    memoryMB: r.memoryMB,
    diskSizeMB: r.diskSizeMB,
    metadata: r.metadata,
    state: r.state === "paused" ? "paused" : "running",
    envdVersion: r.envdVersion,
  };
}
