// The shape TrafficPolicies and SecurityProfiles share (team objects and, team null, global ones):
// stored in libSQL, pushed to every cluster's agent after each change (each cluster sends its agent
// the global objects and those of the teams it serves: ClusterDO), and a status
// listing the live sandboxes each object selects. Each kind is one configuration of it.
import { labelsFromMetadata, selectorLabels, selectsSandbox, type TrafficPolicySpec } from "../../schema/api/traffic-policy.ts";
import type { Env } from "../env.ts";
import { getDb, type Db } from "../store/db.ts";
import { listTemplates } from "../store/templates.ts";
import { liveSandboxLabels } from "../store/traffic-policies.ts";

type ClusterStub = ReturnType<Env["CLUSTER"]["get"]>;

/** Calls `send` on every cluster that runs a template; how many had an agent connected. */
export async function toEveryAgent(env: Env, send: (cluster: ClusterStub) => Promise<{ sent: boolean }>): Promise<number> {
  const clusters = new Set((await listTemplates(getDb(env), null)).map((t) => t.spec.cluster));
  const sent = await Promise.all([...clusters].map((c) => send(env.CLUSTER.get(env.CLUSTER.idFromName(c))).then((r) => r.sent).catch(() => false)));
  return sent.filter(Boolean).length;
}

/** The live sandboxes a team's (or, team null, a global) selector picks: an object's status. A
 * global one sees only the platform's labels, as the agents' engines do (selectsSandbox). */
export function selectedSandboxes(live: { id: string; team: string; templateId: string; metadata: Record<string, string> }[], team: string | null, selector: TrafficPolicySpec["selector"]): string[] {
  return live.filter((s) => (team === null || s.team === team) && selectsSandbox(selector, selectorLabels(labelsFromMetadata(s.metadata), s.templateId, s.team), team === null)).map((s) => s.id).sort();
}

interface Entry<S> {
  team: string | null;
  name: string;
  spec: S;
}

export type PolicyObjectView<E, K extends string> = E & { kind: K; status: { selectedSandboxes: string[]; agentsNotified: number } };

/** `W`: who writes, for a kind that keeps owners (it refuses the other's write by throwing). */
export interface PolicyObjectKind<S extends { selector?: TrafficPolicySpec["selector"] }, E extends Entry<S>, K extends string, W = never> {
  /** The kind of a team's object and of a global one. */
  kinds: { team: K; global: K };
  list(db: Db): Promise<E[]>;
  put(db: Db, team: string | null, name: string, spec: S, writer?: W): Promise<unknown>;
  remove(db: Db, team: string | null, name: string, writer?: W): Promise<boolean>;
  /** Has every cluster send its agent its set again; how many had one connected. */
  push(env: Env): Promise<number>;
}

export function policyObjects<S extends { selector?: TrafficPolicySpec["selector"] }, E extends Entry<S>, K extends string, W = never>(k: PolicyObjectKind<S, E, K, W>) {
  type View = PolicyObjectView<E, K>;
  async function views(env: Env, filter: (e: E) => boolean, agentsNotified = 0): Promise<View[]> {
    const db = getDb(env);
    const entries = (await k.list(db)).filter(filter);
    const live = entries.length ? await liveSandboxLabels(db) : [];
    return entries.map((e) => ({
      kind: e.team === null ? k.kinds.global : k.kinds.team,
      ...e,
      status: { selectedSandboxes: selectedSandboxes(live, e.team, e.spec.selector), agentsNotified },
    }));
  }
  return {
    list: (env: Env, team?: string | null): Promise<View[]> => views(env, (e) => team === undefined || e.team === team),
    /** Every object's team and name, without status (no sandbox is read): for counting. */
    keys: async (env: Env): Promise<{ team: string | null; name: string }[]> => (await k.list(getDb(env))).map((e) => ({ team: e.team, name: e.name })),
    get: async (env: Env, team: string | null, name: string): Promise<View | undefined> => (await views(env, (e) => e.team === team && e.name === name))[0],
    async set(env: Env, team: string | null, name: string, spec: S, writer?: W): Promise<View> {
      await k.put(getDb(env), team, name, spec, writer);
      const notified = await k.push(env);
      return (await views(env, (e) => e.team === team && e.name === name, notified))[0]!;
    },
    /** Whether there was one. */
    async remove(env: Env, team: string | null, name: string, writer?: W): Promise<boolean> {
      const gone = await k.remove(getDb(env), team, name, writer);
      if (gone) await k.push(env);
      return gone;
    },
  };
}
