// Shared helpers of the workerd route tests: requests through the Worker's own fetch, a team with
// its key and template created through the admin API, and a scripted agent on its own cluster.
import { exports } from "cloudflare:workers";
import { expect } from "vitest";
import { fetchTransport, ScriptedAgent, type ScriptedAgentOptions } from "../support/scripted-agent.ts";

/** The admin key vitest.config.ts binds as ADMIN_API_KEY (and the global setup seeds). */
export const ADMIN_KEY = "e2b_00000000000000000000000000000000000000ad";
const CLUSTER_TOKEN = "test-cluster-token";

export interface CallOptions {
  key?: string | null;
  method?: string;
  body?: unknown;
  /** Sent as is (for malformed JSON tests). */
  raw?: string;
  headers?: Record<string, string>;
}

export async function call(path: string, opts: CallOptions = {}): Promise<Response> {
  const headers: Record<string, string> = { ...opts.headers };
  if (opts.key !== null) headers["x-api-key"] = opts.key ?? ADMIN_KEY;
  let body: string | undefined;
  if (opts.raw !== undefined) body = opts.raw;
  else if (opts.body !== undefined) body = JSON.stringify(opts.body);
  if (body !== undefined) headers["content-type"] = "application/json";
  return exports.default.fetch(`http://edge.test${path}`, { method: opts.method ?? (body === undefined ? "GET" : "POST"), headers, body });
}

/** Calls and checks the status; returns the parsed JSON body (or null for an empty one). */
export async function expectStatus(res: Response | Promise<Response>, status: number): Promise<any> {
  const r = await res;
  const text = await r.text();
  expect({ status: r.status, body: text }).toMatchObject({ status });
  return text === "" ? null : JSON.parse(text);
}

/** Checks E2B's error body. */
export async function expectError(res: Response | Promise<Response>, status: number, message?: string | RegExp): Promise<void> {
  const body = await expectStatus(res, status);
  expect(body.code).toBe(status);
  expect(typeof body.message).toBe("string");
  if (message !== undefined) expect(body.message).toMatch(message);
}

export interface TestTeam {
  name: string;
  key: string;
  keyId: string;
  template: string;
  cluster: string;
}

/** A fresh team (unique per test file) with a key and a private template on `cluster`. */
export async function createTeam(name: string, opts: { cluster?: string; replicas?: number; spec?: Record<string, unknown> } = {}): Promise<TestTeam> {
  const created = await expectStatus(call("/api-keys", { body: { name: `${name}-key`, teamName: name } }), 201);
  const cluster = opts.cluster ?? name;
  const template = `${name}-tpl`;
  await expectStatus(
    call(`/admin/teams/${name}/templates/${template}`, { method: "PUT", body: { spec: { cluster, replicas: opts.replicas ?? 0, ...opts.spec } } }),
    201,
  );
  return { name, key: created.key, keyId: created.id, template, cluster };
}

/** Binds team `name` to `cluster` as an admin does before the cluster may act in the team's
 * namespace (the team is created first when missing, as `POST /api-keys` with `teamName` does). */
export async function bindTeam(name: string, cluster: string): Promise<void> {
  const put = () => call(`/admin/teams/${name}/clusters/${cluster}`, { method: "PUT" });
  let res = await put();
  if (res.status === 404) {
    await expectStatus(call("/api-keys", { body: { name: `${name}-bind`, teamName: name } }), 201);
    res = await put();
  }
  if (res.status !== 201 && res.status !== 200) throw new Error(`binding ${name} to ${cluster}: ${res.status} ${await res.text()}`);
}

/** Another key of the same team. */
export async function secondKey(team: TestTeam): Promise<string> {
  const created = await expectStatus(call("/api-keys", { key: team.key, body: { name: "second" } }), 201);
  return created.key;
}

export async function startAgent(cluster: string, opts: ScriptedAgentOptions = {}): Promise<ScriptedAgent> {
  const agent = new ScriptedAgent(opts);
  await agent.connect(fetchTransport((url, init) => exports.default.fetch(url, init) as never, CLUSTER_TOKEN, cluster));
  return agent;
}

/** A unique suffix so reruns against the same sqld never collide. */
export function unique(prefix: string): string {
  return `${prefix}-${Date.now().toString(36)}${Math.floor(Math.random() * 1e6).toString(36)}`;
}

/**
 * Holds back an object's end-of-turn writes (its TurnWrites, field `turn`) by `ms`, so a test can
 * restart it between a call's answer and its writes: an answer that did not wait for them is lost.
 */
export function holdTurnWrites(instance: object, ms = 300): void {
  const turn = (instance as { turn: { flush: () => void } }).turn;
  const real = Object.getPrototypeOf(turn).flush as () => void;
  let held = false;
  turn.flush = () => {
    if (held) return;
    held = true;
    setTimeout(() => {
      held = false;
      real.call(turn);
    }, ms);
  };
}

/** Undoes holdTurnWrites. */
export function releaseTurnWrites(instance: object): void {
  delete (instance as { turn: { flush?: unknown } }).turn.flush;
}
