// SecurityProfile / GlobalSecurityProfile operations (the admin API and the CRD sync;
// schema/api/security-profile.ts): stored in libSQL, and after every change the whole set goes to
// the agent of every cluster that runs a template (ClusterDO.sendSecurityProfiles; an agent
// connecting later gets it with its welcome). Status: the live sandboxes each profile selects.
import type { SecurityProfileEntry, SecurityProfileSpec } from "../../schema/api/security-profile.ts";
import type { Env } from "../env.ts";
import { getDb } from "../store/db.ts";
import { deleteSecurityProfile, listSecurityProfiles, putSecurityProfile } from "../store/security-profiles.ts";
import { liveSandboxLabels } from "../store/traffic-policies.ts";
import { selectedSandboxes, toEveryAgent } from "./traffic-policies.ts";

export interface SecurityProfileView extends SecurityProfileEntry {
  kind: "SecurityProfile" | "GlobalSecurityProfile";
  status: { selectedSandboxes: string[]; agentsNotified: number };
}

const push = (env: Env) => toEveryAgent(env, (c) => c.sendSecurityProfiles());

async function views(env: Env, filter: (e: SecurityProfileEntry) => boolean, agentsNotified = 0): Promise<SecurityProfileView[]> {
  const db = getDb(env);
  const entries = (await listSecurityProfiles(db)).filter(filter);
  const live = entries.length ? await liveSandboxLabels(db) : [];
  return entries.map((e) => ({
    kind: e.team === null ? "GlobalSecurityProfile" : "SecurityProfile",
    ...e,
    status: { selectedSandboxes: selectedSandboxes(live, e.team, e.spec.selector), agentsNotified },
  }));
}

export function listSecurityProfileViews(env: Env, team?: string | null): Promise<SecurityProfileView[]> {
  return views(env, (e) => team === undefined || e.team === team);
}

export async function getSecurityProfileView(env: Env, team: string | null, name: string): Promise<SecurityProfileView | undefined> {
  return (await views(env, (e) => e.team === team && e.name === name))[0];
}

export async function setSecurityProfile(env: Env, team: string | null, name: string, spec: SecurityProfileSpec): Promise<SecurityProfileView> {
  await putSecurityProfile(getDb(env), team, name, spec);
  const notified = await push(env);
  return (await views(env, (e) => e.team === team && e.name === name, notified))[0]!;
}

/** Whether there was one. */
export async function removeSecurityProfile(env: Env, team: string | null, name: string): Promise<boolean> {
  const gone = await deleteSecurityProfile(getDb(env), team, name);
  if (gone) await push(env);
  return gone;
}
