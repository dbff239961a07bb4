// The data-plane gateway: every request for a sandbox (by header or by host) goes through here to
// the sandbox's cluster ingress. It checks the caller's token against the sandbox's group object, wakes a paused
// sandbox whose lifecycle says so (only for a request that carried its token, or needed none: not for
// envd's /health or a signed /files URL, which anyone can send), holds a request for a sandbox whose
// pid 1 is starting again until it is back, signs the request for the ingress, and streams both
// ways without buffering.
import type { Context, MiddlewareHandler } from "hono";
import { fileSignatureRefusal } from "../../schema/envd/file-signature.ts";
import { ErrorCode } from "../../schema/errors.ts";
import { isUnnamedSignedFileRequest, MASK_HOST_HEADER, REQUEST_ID_HEADER, SIGNATURE_HEADER, signIngress } from "../../schema/ingress/signature.ts";
import { sandboxGroupStub, sandboxHandle } from "../../durable-objects/sandbox/stub.ts";
import type { RouteInfo } from "../../durable-objects/sandbox/info.ts";
import type { AppEnv, Env } from "../env.ts";
import { agentUnavailable, agentUnavailableEnd, sandboxRestarting } from "./agent-unavailable.ts";
import { guardConnectStream, isConnectStream } from "./connect-guard.ts";
import { forgetIngress, ingressUrl, signingKey } from "./ingress-client.ts";
import { ENVD_PORT, gatewayTarget, type GatewayTarget } from "./target.ts";
import { afterWake } from "../../durable-objects/operations/pause-resume.ts";
import { currentTraceparent } from "../../durable-objects/tracing/edge-tracing.ts";
import { traceGateway } from "./gateway-tracing.ts";

/** Bound on holding a request while its sandbox wakes. */
const WAKE_WAIT_MS = 15_000;
/** Bound on holding a request while its sandbox's pid 1 starts again (the local driver's restart
 * backoff grows to 60 s; its first wait is 1 s): then "retry". */
const RESTART_WAIT_MS = 15_000;

const json = (status: number, body: unknown, headers: Record<string, string> = {}) =>
  Response.json(body, { status, headers: { "access-control-allow-origin": "*", ...headers } });

/** E2B's answer for a dead, unknown or paused sandbox; the SDK's isRunning() relies on it. */
const notFound = (sandboxId: string) => json(502, { sandboxId, message: "The sandbox was not found", code: 502 });

const encoder = new TextEncoder();

/** Constant-time equality of two strings (through SHA-256, so lengths do not leak either). */
async function tokensEqual(given: string | null, expected: string): Promise<boolean> {
  if (given === null) return false;
  const [a, b] = await Promise.all([crypto.subtle.digest("SHA-256", encoder.encode(given)), crypto.subtle.digest("SHA-256", encoder.encode(expected))]);
  return crypto.subtle.timingSafeEqual(a, b);
}

/**
 * What the request may do: "owner" and "wake" reach the sandbox and resume it when it is paused
 * with auto-resume ("owner": it carried the token the port asks for; "wake": the sandbox asks for
 * none there, so anyone may); "reach" only reach it while it runs (envd's /health and signed
 * /files URLs, which envd judges itself: anyone can send one, and a wake reserves quota and runs
 * postResume hooks); "refuse". While its pid 1 starts again, only the owner's are held apart from
 * what anyone may send (`restarted`).
 */
type Access = "owner" | "wake" | "reach" | "refuse";

async function access(req: Request, url: URL, t: GatewayTarget, route: Pick<RouteInfo, "envdAccessToken" | "trafficAccessToken" | "allowPublicTraffic" | "state" | "autoResume">): Promise<Access> {
  if (t.port === ENVD_PORT) {
    // envd answers these itself: /health is public, signed /files URLs carry their own proof.
    const envdJudges = url.pathname === "/health" || (url.pathname === "/files" && url.searchParams.has("signature"));
    if (route.envdAccessToken === null) return envdJudges ? "reach" : "wake";
    // Their token is looked at only where it decides something: whether they may wake the sandbox
    // (the SDK's /health polls carry it, and would pay two digests each).
    if (envdJudges && !(route.state === "paused" && route.autoResume)) return "reach";
    if (await tokensEqual(req.headers.get("x-access-token"), route.envdAccessToken)) return "owner";
    return envdJudges ? "reach" : "refuse";
  }
  if (route.allowPublicTraffic || route.trafficAccessToken === null) return "wake";
  return (await tokensEqual(req.headers.get("e2b-traffic-access-token"), route.trafficAccessToken)) ? "owner" : "refuse";
}

