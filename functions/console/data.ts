// What the console shows, gathered from the same store functions, Durable Object methods and
// operations the API routes call (never through HTTP). Scoped like the API: a team key sees its
// team's sandboxes, pools and quota; the admin key sees every team's, the clusters and the edge's
// latency histograms.
import type { Caller, Env } from "../env.ts";
import type { ClusterStatus } from "../../durable-objects/cluster/rpc.ts";
import type { AutoscalerStatus, PoolStatus } from "../../durable-objects/pool/rpc.ts";
import type { QuotaStatus } from "../../durable-objects/quota/team-quota-do.ts";
import type { SandboxInfo } from "../../durable-objects/sandbox/info.ts";
import type { SandboxNote } from "../../durable-objects/sandbox/state.ts";
import type { SandboxLogEntry } from "../../schema/api/sandbox-logs.ts";
import type { TemplateRecord } from "../../schema/api/template.ts";
import { getDb } from "../../durable-objects/store/db.ts";
import { listSummariesWithRunning, type Cursor, type IndexSummary } from "../../durable-objects/store/sandbox-index.ts";
import { listClusterPage } from "../../durable-objects/store/clusters.ts";
import { listTeamPage, type TeamRow } from "../../durable-objects/store/teams.ts";
import { listOwnTemplatePage, type TemplatePageCursor } from "../../durable-objects/store/templates.ts";
import { flushNow, metricsStub } from "../../durable-objects/metrics/edge-metrics.ts";
import { EDGE } from "../../durable-objects/metrics/families.ts";
import type { HistogramCounts } from "../../durable-objects/metrics/counts.ts";
import { sandboxLogs } from "../../durable-objects/operations/sandbox-logs.ts";
import { updateOpsStatus } from "../../durable-objects/operations/update-ops.ts";
import { listOpsRuns, type OpsRunRow } from "../../durable-objects/store/update-ops-runs.ts";
import { poolStub, quotaStub, sandboxHandle } from "../api/stubs.ts";
import { accessOf } from "../api/stubs.ts";

export const CONSOLE_STATES = ["running", "paused"] as const;
export const CONSOLE_PAGE = 100;
/**
 * Rows per page of a section that asks a Durable Object per row (pools: two calls each; quotas,
 * clusters: one): what one render or one live poll of it may cost, however many teams and
 * templates there are. The rest is on the next pages (a link, `Page.next`).
 */
export const CONSOLE_FANOUT_PAGE = 25;

/** One page of a section, in the store's stable order; `next` (the last row's key) when more follow. */
export interface Page<T, C> {
  rows: T[];
  next?: C;
}

/** Reads one row past the page to learn whether another page follows. */
async function pageOf<R, C>(read: (limit: number) => Promise<R[]>, key: (row: R) => C): Promise<Page<R, C>> {
  const rows = await read(CONSOLE_FANOUT_PAGE + 1);
  if (rows.length <= CONSOLE_FANOUT_PAGE) return { rows };
  const page = rows.slice(0, CONSOLE_FANOUT_PAGE);
  return { rows: page, next: key(page.at(-1)!) };
}

export interface PoolView {
  template: TemplateRecord;
  teamName: string;
  pool: PoolStatus;
  autoscaler: AutoscalerStatus | null;
}

/** A page of the caller's own pools (the admin: every team's; not other teams' public templates), by team name and template id. */
export async function pools(env: Env, caller: Caller, after?: TemplatePageCursor): Promise<Page<PoolView, TemplatePageCursor>> {
  const page = await pageOf(
    (limit) => listOwnTemplatePage(getDb(env), { teamId: caller.admin ? null : caller.teamId, after, limit }),
    (t) => ({ teamName: t.teamName, templateId: t.templateId }),
  );
  const rows = await Promise.all(
    page.rows.map(async ({ teamName, ...t }) => {
      const stub = poolStub(env, t.teamId, t.templateId);
      const [pool, auto] = await Promise.all([stub.status(), stub.autoscalerStatus()]);
      return { template: t, teamName, pool, autoscaler: auto.ok && auto.status.configured ? auto.status : null };
    }),
  );
  return { rows, next: page.next };
}

/** A page of the clusters (admin only): every cluster whose agent has linked and every cluster a template names, with its agent's link. */
export async function clusters(env: Env, caller: Caller, after?: string): Promise<Page<ClusterStatus, string>> {
  if (!caller.admin) return { rows: [] };
  const page = await pageOf((limit) => listClusterPage(getDb(env), { after, limit }), (n) => n);
  const rows = await Promise.all(page.rows.map(async (n) => ({ ...(await env.CLUSTER.get(env.CLUSTER.idFromName(n)).status()), cluster: n })));
  return { rows, next: page.next };
}

