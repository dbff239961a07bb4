/** @jsxImportSource hono/jsx */
// The console's tables: each renders one data set from data.ts; the pages wrap them in Live
// sections so the same component answers the page and its fragment.
import type { Child } from "hono/jsx";
import type { ClusterStatus } from "../../durable-objects/cluster/rpc.ts";
import type { IndexSummary } from "../../durable-objects/store/sandbox-index.ts";
import type { TeamRow } from "../../durable-objects/store/teams.ts";
import type { QuotaStatus } from "../../durable-objects/quota/team-quota-do.ts";
import type { PoolView, SandboxDetail } from "./data.ts";

const iso = (ms: number | null) => (ms === null ? "–" : new Date(ms).toISOString().replace(".000Z", "Z"));

/**
 * Links between a section's pages (data.ts `Page`): the first, and the next when more follow.
 * Inside the section, so its live refresh keeps them; named for the section (`noun`), since an
 * overview has several.
 */
export function Pager(props: { noun: string; first?: string; next?: string }) {
  if (!props.first && !props.next) return null;
  return (
    <nav class="pager" aria-label={`Pages of ${props.noun}`}>
      {props.first && <a href={props.first}>First {props.noun}</a>} {props.next && <a href={props.next} rel="next">Next {props.noun}</a>}
    </nav>
  );
}

export function Clusters({ rows, pager }: { rows: ClusterStatus[]; pager?: Child }) {
  return (
    <>
    <table>
      <caption>Clusters and their agents</caption>
      <thead><tr><th scope="col">Cluster</th><th scope="col">Agent</th><th scope="col">Driver</th><th scope="col">Last seen</th><th scope="col">Sandboxes</th><th scope="col">Unacked intents</th></tr></thead>
      <tbody>
        {rows.map((r) => (
          <tr data-cluster={r.cluster ?? ""}>
            <td>{r.cluster}</td>
            <td class={r.connected ? "ok" : "bad"}>{r.connected ? `connected (${r.agentId ?? "?"})` : "disconnected"}</td>
            <td>{r.driver ?? "–"} {r.isolation ? `/ ${r.isolation}` : ""}</td>
            <td>{iso(r.lastSeenAt)}</td>
            <td>{r.sandboxes}</td>
            <td>{r.pending}</td>
          </tr>
        ))}
      </tbody>
    </table>
    {pager}
    </>
  );
}

export function Pools({ rows, pager }: { rows: PoolView[]; pager?: Child }) {
  return (
    <>
    <table>
      <caption>Pools (warm stock per template)</caption>
      <thead><tr><th scope="col">Team</th><th scope="col">Template</th><th scope="col">Replicas</th><th scope="col">Available</th><th scope="col">Creating</th><th scope="col">Claimed</th><th scope="col">Revision (current / update)</th><th scope="col">Autoscaler's last decision</th></tr></thead>
      <tbody>
        {rows.map(({ template: t, teamName, pool: p, autoscaler: a }) => (
          <tr data-template={t.templateId}>
            <td>{teamName}</td>
            <td>{t.templateId}</td>
            <td>{p.replicas}</td>
            <td data-field="available">{p.available}</td>
            <td>{p.creating}</td>
            <td data-field="claimed">{p.claimed}</td>
            <td>{p.currentRevision ?? "–"} / {p.updateRevision ?? "–"}</td>
            <td>{a?.lastDecision ? `${a.lastDecision.time}: ${a.lastDecision.currentReplicas} → ${a.lastDecision.desiredReplicas} (${a.lastDecision.reason}) ${a.lastDecision.message}` : a ? "none yet" : "no autoscaler"}</td>
          </tr>
        ))}
      </tbody>
    </table>
    {pager}
    </>
  );
}

export function Quotas({ rows, pager }: { rows: { team: TeamRow; status: QuotaStatus | null }[]; pager?: Child }) {
  const cell = (used: number, limit: number | null) => (limit === null ? `${used}` : `${used} of ${limit}`);
  return (
    <>
    <table>
      <caption>Quota use per team</caption>
      <thead><tr><th scope="col">Team</th><th scope="col">Running sandboxes</th><th scope="col">vCPUs</th><th scope="col">Memory (MB)</th><th scope="col">Creates this minute</th><th scope="col">Paused sandboxes</th></tr></thead>
      <tbody>
        {rows.map(({ team, status: s }) => (
          <tr data-team={team.name}>
            <td>{team.name}</td>
            {s ? (
              <>
                <td data-field="running">{cell(s.usage.runningSandboxes, s.limits.runningSandboxes)}</td>
                <td>{cell(s.usage.vcpus, s.limits.vcpus)}</td>
                <td>{cell(s.usage.memoryMB, s.limits.memoryMB)}</td>
                <td>{cell(s.usage.createsPerMinute, s.limits.createsPerMinute)}</td>
                <td data-field="paused">{cell(s.usage.pausedSandboxes, s.limits.pausedSandboxes)}</td>
              </>
            ) : (
              <td colspan={5}>unavailable</td>
            )}
          </tr>
        ))}
      </tbody>
    </table>
    {pager}
    </>
  );
}