/** The clusters an unnamed signed URL may belong to; one today (see docs/ARCHITECTURE.md). */
const SIGNED_URL_CLUSTERS = ["local"];

async function forward(env: Env, req: Request, url: URL, t: GatewayTarget, cluster: string, requestId: string, maskRequestHost: string | null = null): Promise<Response> {
  // The sandbox is alive as far as its group knows: no ingress means its agent is away, and the
  // client must hear "retry", not "not found" (agent-unavailable.ts).
  const base = await ingressUrl(env, cluster, Date.now());
  if (!base) return agentUnavailable(req, t.sandboxId);
  const pathAndQuery = url.pathname + url.search;
  const headers = new Headers(req.headers);
  if (t.sandboxId) headers.set("e2b-sandbox-id", t.sandboxId);
  else headers.delete("e2b-sandbox-id");
  headers.set("e2b-sandbox-port", String(t.port));
  headers.delete(MASK_HOST_HEADER);
  if (maskRequestHost && t.port !== ENVD_PORT) headers.set(MASK_HOST_HEADER, maskRequestHost.replaceAll("${PORT}", String(t.port)));
  headers.set(SIGNATURE_HEADER, await signIngress(await signingKey(env, cluster), { sandboxId: t.sandboxId, port: t.port, method: req.method, pathAndQuery }, Date.now()));
  headers.delete("host");
  // The ingress answers with it (schema/ingress/signature.ts).
  headers.set(REQUEST_ID_HEADER, requestId);
  // The gateway's span is the next hop's parent (with tracing off the caller's traceparent, if
  // any, passes through as it came).
  const traceparent = currentTraceparent();
  if (traceparent) headers.set("traceparent", traceparent);
  let upstream: Response;
  try {
    upstream = await fetch(new URL(pathAndQuery, base), {
      method: req.method,
      headers,
      body: req.method === "GET" || req.method === "HEAD" ? null : req.body,
      redirect: "manual",
    });
  } catch (err) {
    // Either the agent is away, or the ingress ended this one exchange (e.g. it answered an
    // upload early and closed while the body was still being sent). Only an ingress that does
    // not answer at all means away: one failed request must not make every other one "retry".
    if (await ingressAnswers(base)) {
      return Response.json({ code: 500, message: `the request to sandbox ${t.sandboxId || "(signed URL)"} port ${t.port} was cut on its way (${String(err)})` }, { status: 500 });
    }
    forgetIngress(cluster);
    return agentUnavailable(req, t.sandboxId);
  }
  if (!upstream.body || !isConnectStream(upstream.headers.get("content-type"))) return upstream;
  const cut = async () => {
    if (await ingressAnswers(base)) return undefined;
    forgetIngress(cluster);
    return agentUnavailableEnd(t.sandboxId);
  };
  return new Response(guardConnectStream(upstream.body, cut), upstream);
}

/** Bound on asking the ingress whether it is there at all. */
const INGRESS_PROBE_MS = 1_000;

/**
 * Whether the agent's ingress answers at all (any status: unsigned requests are refused). A cut
 * stream whose ingress does not answer was cut by the agent going away, not by the sandbox.
 */
async function ingressAnswers(base: string): Promise<boolean> {
  try {
    const res = await fetch(new URL("/", base), { method: "HEAD", signal: AbortSignal.timeout(INGRESS_PROBE_MS) });
    await res.body?.cancel();
    return true;
  } catch {
    return false;
  }
}

