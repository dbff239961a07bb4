// Connection options for the real e2b SDK, as a user would set E2B_API_URL / E2B_SANDBOX_URL /
// E2B_API_KEY after `npm start`.
import { inject } from "vitest";

export function e2b() {
  const { apiUrl, apiKey } = inject("e2b");
  return { apiKey, apiUrl, sandboxUrl: apiUrl, requestTimeoutMs: 30_000 };
}

export function uniqueTag(): string {
  return `t${Date.now().toString(36)}${Math.random().toString(36).slice(2, 8)}`;
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
