/** @jsxImportSource hono/jsx */
// Update ops runs in the console (admin only, like their API): every run (store/update-ops-runs.ts)
// with its state, one run's detail read through the same operation as
// GET /admin/teams/{team}/updateops/{name}, and the autoscalers' decisions.
import type { OpsView } from "../../durable-objects/ops/update-ops-do.ts";
import type { Child } from "hono/jsx";
import type { OpsRunView, PoolView } from "./data.ts";

const iso = (ms: number) => new Date(ms).toISOString().replace(".000Z", "Z");

export function OpsLookup(props: { team?: string; name?: string }) {
  return (
    <form class="filters" method="get" action="/console/ops">
      <label>Team <input name="team" value={props.team ?? ""} required /></label>
      <label>Run name <input name="name" value={props.name ?? ""} required /></label>
      <button type="submit">Show</button>
    </form>
  );
}

export function OpsRun({ ops }: { ops: OpsView }) {
  return (
    <>
      <p data-field="phase">Phase: <strong>{ops.phase}</strong> (since {iso(ops.createdAt)}, updated {iso(ops.updatedAt)})</p>
      <ul>{ops.conditions.map((c) => <li>{c.type} = {c.status} ({c.reason}){c.message ? `: ${c.message}` : ""}</li>)}</ul>
      <table>
        <caption>Sandboxes of the run</caption>
        <thead><tr><th scope="col">Sandbox</th><th scope="col">Status</th><th scope="col">From</th><th scope="col">To</th><th scope="col">Attempt</th><th scope="col">Message</th></tr></thead>
        <tbody>
          {ops.sandboxes.map((s) => (
            <tr data-ops-sandbox={s.id}><td>{s.id}</td><td>{s.status}</td><td>{s.from}</td><td>{s.to}</td><td>{s.attempt}</td><td>{s.message ?? ""}</td></tr>
          ))}
        </tbody>
      </table>
      <table>
        <caption>Events</caption>
        <thead><tr><th scope="col">Time</th><th scope="col">Type</th><th scope="col">Reason</th><th scope="col">Message</th></tr></thead>
        <tbody>
          {ops.events.map((e) => <tr><td>{iso(e.at)}</td><td>{e.type}</td><td>{e.reason}</td><td>{e.sandboxId ? `${e.sandboxId}: ` : ""}{e.message}</td></tr>)}
        </tbody>
      </table>
    </>
  );
}

export function OpsRuns({ rows }: { rows: OpsRunView[] }) {
  return (
    <table>
      <caption>Update ops runs, newest first</caption>
      <thead><tr><th scope="col">Team</th><th scope="col">Run</th><th scope="col">Started</th><th scope="col">Phase</th><th scope="col">Updated / total</th><th scope="col">Failed</th></tr></thead>
      <tbody>
        {rows.map((row) => (
          <tr data-ops-run={`${row.teamName}/${row.name}`}>
            <td>{row.teamName}</td>
            <td><a href={`/console/ops?${new URLSearchParams({ team: row.teamName, name: row.name })}`}>{row.name}</a></td>
            <td>{iso(row.createdAt)}</td>
            <td data-field="phase">{row.phase ?? "gone"}</td>
            <td>{row.phase ? `${row.updatedReplicas} / ${row.replicas}` : "–"}</td>
            <td>{row.phase ? row.failedReplicas : "–"}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

/** Each autoscaled pool's last decision and its events (rescales, blocks, cron policies), newest first: of one page of pools. */
export function AutoscalerDecisions({ pools, pager }: { pools: PoolView[]; pager?: Child }) {
  const rows = pools
    .flatMap((p) => {
      const a = p.autoscaler;
      if (!a) return [];
      const last = a.lastDecision && { time: a.lastDecision.time, kind: "decision", reason: a.lastDecision.reason, message: `${a.lastDecision.currentReplicas} → ${a.lastDecision.desiredReplicas}: ${a.lastDecision.message}` };
      return [...(last ? [last] : []), ...a.events.map((e) => ({ time: e.time, kind: `event (${e.type})`, reason: e.reason, message: e.message }))].map((d) => ({ pool: p, d }));
    })
    .sort((a, b) => b.d.time.localeCompare(a.d.time));
  return (
    <>
    <table>
      <caption>Autoscaler decisions and events, newest first</caption>
      <thead><tr><th scope="col">Time</th><th scope="col">Team</th><th scope="col">Template</th><th scope="col">Kind</th><th scope="col">Reason</th><th scope="col">Message</th></tr></thead>
      <tbody>
        {rows.map(({ pool, d }) => (
          <tr data-autoscaler={pool.template.templateId}><td>{d.time}</td><td>{pool.teamName}</td><td>{pool.template.templateId}</td><td>{d.kind}</td><td>{d.reason}</td><td>{d.message}</td></tr>
        ))}
      </tbody>
    </table>
    {pager}
    </>
  );
}
