// TrafficPolicy / GlobalTrafficPolicy operations (the admin API; schema/api/traffic-policy.ts):
// stored in libSQL, and after every change the whole set goes to the agent of every cluster
// that runs a template (ClusterDO.sendTrafficPolicies; an agent connecting later gets it with its
// welcome). Status: the live sandboxes each policy selects, from the sandbox index.
import { selects, labelsFromMetadata, type TrafficPolicyEntry, type TrafficPolicySpec } from "../../schema/api/traffic-policy.ts";
import type { Env } from "../env.ts";
import { getDb } from "../store/db.ts";
import { listTemplates } from "../store/templates.ts";
import { deleteTrafficPolicy, listTrafficPolicies, liveSandboxLabels, putTrafficPolicy } from "../store/traffic-policies.ts";

export interface TrafficPolicyView extends TrafficPolicyEntry {
  kind: "TrafficPolicy" | "GlobalTrafficPolicy";
  status: { selectedSandboxes: string[]; agentsNotified: number };
}

type ClusterStub = ReturnType<Env["CLUSTER"]["get"]>;

/** Calls `send` on every cluster that runs a template (traffic policies, security profiles); how
 * many had an agent connected. */
export async function toEveryAgent(env: Env, send: (cluster: ClusterStub) => Promise<{ sent: boolean }>): Promise<number> {
  const clusters = new Set((await listTemplates(getDb(env), null)).map((t) => t.spec.cluster));
  const sent = await Promise.all([...clusters].map((c) => send(env.CLUSTER.get(env.CLUSTER.idFromName(c))).then((r) => r.sent).catch(() => false)));
  return sent.filter(Boolean).length;
}

const push = (env: Env) => toEveryAgent(env, (c) => c.sendTrafficPolicies());

/** The live sandboxes a team's (or, team null, a global) selector picks: a policy's status. */
export function selectedSandboxes(live: { id: string; team: string; metadata: Record<string, string> }[], team: string | null, selector: TrafficPolicySpec["selector"]): string[] {
  return live.filter((s) => (team === null || s.team === team) && selects(selector, labelsFromMetadata(s.metadata))).map((s) => s.id).sort();
}

async function views(env: Env, filter: (e: TrafficPolicyEntry) => boolean, agentsNotified = 0): Promise<TrafficPolicyView[]> {
  const db = getDb(env);
  const entries = (await listTrafficPolicies(db)).filter(filter);
  const live = entries.length ? await liveSandboxLabels(db) : [];
  return entries.map((e) => ({
    kind: e.team === null ? "GlobalTrafficPolicy" : "TrafficPolicy",
    ...e,
    status: {
      selectedSandboxes: selectedSandboxes(live, e.team, e.spec.selector),
      agentsNotified,
    },
  }));
}

export function listTrafficPolicyViews(env: Env, team?: string | null): Promise<TrafficPolicyView[]> {
  return views(env, (e) => team === undefined || e.team === team);
}

export async function getTrafficPolicyView(env: Env, team: string | null, name: string): Promise<TrafficPolicyView | undefined> {
  return (await views(env, (e) => e.team === team && e.name === name))[0];
}

export async function setTrafficPolicy(env: Env, team: string | null, name: string, spec: TrafficPolicySpec): Promise<TrafficPolicyView> {
  await putTrafficPolicy(getDb(env), team, name, spec);
  const notified = await push(env);
  return (await views(env, (e) => e.team === team && e.name === name, notified))[0]!;
}

/** Whether there was one. */
export async function removeTrafficPolicy(env: Env, team: string | null, name: string): Promise<boolean> {
  const gone = await deleteTrafficPolicy(getDb(env), team, name);
  if (gone) await push(env);
  return gone;
}
