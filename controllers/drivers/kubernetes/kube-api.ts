// Small helpers around the API clients: patch content types, the plurals of our resources, the
// status code and message of a failed request, and tolerating the codes a retry makes harmless.
import { PatchStrategy, setHeaderOptions, type CoreV1Api, type KubeConfig, type V1ObjectReference } from "@kubernetes/client-node";
import { kubeApiRequests } from "../../lib/metrics.ts";

export const mergePatch = setHeaderOptions("Content-Type", PatchStrategy.MergePatch);
export const strategicPatch = setHeaderOptions("Content-Type", PatchStrategy.StrategicMergePatch);
export const jsonPatch = setHeaderOptions("Content-Type", PatchStrategy.JsonPatch);
export const PLURAL = { sandbox: "sandboxes", sandboxSet: "sandboxsets" } as const;

/** JSON with object keys sorted, so an object compares equal to the API server's copy of it. */
export function stableJson(v: unknown): string {
  return JSON.stringify(v, (_k, val: unknown) =>
    val && typeof val === "object" && !Array.isArray(val) ? Object.fromEntries(Object.entries(val).sort(([a], [b]) => (a < b ? -1 : 1))) : val,
  );
}

export function statusCode(err: unknown): number | undefined {
  const e = err as { code?: number; statusCode?: number };
  return e?.code ?? e?.statusCode;
}

/** The API server's own message of a failed request (its Status body), else the error's. */
export function apiMessage(err: unknown): string {
  const body = (err as { body?: unknown }).body;
  try {
    const status = (typeof body === "string" ? JSON.parse(body) : body) as { message?: string } | undefined;
    if (status?.message) return status.message;
  } catch {
    // not JSON: fall through
  }
  return (err as Error).message;
}

/** Ignores 404 (already gone) and 409 AlreadyExists where a retry is harmless. */
export async function tolerate<T>(p: Promise<T>, codes: number[]): Promise<T | undefined> {
  try {
    return await p;
  } catch (err) {
    if (codes.includes(statusCode(err) ?? 0)) return undefined;
    throw err;
  }
}

/** Creates an Event about `about`; best effort (refused or failed: logged, never thrown). A given
 * `name` makes it idempotent (an Event of that name already there is left as it is). */
export async function postEvent(core: CoreV1Api, about: V1ObjectReference & { name: string; namespace: string }, type: "Normal" | "Warning", reason: string, message: string, now: Date, log: (msg: string) => void, name?: string): Promise<void> {
  await tolerate(
    core.createNamespacedEvent({
      namespace: about.namespace,
      body: {
        metadata: { ...(name ? { name } : { generateName: `${about.name.slice(0, 200)}.` }), namespace: about.namespace },
        involvedObject: about,
        type,
        reason,
        message,
        source: { component: "sandbox-agent" },
        firstTimestamp: now,
        lastTimestamp: now,
        count: 1,
      },
    }),
    [403, 404, 409],
  ).catch((err) => log(`event ${reason} for ${about.kind} ${about.name}: ${(err as Error).message}`));
}

/** Resources counted by name; anything else is `other`, so the label set stays bounded. */
const RESOURCES = new Set(["pods", "events", "configmaps", "namespaces", "sandboxes", "sandboxsets", "sandboxclaims", "leases", "secrets"]);

/** The Kubernetes verb and resource of a request to the API server, from its method and URL. */
export function requestKind(method: string, url: string): { verb: string; resource: string } {
  const u = new URL(url);
  // /api/v1[/namespaces/NS]/RESOURCE[/NAME[/SUB]] or /apis/GROUP/VERSION[/namespaces/NS]/RESOURCE[/NAME[/SUB]]
  const parts = u.pathname.split("/").filter(Boolean);
  let rest = parts[0] === "api" ? parts.slice(2) : parts.slice(3);
  if (rest[0] === "namespaces" && rest.length > 2) rest = rest.slice(2);
  const resource = RESOURCES.has(rest[0] ?? "") ? rest[0]! : "other";
  const named = rest.length > 1;
  const m = method.toUpperCase();
  const verb = m === "GET" ? (u.searchParams.get("watch") === "true" ? "watch" : named ? "get" : "list") : m === "POST" ? "create" : m === "PUT" ? "update" : m === "PATCH" ? "patch" : m === "DELETE" ? (named ? "delete" : "deletecollection") : "other";
  return { verb, resource };
}

/**
 * Counts every request made with this KubeConfig (the API clients and the watches all authenticate
 * through `applySecurityAuthentication`, once per request): one counter increment each.
 */
export function countRequests(kc: KubeConfig): void {
  const apply = kc.applySecurityAuthentication.bind(kc);
  kc.applySecurityAuthentication = async (ctx) => {
    kubeApiRequests.inc(requestKind(ctx.getHttpMethod(), ctx.getUrl()));
    return apply(ctx);
  };
}
