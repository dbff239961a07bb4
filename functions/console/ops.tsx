/** @jsxImportSource hono/jsx */
// An update ops run in the console (admin only, like its API): looked up by team and run name,
// since runs have no list of their own yet; read through the same operation as
// GET /admin/teams/{team}/updateops/{name}.
import type { OpsView } from "../../durable-objects/ops/update-ops-do.ts";

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
