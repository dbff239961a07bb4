// Small helpers around the API clients: patch content types, the plurals of our resources, the
// status code and message of a failed request, tolerating the codes a retry makes harmless, and the
// claim's writes sent without the generated client's model layer.
import { ApiException, HttpMethod, IsomorphicFetchHttpLibrary, Observable, PatchStrategy, RequestContext, setHeaderOptions, type ConfigurationOptions, type CoreV1Api, type KubeConfig, type V1ObjectReference } from "@kubernetes/client-node";
import { kubeApiRequests } from "../../lib/metrics.ts";

export const mergePatch = setHeaderOptions("Content-Type", PatchStrategy.MergePatch);
export const strategicPatch = setHeaderOptions("Content-Type", PatchStrategy.StrategicMergePatch);
export const jsonPatch = setHeaderOptions("Content-Type", PatchStrategy.JsonPatch);

/** How long a status PATCH (a Sandbox's, a SandboxSet's) may go unanswered before it is aborted. */
export const STATUS_WRITE_TIMEOUT_MS = 10_000;

/** `opt` whose requests are also aborted after `ms` (the rejection's name is "TimeoutError"). A
 * write queued behind another (a pool's status flushes, a sandbox's writes: one at a time) must
 * not wait on an answer that never comes: the requests ride one pooled HTTP/2 session
 * (pooled-connections.ts), where a stuck stream is ended only by undici's own limit, 300 s, and
 * every write after it would wait that long with nothing logged. The caller retries. */
export function within(ms: number, opt: ConfigurationOptions): ConfigurationOptions {
  const abortAfter = {
    pre: (req: RequestContext) => {
      req.setSignal(AbortSignal.timeout(ms));
      return new Observable(Promise.resolve(req));
    },
    post: <R>(res: R) => new Observable(Promise.resolve(res)),
  };
  return { ...opt, middleware: [...(opt.middleware ?? []), abortAfter], middlewareMergeStrategy: "append" };
}

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

/** The part of undici's `Dispatcher` used here: client-node's request dispatchers are undici Agents
 * (pooled-connections.ts keeps one per cluster and user). */
interface RequestDispatcher {
  request(o: { origin: string; path: string; method: string; headers: Record<string, string>; body?: string }): Promise<{
    statusCode: number;
    headers: Record<string, string | string[] | undefined>;
    body: { text(): Promise<string> };
  }>;
}

/** The generated clients' User-Agent (client-node's getUserAgent is not exported). */
const USER_AGENT = "kubernetes-client-javascript/2.0.1";

/**
 * A merge patch of the object at `path` (below the cluster's server URL), its answer parsed as plain
 * JSON: what the informers' slim projections read, as the watch's objects are. The generated
 * client turns every Pod answer into its model classes (ObjectSerializer walks each field of the
 * whole pod, then slim.ts throws most of it away) through undici's WHATWG fetch; a claim writes a
 * Pod and a Sandbox, and that was a good part of the agent's CPU per claim (bench/kube.ts, s14's
 * profile). Same connection pool, authentication and request count (`applySecurityAuthentication`);
 * an error status throws the client's `ApiException` (code, body), so `tolerate` and `apiMessage`
 * read it as before.
 */
export async function patchJson(kc: KubeConfig, path: string, body: object): Promise<unknown> {
  const server = kc.getCurrentCluster()?.server;
  if (!server) throw new Error("No active cluster!");
  const ctx = new RequestContext(`${server.replace(/\/+$/, "")}${path}`, HttpMethod.PATCH);
  ctx.setHeaderParam("Content-Type", PatchStrategy.MergePatch);
  ctx.setHeaderParam("Accept", "application/json");
  ctx.setHeaderParam("User-Agent", USER_AGENT);
  ctx.setBody(JSON.stringify(body));
  await kc.applySecurityAuthentication(ctx);
  let status: number;
  let text: string;
  let headers: Record<string, unknown>;
  const dispatcher = ctx.getDispatcher() as RequestDispatcher | undefined;
  if (typeof dispatcher?.request === "function") {
    const url = new URL(ctx.getUrl());
    const res = await dispatcher.request({ origin: url.origin, path: `${url.pathname}${url.search}`, method: "PATCH", headers: ctx.getHeaders(), body: ctx.getBody() as string });
    status = res.statusCode;
    text = await res.body.text();
    headers = res.headers;
  } else {
    const res = await new IsomorphicFetchHttpLibrary().send(ctx).toPromise();
    status = res.httpStatusCode;
    text = await res.body.text();
    headers = res.headers;
  }
  if (status < 200 || status > 299) throw new ApiException(status, `PATCH ${path}: HTTP ${status}`, text, headers as Record<string, string>);
  return JSON.parse(text);
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
