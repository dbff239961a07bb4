// Connection options for the real e2b SDK, as a user would set E2B_API_URL / E2B_SANDBOX_URL /
// E2B_API_KEY after `npm start`.
import { expect, inject } from "vitest";

export function e2b() {
  const { apiUrl, apiKey } = inject("e2b");
  return { apiKey, apiUrl, sandboxUrl: apiUrl, requestTimeoutMs: 30_000 };
}

export function uniqueTag(): string {
  return `t${Date.now().toString(36)}${Math.random().toString(36).slice(2, 8)}`;
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The admin API of the tier's system (the admin team's key): the answer's JSON; a status of 300
 * or more fails the test with the body. */
export async function admin(path: string, init: { method?: string; body?: unknown } = {}): Promise<any> {
  const { apiUrl, apiKey } = inject("e2b");
  const res = await fetch(new URL(path, apiUrl), {
    method: init.method ?? (init.body === undefined ? "GET" : "POST"),
    headers: { "content-type": "application/json", "x-api-key": apiKey },
    body: init.body === undefined ? undefined : JSON.stringify(init.body),
  });
  const text = await res.text();
  expect(res.status, text).toBeLessThan(300);
  return text ? JSON.parse(text) : null;
}

/** A warm pool as the admin API's template view shows it (SandboxSet `.status` names). */
export interface PoolView {
  replicas: number;
  available: number;
  creating: number;
  updateRevision: string | null;
  currentRevision: string | null;
  updatedReplicas: number;
  updatedAvailableReplicas: number;
  maxUnavailable: number;
}

/** Every unclaimed member is ready and of the template's current revision. */
export const poolSettled = (p: PoolView) => p.available === p.replicas && p.currentRevision === p.updateRevision && p.updatedAvailableReplicas === p.replicas;