/** Hono middleware: handles data-plane requests, passes everything else on. */
export function gateway(): MiddlewareHandler<AppEnv> {
  return async function gateway(c, next) {
    const req = c.req.raw;
    const target = gatewayTarget(req.headers, req.headers.get("host"));
    if (!target) {
      // The control plane's requests (every create) go on without a URL parsed: only /files can
      // be a signed file request (Hono's path is req.url's, which workerd gives normalised).
      if (c.req.path !== "/files") return next();
      const url = new URL(req.url);
      if (!isUnnamedSignedFileRequest(req.method, url)) return next();
      // Anyone can send one, with no key or token: junk is refused here, not forwarded to cost the
      // agent a hash per sandbox it serves. envd's 401 shape, as the runtime would answer.
      const refusal = fileSignatureRefusal(url.searchParams.get("signature"), url.searchParams.get("signature_expiration"), Math.floor(Date.now() / 1000));
      if (refusal) return json(401, { code: 401, message: refusal });
      return traceGateway(c, url, { sandboxId: "", port: ENVD_PORT }, (id) => forward(c.env, req, url, { sandboxId: "", port: ENVD_PORT }, SIGNED_URL_CLUSTERS[0]!, id));
    }
    if ("error" in target) return json(400, { code: 400, message: target.error });
    if (req.method === "OPTIONS") {
      return new Response(null, { status: 204, headers: { "access-control-allow-origin": "*", "access-control-allow-methods": "*", "access-control-allow-headers": "*" } });
    }
    const url = new URL(req.url);
    return traceGateway(c, url, target, (id) => serve(c, req, url, target, id));
  };
}

async function serve(c: Context<AppEnv>, req: Request, url: URL, target: GatewayTarget, requestId: string): Promise<Response> {
  // Straight to the sandbox's group: one Durable Object call per request, not two (the group's
  // stub itself, not a sandboxHandle: that builds a closure per method, on every request).
  const found = await sandboxGroupStub(c.env, target.sandboxId).route(target.sandboxId);
  if (!found.ok) return notFound(target.sandboxId);
  let route = found.route;
  const may = await access(req, url, target, route);
  if (may === "refuse") {
    // envd's own answer for its port; a user port without its traffic token is refused as
    // E2B's proxy refuses it, with 403.
    if (target.port !== ENVD_PORT) return json(403, { code: 403, message: `sandbox ${target.sandboxId} port ${target.port} needs a valid e2b-traffic-access-token header (allowPublicTraffic is false)` });
    return json(401, { code: 401, message: "unauthorized access, please provide a valid access token or method signing if supported" });
  }
  if (route.restarting) {
    // Its runtime has no sandbox by that id until it is back, and the runtime's 502 would read to
    // the SDK as a killed sandbox: held until it is (what it is then is judged as any route).
    // Only its agent can say it is back: with the agent away, holding would only delay the answer
    // forward gives at once.
    if (!(await ingressUrl(c.env, route.cluster, Date.now()))) return agentUnavailable(req, target.sandboxId);
    // The owner's requests have a bound of their own, which what anyone may send (envd's /health,
    // a signed URL, a port open to all, any request to a sandbox without a token) cannot fill.
    // The SDK's /health polls count as anyone's: their token is not checked (see `access`).
    const back = await sandboxGroupStub(c.env, target.sandboxId).restarted(target.sandboxId, RESTART_WAIT_MS, may === "owner" ? "owner" : "anyone");
    if (!back.ok) {
      if (back.error.code === ErrorCode.placementTimeout) return sandboxRestarting(req, target.sandboxId, RESTART_WAIT_MS);
      if (back.error.code === ErrorCode.capacityUnavailable) return sandboxRestarting(req, target.sandboxId, "crowded");
      return notFound(target.sandboxId);
    }
    route = back.route;
  }
  if (route.state === "paused" || route.phase !== "Running") {
    // A request that proved nothing gets what a sandbox without auto-resume answers.
    if (route.state !== "paused" || !route.autoResume || may === "reach") return notFound(target.sandboxId);
    const woken = await sandboxHandle(c.env, target.sandboxId).wake(WAKE_WAIT_MS);
    if (!woken.ok) {
      if (woken.error.code === ErrorCode.sandboxNotFound || woken.error.code === ErrorCode.notFound) return notFound(target.sandboxId);
      // Its resume failed and it is paused again: a retry would not help (the wake does not resume
      // it again until a connect did), so no retry-after and not "waking up".
      if (woken.error.code === ErrorCode.resumeFailed) return json(409, { code: 409, message: woken.error.message });
      return json(503, { code: 503, message: `sandbox ${target.sandboxId} is waking up: ${woken.error.message}` }, { "retry-after": "1" });
    }
    route = woken.route;
    // postResume runs beside the request that woke it (not before: traffic waits on no hook).
    if (woken.resumed) c.executionCtx.waitUntil(afterWake(c.env, target.sandboxId, route.teamId).catch(() => {}));
  }
  return forward(c.env, req, url, target, route.cluster, requestId, route.maskRequestHost);
}