/** A run's row with its summary; `phase` null: the run is gone (removed since the list was read). */
export type OpsRunView = OpsRunRow;

/**
 * Every team's update ops runs, newest first (admin only, like their API), with each one's phase
 * and counts: one query, the runs keep their rows' summaries. Only a row no run has summarised
 * yet (written before summaries were kept) asks its run.
 */
export async function opsRuns(env: Env, caller: Caller): Promise<OpsRunView[]> {
  if (!caller.admin) return [];
  const rows = await listOpsRuns(getDb(env), null, CONSOLE_PAGE);
  return Promise.all(
    rows.map(async (row) => {
      if (row.phase !== null) return row;
      const res = await updateOpsStatus(env, { id: row.teamId, name: row.teamName }, row.name);
      return res.ok ? { ...row, phase: res.ops.phase, replicas: res.ops.replicas, updatedReplicas: res.ops.updatedReplicas, failedReplicas: res.ops.failedReplicas } : row;
    }),
  );
}

/** A page of teams (a team's caller: its own) with their quota use, by team name. */
export async function quotas(env: Env, caller: Caller, after?: string): Promise<Page<{ team: TeamRow; status: QuotaStatus | null }, string>> {
  const page = await pageOf((limit) => listTeamPage(getDb(env), { teamId: caller.admin ? null : caller.teamId, after, limit }), (t) => t.name);
  const rows = await Promise.all(
    page.rows.map(async (team) => {
      const res = await quotaStub(env, team.id).status();
      return { team, status: res.ok ? res.status : null };
    }),
  );
  return { rows, next: page.next };
}

export interface SandboxFilter {
  state: (typeof CONSOLE_STATES)[number] | "all";
  template?: string;
  /** The page after this row (the API's cursor: newest first). */
  after?: Cursor;
}

export async function sandboxList(env: Env, caller: Caller, f: SandboxFilter): Promise<{ rows: IndexSummary[]; running: number; next?: Cursor }> {
  // Without the metadata it never shows: up to 128 KiB a row, on every 3 s live poll.
  const page = await listSummariesWithRunning(getDb(env), {
    teamId: caller.admin ? null : caller.teamId,
    states: f.state === "all" ? [...CONSOLE_STATES] : [f.state],
    metadata: [],
    template: f.template,
    order: "desc",
    limit: CONSOLE_PAGE,
    after: f.after,
  });
  return { rows: page.rows, running: page.running, next: page.next };
}

export interface SandboxDetail {
  info: SandboxInfo;
  /** The agent's entries (phase changes, processes), newest last; null when the agent is away. */
  logs: SandboxLogEntry[] | null;
  /** Steps taken on it (update ops runs, lifecycle hooks), newest last. */
  events: SandboxNote[];
}

export async function sandboxDetail(env: Env, caller: Caller, id: string): Promise<SandboxDetail | null> {
  const access = accessOf(caller);
  const sandbox = sandboxHandle(env, id);
  const res = await sandbox.info(access);
  if (!res.ok) return null;
  const [logs, state] = await Promise.all([sandboxLogs(env, id, access, { limit: 200, direction: "backward" }), sandbox.inspect()]);
  return { info: res.sandbox, logs: logs.ok ? logs.entries.reverse() : null, events: state?.events ?? [] };
}

/** The same kill as DELETE /sandboxes/{id}: false when the caller may not see it or it is gone. */
export async function killSandbox(env: Env, caller: Caller, id: string): Promise<boolean> {
  const res = await sandboxHandle(env, id).kill(accessOf(caller));
  return res.ok;
}

export interface StageLatency {
  stage: string;
  histogram: HistogramCounts;
}

/** The create's per-stage histograms, summed over isolates (admin only: they are every team's). */
export async function stageLatencies(env: Env, caller: Caller): Promise<StageLatency[]> {
  if (!caller.admin) return [];
  await flushNow(env);
  const totals = await metricsStub(env).snapshot();
  const prefix = `${EDGE.createStage}{`;
  return Object.entries(totals.histograms)
    .filter(([k]) => k.startsWith(prefix))
    .map(([k, histogram]) => ({ stage: /stage="([^"]*)"/.exec(k)?.[1] ?? k, histogram }))
    .sort((a, b) => a.stage.localeCompare(b.stage));
}