/** One page of sandboxes, newest first; `nextHref` (when there are more) and `firstHref` (past the first page) link the pages. */
export function SandboxTable(props: { rows: IndexSummary[]; running: number; nextHref?: string; firstHref?: string; csrf: string }) {
  const pager = (props.nextHref || props.firstHref) && (
    <nav class="pager" aria-label="Pages">
      {props.firstHref && <a href={props.firstHref}>Newest</a>} {props.nextHref && <a href={props.nextHref} rel="next">Older sandboxes</a>}
    </nav>
  );
  return (
    <>
      <p>{props.running} running in all. Showing {props.rows.length}{props.nextHref ? ", older ones on the next page" : ""}.</p>
      <table>
        <caption>Sandboxes</caption>
        <thead><tr><th scope="col">Sandbox</th><th scope="col">Template</th><th scope="col">State</th><th scope="col">Phase</th><th scope="col">Started</th><th scope="col"><span class="skip">Actions</span></th></tr></thead>
        <tbody>
          {props.rows.map((r) => (
            <tr data-sandbox={r.id}>
              <td><a href={`/console/sandboxes/${r.id}`}>{r.id}</a></td>
              <td>{r.templateId}</td>
              <td data-field="state">{r.state}</td>
              <td>{r.phase}</td>
              <td>{iso(r.startedAt)}</td>
              <td><KillButton id={r.id} csrf={props.csrf} /></td>
            </tr>
          ))}
        </tbody>
      </table>
      {pager}
    </>
  );
}

export function KillButton({ id, csrf }: { id: string; csrf: string }) {
  return (
    <form class="inline" method="post" action={`/console/sandboxes/${id}/kill`}>
      <input type="hidden" name="csrf" value={csrf} />
      <button type="submit" class="danger" aria-label={`Kill sandbox ${id}`}>Kill</button>
    </form>
  );
}

/** The lifecycle timeline: start, each condition's last transition, the agent's entries, the end. */
export function Timeline({ detail }: { detail: SandboxDetail }) {
  const { info, logs } = detail;
  const events: { at: number; what: string }[] = [{ at: info.startedAt, what: "started" }];
  // Steps taken on it (an update ops run's, each hook run): a team without Kubernetes sees here
  // what `kubectl describe sbx` lists as Events.
  for (const e of detail.events) events.push({ at: e.at, what: `[${e.source}] ${e.type === "Warning" ? "Warning " : ""}${e.reason}: ${e.message}` });
  for (const c of info.conditions) events.push({ at: c.lastTransitionTime, what: `${c.type} = ${c.status} (${c.reason})${c.message ? `: ${c.message}` : ""}` });
  for (const e of logs ?? []) {
    const fields = Object.entries(e.fields).map(([k, v]) => `${k}=${v}`).join(" ");
    events.push({ at: e.timestamp, what: `[agent ${e.level}] ${e.message}${fields ? ` ${fields}` : ""}` });
  }
  if (info.endAt !== null) events.push({ at: info.endAt, what: info.state === "paused" ? "deleted if still paused" : "ends (timeout)" });
  events.sort((a, b) => a.at - b.at);
  return (
    <>
      <dl>
        <dt>State</dt><dd data-field="state">{info.state} ({info.phase})</dd>
        <dt>Template</dt><dd>{info.templateId}</dd>
        <dt>Resources</dt><dd>{info.cpuCount} vCPU, {info.memoryMB} MB</dd>
      </dl>
      {logs === null && <p>The agent did not answer: its entries are missing below.</p>}
      <ol class="timeline">
        {events.map((e) => (
          <li><time datetime={new Date(e.at).toISOString()}>{iso(e.at)}</time> {e.what}</li>
        ))}
      </ol>
    </>
  );
}
