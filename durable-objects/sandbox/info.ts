// Read models of a sandbox: what the API routes render (SandboxInfo), what the gateway needs to
// route a request (RouteInfo), and the libSQL index row.
import { asTombstone, type IndexRow } from "../store/sandbox-index.ts";
import type { Endpoint } from "../../schema/protocol/index.ts";
import { SANDBOX_IP_KEY } from "../../schema/api/extensions.ts";
import { restarting, visibleState, type Condition, type Phase, type SandboxSpec, type SandboxState, type VisibleState } from "./state.ts";

export interface SandboxInfo {
  sandboxId: string;
  templateId: string;
  teamId: string;
  keyId: string;
  state: VisibleState;
  phase: Phase;
  conditions: Condition[];
  startedAt: number;
  /** End of life (ms); while paused, the deletion time; null when there is none. */
  endAt: number | null;
  cpuCount: number;
  memoryMB: number;
  diskSizeMB: number;
  envdVersion: string;
  envdAccessToken: string | null;
  trafficAccessToken: string | null;
  metadata: Record<string, string>;
  allowInternetAccess: boolean | null;
  network: SandboxSpec["network"];
  lifecycle: { onTimeout: "kill" | "pause"; autoResume: boolean };
  volumeMounts: SandboxSpec["volumeMounts"];
  /** Its own lifecycle hooks (kubectl), ahead of the template's. */
  hooks?: SandboxSpec["hooks"];
}

/** What the data-plane gateway needs to forward a request (or refuse it). */
export interface RouteInfo {
  sandboxId: string;
  teamId: string;
  state: VisibleState;
  phase: Phase;
  /** Cluster (ClusterDO name) the sandbox runs on, and how its ingress reaches the runtime. */
  cluster: string;
  endpoint: Endpoint | null;
  /** Compare with `X-Access-Token` in constant time; null means the runtime is unsecured. */
  envdAccessToken: string | null;
  /** Required on user-port traffic when `allowPublicTraffic` is false. */
  trafficAccessToken: string | null;
  allowPublicTraffic: boolean;
  /** E2B's `network.maskRequestHost`: the Host header user ports receive (`${PORT}` filled in). */
  maskRequestHost: string | null;
  autoResume: boolean;
  /** Running, its pid 1 starting again (state.ts `restarting`): requests wait until it is back. */
  restarting: boolean;
}

export function sandboxInfo(s: SandboxState): SandboxInfo {
  const { spec } = s;
  const paused = s.phase === "Pausing" || s.phase === "Paused";
  return {
    sandboxId: spec.id,
    templateId: spec.templateId,
    teamId: spec.teamId,
    keyId: spec.keyId,
    state: visibleState(s.phase),
    phase: s.phase,
    conditions: s.conditions,
    startedAt: s.startedAt,
    endAt: paused ? s.retainUntil : s.endAt,
    cpuCount: spec.cpuCount,
    memoryMB: spec.memoryMB,
    diskSizeMB: spec.diskSizeMB,
    envdVersion: spec.envdVersion,
    envdAccessToken: spec.envdAccessToken,
    trafficAccessToken: spec.trafficAccessToken,
    metadata: spec.returnSandboxIp && s.address ? { ...spec.metadata, [SANDBOX_IP_KEY]: s.address } : spec.metadata,
    allowInternetAccess: spec.allowInternetAccess,
    network: spec.network,
    lifecycle: { onTimeout: spec.lifecycle.onTimeout, autoResume: spec.lifecycle.autoResume },
    ...(spec.hooks && { hooks: spec.hooks }),
    volumeMounts: spec.volumeMounts,
  };
}

export function routeInfo(s: SandboxState): RouteInfo {
  return {
    sandboxId: s.spec.id,
    teamId: s.spec.teamId,
    state: visibleState(s.phase),
    phase: s.phase,
    cluster: s.spec.cluster,
    endpoint: s.endpoint,
    envdAccessToken: s.spec.envdAccessToken,
    trafficAccessToken: s.spec.trafficAccessToken,
    allowPublicTraffic: s.spec.network?.allowPublicTraffic ?? true,
    maskRequestHost: s.spec.network?.maskRequestHost ?? null,
    autoResume: s.spec.lifecycle.autoResume,
    restarting: restarting(s),
  };
}

/** Sentinel end time for sandboxes without one (E2B shows the zero time). */
const NO_END = -62135596800000;

/**
 * The sandbox's row in the libSQL index. A killed sandbox's is its tombstone (state killed, gone
 * as of the kill), written with the kill: no list shows it either way, its logs stay readable
 * TOMBSTONE_KEEP_MS, and its destroy then has nothing to write (a SandboxIndexDO call and a
 * libSQL request fewer per kill). Nothing writes the sandbox's row after its kill.
 */
export function indexRow(s: SandboxState): IndexRow {
  const info = sandboxInfo(s);
  const row: IndexRow = {
    id: info.sandboxId,
    teamId: info.teamId,
    keyId: info.keyId,
    templateId: info.templateId,
    alias: null,
    state: info.state,
    phase: info.phase,
    metadata: info.metadata,
    startedAt: info.startedAt,
    endAt: info.endAt ?? NO_END,
    cpuCount: info.cpuCount,
    memoryMB: info.memoryMB,
    diskSizeMB: info.diskSizeMB,
    envdVersion: info.envdVersion,
    rev: s.rev,
  };
  return s.killedAt === undefined ? row : asTombstone(row, s.killedAt);
}
